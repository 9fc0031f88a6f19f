"""The three old targets, each read as the median of several runs with a margin over its line.

    python -m bench.targets [--runs 5] [--only api|webhooks|import ...]

Runs `bench.api --rounds 3`, `bench.webhooks` and `bench.import_debts`, each as it runs alone,
taking turns (api, webhooks, import, api, ...): a burst of other work on the machine then costs
one run of each bench rather than every run of one. Prints each run's ratio by CPU and the
bench's target as the bench printed them, the median, and whether the median clears the target
by MARGIN.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass

from bench.common import ROOT

MARGIN = 0.05


@dataclass(frozen=True)
class Target:
    name: str
    command: tuple[str, ...]
    # The line of the bench's output with the run's ratio by CPU and the bench's target, as groups.
    ratio_and_target: str

    def run(self) -> tuple[float, float]:
        result = subprocess.run([sys.executable, "-m", *self.command], cwd=ROOT, capture_output=True, text=True)
        output = result.stdout + result.stderr
        found = re.search(self.ratio_and_target, output)
        if result.returncode != 0 or found is None:
            raise SystemExit(f"{' '.join(self.command)} failed ({result.returncode}):\n{output[-3000:]}")
        return float(found.group(1)), float(found.group(2))


TARGETS = {
    "api": Target("GET /credits/balance / bare Falcon", ("bench.api", "--rounds", "3"),
                  r"ratio authenticated/bare by CPU per request: ([\d.]+) \(target >= ([\d.]+)\)"),
    "webhooks": Target("webhook pipeline / bare signed POSTs", ("bench.webhooks",),
                       r"by wall clock, ([\d.]+) by CPU \(target ([\d.]+)\)"),
    "import": Target("debt import / hand-written floor", ("bench.import_debts",),
                     r"to the hand-written floor [\d.]+ wall / ([\d.]+) CPU \(target ([\d.]+)\)"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", action="append", choices=sorted(TARGETS), help="this bench only (repeatable)")
    args = parser.parse_args()
    chosen = {name: TARGETS[name] for name in args.only or TARGETS}
    ratios: dict[str, list[float]] = {name: [] for name in chosen}
    lines: dict[str, float] = {}
    for run in range(1, args.runs + 1):
        for name, target in chosen.items():
            ratio, lines[name] = target.run()
            ratios[name].append(ratio)
            print(f"run {run}/{args.runs}: {target.name} {ratio:.2f}", file=sys.stderr, flush=True)
    print(f"{'bench':<40}{'runs by CPU':<34}{'median':>8}{'needed':>8}  verdict")
    for name, target in chosen.items():
        median = statistics.median(ratios[name])
        needed = lines[name] + MARGIN
        runs = ", ".join(f"{ratio:.2f}" for ratio in ratios[name])
        print(f"{target.name:<40}{runs:<34}{median:>8.2f}{needed:>8.2f}  {'met' if median >= needed else 'not met'}")


if __name__ == "__main__":
    main()
