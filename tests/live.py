"""A live service for end-to-end tests: gunicorn, a huey consumer and the simulator as real
processes on loopback, sharing one database with the test process.

Use the `live_service` fixture from `tests.live_fixtures` (import it into a test module), or
build a `LiveService` directly to control processes (kill the worker, restart it, ...).
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent


def _own_ports() -> Iterator[int]:
    """The ports this process hands out, in turn from a random start.

    They lie below the range the kernel picks from for bind(0) and outgoing connections
    (32768-60999 on Linux), so nothing else takes one between `free_port` and the server that
    binds it; each pytest-xdist worker has a slice of its own, so two workers never hand out the
    same port."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    size = (_PORTS.stop - _PORTS.start) // workers
    ports = range(_PORTS.start + worker * size, _PORTS.start + (worker + 1) * size)
    start = random.randrange(len(ports))
    return itertools.cycle([*ports[start:], *ports[:start]])


_PORTS = range(20000, 32768)
_next_port = _own_ports()


def free_port() -> int:
    """A loopback port for a server a test starts: free now, and handed out by no one else."""
    for _ in range(_PORTS.stop - _PORTS.start):
        port = next(_next_port)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port left")


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")


class LiveService:
    """Processes started with `svcctl` against the settings of a test's `storage` fixture (a
    migrated database)."""

    def __init__(self, env: dict[str, str], log_dir: Path, sim_options: list[str] | None = None,
                 web_workers: int = 2, worker_threads: int = 16):
        self.api_port = free_port()
        self.sim_port = free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.sim_url = f"http://127.0.0.1:{self.sim_port}"
        self.log_dir = log_dir
        self.sim_options = sim_options or []
        self.worker_threads = worker_threads
        self.env = {
            **os.environ,
            **env,
            "SVC_PUBLIC_URL": self.api_url,
            "SVC_GRAPH_URL": self.sim_url,
            "SVC_WEB_CONCURRENCY": str(web_workers),
            "PYTHONUNBUFFERED": "1",
        }
        self.processes: dict[str, subprocess.Popen] = {}

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        with open(self.log_dir / f"{name}.log", "ab") as log:  # the child keeps its own copy
            process = subprocess.Popen([sys.executable, "-m", "svcctl.main", *args], cwd=ROOT, env=self.env,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes[name] = process
        return process

    def start(self) -> LiveService:
        # No `svcctl db upgrade`: the test's database is a copy of a migrated template.
        self.start_sim()
        self.start_api()
        self.start_worker()
        wait_until(lambda: self._answers(f"{self.api_url}/api/v1/openapi.json"), message="the API")
        wait_until(lambda: self._answers(f"{self.sim_url}/_sim/health"), message="the simulator")
        return self

    def start_api(self, host: str = "127.0.0.1") -> subprocess.Popen:
        return self._spawn("api", ["serve", "--bind", f"{host}:{self.api_port}"])

    def start_sim(self) -> None:
        self._spawn("sim", ["sim", "--bind", f"127.0.0.1:{self.sim_port}",
                            "--webhook-url", f"{self.api_url}/platform/webhook", *self.sim_options])

    def start_worker(self, name: str = "worker", periodic: bool = True,
                     metrics_port: str | None = None) -> subprocess.Popen:
        args = ["worker", "--threads", str(self.worker_threads)]
        if not periodic:
            args.append("--no-periodic")
        if metrics_port:
            args += ["--metrics-port", metrics_port]
        return self._spawn(name, args)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        process = self.processes.pop(name)
        # The whole process group: gunicorn's and the consumer's children die with them.
        os.killpg(process.pid, sig)
        process.wait(timeout=30)

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            return requests.get(url, timeout=1).status_code < 500
        except requests.RequestException:
            return False

    def svcctl(self, *args: str) -> subprocess.CompletedProcess:
        """An administrator's command against the same storage as the processes."""
        return subprocess.run([sys.executable, "-m", "svcctl.main", *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=60)

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        stopping = [self.processes.pop(name) for name in list(self.processes)]
        for process in stopping:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        # Waited for, so a test's database is dropped only once nothing uses it any more.
        for process in stopping:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


class PaymentsLiveService(LiveService):
    """The live stack plus `svcctl payments sim`, which the API is pointed at."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        super().__init__(env, log_dir)
        self.gateway_url = f"http://127.0.0.1:{free_port()}"
        self.env["SVC_PAYMENTS_GATEWAY_URL"] = self.gateway_url

    def start(self) -> PaymentsLiveService:
        self._spawn("gateway", ["payments", "sim", "--bind", self.gateway_url.removeprefix("http://"),
                                "--duplicates", "1", "--max-delay", "0.4"])
        super().start()
        wait_until(lambda: self._answers(f"{self.gateway_url}/_sim/health"), message="the gateway simulator")
        return self


def env_for(settings) -> dict[str, str]:
    """The environment that points child processes at the same storage as `settings`."""
    env = {
        "SVC_DATA_DIR": str(settings.data_dir),
        "SVC_SECRET_KEY": settings.secret_key,
        "SVC_APP_SECRET": settings.app_secret,
        "SVC_VERIFY_TOKEN": settings.verify_token,
        "SVC_WEBHOOK_ALLOW_PRIVATE": "true" if settings.webhook_allow_private else "false",
        "SVC_QUEUE_NAME": settings.queue_name,
    }
    if settings.database_url:
        env["SVC_DATABASE_URL"] = settings.database_url
    if settings.redis_url:
        env["SVC_REDIS_URL"] = settings.redis_url
    return env
