"""`/metrics` is not open to the network by default: without SVC_METRICS_TOKEN it is served only
to loopback clients of a process that listens on loopback only, the API (every listener of its
gunicorn) and a consumer's metrics port alike; each says which at start-up.

Live: `svcctl serve` bound on 0.0.0.0, or on loopback and beyond at once, reached from loopback
and from this host's own address beyond loopback when it has one; `svcctl worker --metrics-port`.
The rule does not depend on the storage: SQLite only.
"""

from __future__ import annotations

import ipaddress
import socket

import pytest
import requests

from tests.live import LiveService, env_for, free_port, wait_until

TOKEN = "scrape-token-0123456789"
pytestmark = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)


def address_beyond_loopback() -> str | None:
    """This host's own address beyond loopback (the one it would go out from), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # a datagram socket's connect sends nothing
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if ipaddress.ip_address(address).is_loopback else address


def origins(port: int) -> list[str]:
    """Where a client reaches a server bound on every address: loopback, and beyond it if it can."""
    beyond = address_beyond_loopback()
    return [f"http://127.0.0.1:{port}"] + ([f"http://{beyond}:{port}"] if beyond else [])


def refused_with(answer: requests.Response, status: int, code: str) -> bool:
    body = answer.json()
    return answer.status_code == status and body["success"] is False and body["error"]["code"] == code


def start_api(storage, tmp_path, host: str = "127.0.0.1", port: int | None = None, **env) -> LiveService:
    """`svcctl serve --bind HOST:api_port`, answering on 127.0.0.1:`port` (api_port by default)."""
    live = LiveService({**env_for(storage), **env}, tmp_path)
    live.start_api(host)
    wait_until(lambda: LiveService._answers(f"http://127.0.0.1:{port or live.api_port}/healthz"),
               message="the API")
    return live


def test_an_api_bound_beyond_loopback_refuses_metrics_without_a_token(storage, tmp_path):
    live = start_api(storage, tmp_path, "0.0.0.0")
    try:
        for origin in origins(live.api_port):
            assert requests.get(f"{origin}/healthz", timeout=10).status_code == 200  # reached
            assert refused_with(requests.get(f"{origin}/metrics", timeout=10), 403, "metrics_loopback_only")
        assert "/metrics: refused (403) until SVC_METRICS_TOKEN is set" in live.log("api")
        assert "listens beyond loopback (0.0.0.0)" in live.log("api")
    finally:
        live.stop()


def test_with_the_token_an_api_bound_beyond_loopback_serves_metrics_to_whoever_sends_it(storage, tmp_path):
    live = start_api(storage, tmp_path, "0.0.0.0", SVC_METRICS_TOKEN=TOKEN)
    try:
        for origin in origins(live.api_port):
            assert refused_with(requests.get(f"{origin}/metrics", timeout=10), 401, "unauthorized")
            served = requests.get(f"{origin}/metrics", timeout=10, headers={"Authorization": f"Bearer {TOKEN}"})
            assert served.status_code == 200 and "svc_state_up 1.0" in served.text
        assert "/metrics: served with SVC_METRICS_TOKEN only" in live.log("api")
        assert TOKEN not in live.log("api")
    finally:
        live.stop()


def test_an_api_on_loopback_serves_metrics_without_a_token_until_it_also_listens_beyond(storage, tmp_path):
    live = start_api(storage, tmp_path)
    try:
        assert requests.get(f"{live.api_url}/metrics", timeout=10).status_code == 200
        assert "served without a token to loopback clients only (listening on 127.0.0.1)" in live.log("api")
    finally:
        live.stop()
    # A loopback listener, and a second one beyond loopback that gunicorn's own settings add: what
    # counts is every socket the workers serve on, not the --bind the service was given.
    loopback, beyond = free_port(), free_port()
    both = tmp_path / "both"
    both.mkdir()
    live = start_api(storage, both, port=loopback,
                     GUNICORN_CMD_ARGS=f"--bind 127.0.0.1:{loopback} --bind 0.0.0.0:{beyond}")
    try:
        answer = requests.get(f"http://127.0.0.1:{loopback}/metrics", timeout=10)
        assert refused_with(answer, 403, "metrics_loopback_only")
        assert "listens beyond loopback (0.0.0.0)" in live.log("api")
    finally:
        live.stop()


@pytest.mark.parametrize(("host", "token", "served"), [("0.0.0.0", None, False), ("0.0.0.0", TOKEN, True),
                                                        ("127.0.0.1", None, True)])
def test_a_consumers_metrics_port_follows_the_same_rule(storage, tmp_path, host, token, served):
    live = LiveService({**env_for(storage), **({"SVC_METRICS_TOKEN": token} if token else {})}, tmp_path)
    port = free_port()
    live.start_worker(metrics_port=f"{host}:{port}")
    try:
        wait_until(lambda: "metrics on http://" in live.log("worker"), message="the consumer's metrics port")
        targets = origins(port) if host == "0.0.0.0" else [f"http://127.0.0.1:{port}"]
        for origin in targets:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            answer = requests.get(f"{origin}/metrics", timeout=10, headers=headers)
            if served:
                assert answer.status_code == 200 and "svc_tasks_total" in answer.text
            else:
                assert refused_with(answer, 403, "metrics_loopback_only")
        if token:
            assert refused_with(requests.get(f"{targets[-1]}/metrics", timeout=10), 401, "unauthorized")
    finally:
        live.stop()
