"""Faults an operator must see: a consumer killed without a goodbye shows dead in `svcctl status`
and in the metrics; a stopped PostgreSQL makes `/readyz` answer 503 naming the database while
`/healthz` still answers, and `/readyz` recovers when the database is back.

On the session's private PostgreSQL and Redis (tests/faults_fixtures.py), which may be stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys

import requests

from tests.faults_fixtures import *  # noqa: F403  (fixtures)
from tests.live import ROOT, LiveService, env_for, wait_until
from tests.operations_fixtures import parse, total


def status(service: LiveService) -> dict:
    result = subprocess.run([sys.executable, "-m", "svcctl.main", "status", "--json"], cwd=ROOT, env=service.env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def states(service: LiveService) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"api": [], "worker": []}
    for process in status(service)["processes"]:
        found[process["kind"]].append(process["state"])
    return found


def gauge(service: LiveService, name: str, **labels) -> float:
    return total(parse(requests.get(f"{service.api_url}/metrics", timeout=10).text), name, **labels)


def readyz(service: LiveService) -> requests.Response:
    return requests.get(f"{service.api_url}/readyz", timeout=15)


def test_a_dead_consumer_and_a_stopped_database_show(private_storage, private_servers, tmp_path):
    service = LiveService(env_for(private_storage), tmp_path).start()
    try:
        wait_until(lambda: states(service) == {"worker": ["alive"], "api": ["alive", "alive"]}, timeout=20,
                   message="the first heartbeats of the consumer and the two API workers")
        assert readyz(service).json() == {"status": "ready", "checks": {
            "database": "ok", "migrations": "ok", "queue": "ok", "redis": "ok"}}

        service.kill("worker")  # SIGKILL: it never records a clean stop
        wait_until(lambda: states(service)["worker"] == ["dead"], timeout=40, interval=1,
                   message="the killed consumer to show dead")
        assert gauge(service, "svc_processes", kind="worker", state="dead") == 1
        assert gauge(service, "svc_processes", kind="worker", state="alive") == 0
        assert gauge(service, "svc_processes", kind="api", state="alive") == 2

        private_servers.postgres.stop()
        try:
            answer = readyz(service)
            assert answer.status_code == 503
            assert answer.json()["status"] == "not_ready"
            assert answer.json()["checks"]["database"].startswith("unreachable")
            assert answer.json()["checks"]["queue"] == "ok"  # Redis is up: only the database is named
            assert requests.get(f"{service.api_url}/healthz", timeout=5).status_code == 200
            assert gauge(service, "svc_state_up") == 0
        finally:
            private_servers.postgres.start()
        # Ready at the first check: no request thread answers from a connection the restart cut.
        for _ in range(10):
            assert readyz(service).json()["status"] == "ready"
    finally:
        service.stop()
