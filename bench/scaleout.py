"""The scale-out profile under load: the service's processes on loopback, with the load.

    .venv/bin/python -m bench.scaleout [--seconds 300] [--rate 100] [--hold]

starts two API nodes (gunicorn) and two queue consumers (one scheduling the periodic tasks, one
`--no-periodic`) on PostgreSQL and Redis, the platform simulator (bench/stack.py), and runs
bench/load.py's open-loop workload spread over both nodes, then checks that nothing was lost.
It is the same as `python -m bench.load --profile scaleout`. `--hold` only starts the profile,
prints its URLs and a key, and keeps it up until Ctrl-C (for trying things by hand).

PostgreSQL and Redis are the ones at --postgres (an admin URL, default
postgresql://postgres@127.0.0.1:5432) and --redis (default redis://127.0.0.1:6379/0).
"""

from __future__ import annotations

import argparse
import os
import time

from bench import load
from bench.stack import DEFAULT_POSTGRES, DEFAULT_REDIS, SCALEOUT, Stack


def hold(stack: Stack) -> None:
    stack.start()
    world = load.seed(stack, tenants=1, numbers_per_tenant=1, contacts=5)
    tenant = world.tenants[0]
    print(f"API nodes: {', '.join(stack.node_urls)}")
    print(f"simulator: {stack.sim_url}")
    print(f"key:       {tenant.key}")
    print(f"number:    {tenant.accounts[0]['id']} (phone id {tenant.accounts[0]['phone_id']})")
    print(f"logs:      {stack.log_dir}")
    print("Ctrl-C stops everything")
    try:
        while not stack.exited():
            time.sleep(1)
        print(f"exited: {stack.exited()}")
    except KeyboardInterrupt:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=os.environ.get("SVC_BENCH_PG", DEFAULT_POSTGRES))
    parser.add_argument("--redis", default=os.environ.get("SVC_BENCH_REDIS", DEFAULT_REDIS))
    parser.add_argument("--hold", action="store_true", help="only start the profile and keep it up")
    known, rest = parser.parse_known_args()
    if known.hold:
        stack = Stack(SCALEOUT, known.postgres, known.redis)
        try:
            hold(stack)
        finally:
            stack.stop()
        return
    load.main(["--profile", "scaleout", "--postgres", known.postgres, "--redis", known.redis, *rest])


if __name__ == "__main__":
    main()
