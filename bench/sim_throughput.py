"""Sends per second through GraphClient against the platform simulator.

    .venv/bin/python bench/sim_throughput.py [--url URL] [--threads 16] [--seconds 3]

Without --url two simulators are started in turn, each in a separate process (so client and
server do not share one interpreter lock), with the per-number cap lifted: one keeping its
state in memory only (the floor), one keeping it on disk in a data dir, as `svcctl sim` does;
the second's rate is printed as a share of the first's.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from messaging.client import GraphClient  # noqa: E402
from messaging.errors import PlatformError  # noqa: E402
from messaging.payloads import text_message  # noqa: E402


def start_simulator(data_dir: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = ("from messaging.simulator.server import serve_forever; "
            f"serve_forever('127.0.0.1:{port}', data_dir={data_dir!r})")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            requests.get(f"{url}/_sim/health", timeout=0.5).raise_for_status()
            return process, url
        except requests.RequestException:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("simulator did not start")


def run(url: str, threads: int, seconds: float) -> tuple[int, int, float, float]:
    """Returns (accepted, errors, elapsed seconds, this process's CPU seconds)."""
    signup = requests.post(f"{url}/_sim/signup", json={"mps": 1_000_000}, timeout=5).json()
    number_id = signup["phone_number_id"]
    client = GraphClient(url, app_id="bench", app_secret="bench", pool_size=threads)
    token = client.exchange_code(signup["code"])
    counts = [0] * threads
    errors = [0] * threads
    stop_at = time.monotonic() + seconds

    def worker(index: int) -> None:
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            try:
                client.send_message(number_id, token, text_message(f"52155{index:02d}{n:05d}1", "hi"))
                counts[index] += 1
            except PlatformError:
                errors[index] += 1

    cpu_before = os.times()
    started = time.monotonic()
    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.monotonic() - started
    cpu_after = os.times()
    cpu = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    requests.delete(f"{url}/_sim/sent", timeout=5)
    client.close()
    return sum(counts), sum(errors), elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running simulator (default: start one)")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    if args.url is not None:
        report("simulator", *run(args.url, args.threads, args.seconds), args.threads)
        return
    rates = []
    for label, data_dir in (("in memory", None), ("state on disk", tempfile.mkdtemp(prefix="sim-state-"))):
        process, url = start_simulator(data_dir)
        try:
            result = run(url, args.threads, args.seconds)
        finally:
            process.terminate()
            process.wait(timeout=10)
        rates.append(report(label, *result, args.threads))
    print(f"state on disk / in memory: {rates[1] / rates[0]:.2f}")


def report(label: str, sent: int, failed: int, elapsed: float, cpu: float, threads: int) -> float:
    print(
        f"{label}: {sent / elapsed:.0f} sends/s ({sent} accepted, {failed} errors, "
        f"{threads} threads, {elapsed:.1f} s; client CPU {cpu / max(sent, 1) * 1000:.2f} ms/send)"
    )
    return sent / elapsed


if __name__ == "__main__":
    main()
