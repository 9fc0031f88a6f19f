"""What the benches share: processes on loopback, wrk runs, and memory readings."""

from __future__ import annotations

import compileall
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent


def compile_project() -> None:
    """Write the project's bytecode, as installing a service does, so that every child a bench
    times loads its modules rather than compiling them: with PYTHONDONTWRITEBYTECODE set, each
    child would compile every module it imports anew, and children importing more would pay more."""
    for package in sorted(path for path in ROOT.iterdir() if (path / "__init__.py").exists()):
        compileall.compile_dir(package, quiet=1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(url: str, timeout: float = 30.0, headers: dict | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=1, headers=headers).status_code < 500:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout}s")


def gunicorn(app: str, port: int, env: dict[str, str], workers: int) -> subprocess.Popen:
    args = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "api" / "gunicorn_settings.py"), "--chdir", str(ROOT),
            "--bind", f"127.0.0.1:{port}", "--workers", str(workers), app]
    return subprocess.Popen(args, env={**os.environ, **env}, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk(url: str, seconds: int, connections: int, threads: int = 1, headers: dict | None = None) -> dict:
    """Run wrk against url; returns requests/s, p50 and p99 latency in ms, and non-2xx count."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    args = ["wrk", "--latency", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s"]
    for name, value in (headers or {}).items():
        args += ["-H", f"{name}: {value}"]
    output = subprocess.run(args + [url], capture_output=True, text=True, check=True).stdout

    def latency(label: str) -> float:
        match = re.search(rf"^\s*{label}\s+([\d.]+)(us|ms|s)\s*$", output, re.M)
        return float(match.group(1)) * _UNITS[match.group(2)] if match else float("nan")

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    return {"rps": rps, "p50_ms": latency("50%"), "p99_ms": latency("99%"),
            "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
            "requests": int(re.search(r"(\d+) requests in", output).group(1))}


_TICK = os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(group: int) -> float:
    """User + system CPU seconds of the live processes of a process group (a server started with
    `start_new_session`: its master and workers). On two shared cores, CPU per unit is the steady
    figure; wall-clock throughput swings with whatever else runs."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # fields after the name: state, ppid, pgrp, ..., utime (11), stime (12)
            total += int(fields[11]) + int(fields[12])
    return total / _TICK


def peak_rss_mb_of_children() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
