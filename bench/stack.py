"""The service's processes on loopback, as a benchmark runs them: a profile and its `Stack`.

`embedded` is the default installation (one API node, one consumer, SQLite and the SQLite
queue); `scaleout` is two API nodes (gunicorn) and two queue consumers (one scheduling the
periodic tasks, one `--no-periodic`) on PostgreSQL and Redis. Both run the platform simulator.

PostgreSQL and Redis are the ones at the admin URL and Redis URL given (default
postgresql://postgres@127.0.0.1:5432 and redis://127.0.0.1:6379/0): a fresh database
`svc_bench_<hex>` and a queue name of its own are created and removed at the end, so a run
never touches anything else there. bench/load.py, bench/scaleout.py and the docs use it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import requests

from bench.common import ROOT, free_port

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
# Section 8's per-minute limits are still counted on every request; for a load run they are set
# high enough never to answer 429 (the per-endpoint campaign, link and webhook limits stay).
UNLIMITED = "100000000"


@dataclass(frozen=True)
class Profile:
    name: str
    nodes: int  # API nodes (gunicorn masters), each on its own port
    web_workers: int  # gunicorn workers per node
    consumers: int  # queue consumers; the first schedules the periodic tasks
    worker_threads: int = 16
    distributed: bool = False  # PostgreSQL + Redis (else SQLite and the SQLite queue)


EMBEDDED = Profile("embedded", nodes=1, web_workers=4, consumers=1)
SCALEOUT = Profile("scaleout", nodes=2, web_workers=3, consumers=2, distributed=True)
PROFILES = {profile.name: profile for profile in (EMBEDDED, SCALEOUT)}


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _descendants(pid: int, children: dict[int, list[int]]) -> Iterator[int]:
    """A process and all its live descendants (a gunicorn master and its workers)."""
    stack = [pid]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(children.get(current, []))


def tree_cpu_seconds(pid: int, children: dict[int, list[int]] | None = None) -> float:
    """CPU time (user + system) used so far by a process and its live descendants."""
    return sum(_cpu_seconds(each) for each in _descendants(pid, children or _children()))


def tree_rss_mb(pid: int, children: dict[int, list[int]] | None = None) -> float:
    """Resident memory of a process and all its descendants."""
    return sum(_rss_kb(each) for each in _descendants(pid, children or _children())) / 1024


@dataclass
class Stack:
    """One profile's processes, started with `svcctl` on a storage of its own."""

    profile: Profile
    postgres: str = DEFAULT_POSTGRES
    redis: str = DEFAULT_REDIS
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="svc-bench-")))
    extra_env: dict[str, str] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self):
        self.log_dir = self.workdir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.node_ports = [free_port() for _ in range(self.profile.nodes)]
        self.sim_port = free_port()
        self.database = None
        from cryptography.fernet import Fernet

        self.env = {
            "SVC_DATA_DIR": str(self.workdir / "data"),
            "SVC_SECRET_KEY": Fernet.generate_key().decode(),
            "SVC_APP_SECRET": "as_" + secrets.token_hex(16),
            "SVC_GRAPH_URL": self.sim_url,
            "SVC_PUBLIC_URL": self.node_urls[0],
            "SVC_WEBHOOK_ALLOW_PRIVATE": "true",
            "SVC_WEB_CONCURRENCY": str(self.profile.web_workers),
            "SVC_WORKER_THREADS": str(self.profile.worker_threads),
            "SVC_TENANT_RATE_LIMIT": UNLIMITED,
            "SVC_READ_RATE_LIMIT": UNLIMITED,
            "SVC_WRITE_RATE_LIMIT": UNLIMITED,
            "PYTHONUNBUFFERED": "1",
        }
        if self.profile.distributed:
            self.database = f"svc_bench_{uuid.uuid4().hex[:10]}"
            self.env["SVC_DATABASE_URL"] = f"{self.postgres}/{self.database}"
            self.env["SVC_REDIS_URL"] = self.redis
            self.env["SVC_QUEUE_NAME"] = f"svc-bench-{self.database}"
        self.env.update(self.extra_env)

    @property
    def node_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.node_ports]

    @property
    def sim_url(self) -> str:
        return f"http://127.0.0.1:{self.sim_port}"

    # Processes.

    def _svcctl(self, name: str, args: list[str]) -> subprocess.Popen:
        with open(self.log_dir / f"{name}.log", "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", "svcctl.main", *args], cwd=ROOT,
                                       env={**os.environ, **self.env}, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.processes[name] = process
        return process

    def start(self) -> Stack:
        if self.database:
            import psycopg2

            admin = psycopg2.connect(self.postgres + "/postgres", connect_timeout=5)
            admin.autocommit = True
            admin.cursor().execute(f'CREATE DATABASE "{self.database}"')
            admin.close()
        subprocess.run([sys.executable, "-m", "svcctl.main", "db", "upgrade"], cwd=ROOT,
                       env={**os.environ, **self.env}, check=True, capture_output=True)
        # The platform's webhooks go to the last node, the company's traffic to all of them.
        self._svcctl("sim", ["sim", "--bind", f"127.0.0.1:{self.sim_port}", "--webhook-url",
                             f"{self.node_urls[-1]}/platform/webhook"])
        for index, port in enumerate(self.node_ports):
            self._svcctl(f"api{index + 1}", ["serve", "--bind", f"127.0.0.1:{port}"])
        for index in range(self.profile.consumers):
            self._svcctl(f"worker{index + 1}", ["worker"] if index == 0 else ["worker", "--no-periodic"])
        for url in [*self.node_urls, self.sim_url]:
            self._wait(url + ("/_sim/health" if url == self.sim_url else "/api/v1/openapi.json"))
        return self

    def _wait(self, url: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise SystemExit(f"{name} exited ({process.returncode}):\n{self.log(name)[-2000:]}")
            try:
                if requests.get(url, timeout=1).status_code < 500:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise SystemExit(f"{url} did not answer within {timeout}s")

    def exited(self) -> list[str]:
        return [name for name, process in self.processes.items() if process.poll() is not None]

    def memory(self) -> dict[str, float]:
        """RSS in MB per process group: each API node (master + workers) and each consumer."""
        children = _children()
        return {name: tree_rss_mb(process.pid, children) for name, process in self.processes.items()
                if name != "sim" and process.poll() is None}

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far per process group, the simulator's included."""
        children = _children()
        return {name: tree_cpu_seconds(process.pid, children) for name, process in self.processes.items()
                if process.poll() is None}

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, keep: bool = False) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        if keep:
            return
        if self.database:
            import psycopg2
            import redis

            admin = psycopg2.connect(self.postgres + "/postgres", connect_timeout=5)
            admin.autocommit = True
            admin.cursor().execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            admin.close()
            client = redis.Redis.from_url(self.redis)
            for key in client.scan_iter(f"{self.env['SVC_QUEUE_NAME']}*"):
                client.delete(key)
        shutil.rmtree(self.workdir, ignore_errors=True)

    # The bench process's own view of the same storage (seeding and checks).

    def install_settings(self):
        from config import load_settings, use_settings
        from models.setup import init_db

        settings = use_settings(load_settings(self.env))
        init_db(settings)
        return settings
