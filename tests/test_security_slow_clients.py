"""Clients that send slowly cannot stall the API (config/http_worker.py), and the worker that
reads every request whole still speaks HTTP/1.1 as clients expect: keep-alive, pipelining,
chunked bodies, `Expect: 100-continue`, early refusals in the error envelope."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from config import load_settings, use_settings
from models import setup
from models.store import db as database
from tests.conftest import base_env
from tests.live import ROOT, env_for, free_port, wait_until

WEB_WORKERS = 2
WEB_THREADS = 4
SLOW_CLIENTS = 40  # five times the threads of every worker together


@pytest.fixture(scope="module")
def api(tmp_path_factory, sqlite_template):
    """`svcctl serve` alone on a SQLite copy, and a key of a company that is not the attacker."""
    from models.tenancy.keys import create_key
    from models.tenancy.tenants import create_tenant

    directory = tmp_path_factory.mktemp("slow-clients")
    settings = load_settings(base_env(directory / "data"))
    settings.data_dir.mkdir(parents=True)
    shutil.copy(sqlite_template, settings.sqlite_path)
    use_settings(settings)
    setup.init_db(settings)
    with database.connection():
        _key, key_string = create_key(create_tenant("Bystander"), ["all"])
    database.db.close_all()

    port = free_port()
    env = {**env_for(settings), "SVC_WEB_CONCURRENCY": str(WEB_WORKERS), "SVC_WEB_THREADS": str(WEB_THREADS)}
    with open(directory / "api.log", "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "svcctl.main", "serve", "--bind", f"127.0.0.1:{port}"],
                                   cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _answers(url + "/api/v1/openapi.json"), message="the API")
    yield url, port, {"Authorization": f"Bearer {key_string}"}
    process.terminate()
    process.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code < 500
    except requests.RequestException:
        return False


class SlowClient:
    """Sends a request's headers, then its body one byte at a time, as slowly as told."""

    def __init__(self, port: int, interval: float):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.interval = interval
        self.answer = b""
        self.sock.sendall(b"POST /platform/webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100000\r\n\r\n")
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        self.sock.settimeout(self.interval)
        try:
            while True:
                self.sock.sendall(b"{")
                try:
                    chunk = self.sock.recv(4096)
                except TimeoutError:
                    continue
                self.answer += chunk
                if not chunk or b"\r\n\r\n" in self.answer:
                    return
        except OSError:
            return
        finally:
            self.sock.close()


@pytest.mark.timing
def test_slow_clients_do_not_delay_anyone_else(api):
    url, port, headers = api
    slow = [SlowClient(port, interval=1.0) for _ in range(SLOW_CLIENTS)]
    with requests.Session() as session:
        for _ in range(20):
            started = time.monotonic()
            response = session.get(url + "/api/v1/health", headers=headers, timeout=5)
            assert response.status_code == 200
            assert time.monotonic() - started < 1.0
    with ThreadPoolExecutor(16) as pool:
        timings = list(pool.map(lambda _: _timed_get(url + "/api/v1/health", headers), range(64)))
    assert all(status == 200 for status, _ in timings)
    assert max(seconds for _, seconds in timings) < 1.0

    # The slow ones are not served forever: each is refused with 408 once its body is overdue.
    for client in slow:
        client.thread.join(timeout=60)
        assert client.answer.startswith(b"HTTP/1.1 408 ")
        body = json.loads(client.answer.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["code"] == "request_timeout"


def _timed_get(url: str, headers: dict) -> tuple[int, float]:
    started = time.monotonic()
    status = requests.get(url, headers=headers, timeout=5).status_code
    return status, time.monotonic() - started


def test_headers_that_never_end_are_cut_off(api):
    url, port, headers = api
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n")
        sock.settimeout(30)
        for _ in range(6):  # a header line now and then, never the blank line that ends them
            sock.sendall(b"X-Slow: 1\r\n")
            time.sleep(0.5)
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert requests.get(url + "/api/v1/health", headers=headers, timeout=5).status_code == 200


def test_an_oversized_body_is_refused_before_it_is_sent(api):
    _url, port, _headers = api
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /platform/webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 9000000\r\n\r\n")
        sock.settimeout(10)
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "payload_too_large"


def test_kept_alive_and_pipelined_requests_are_all_answered(api):
    _url, port, headers = api
    auth = headers["Authorization"].encode()
    request = b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: " + auth + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request * 3)
        sock.settimeout(10)
        answers = b""
        while answers.count(b"HTTP/1.1 200 ") < 3:
            chunk = sock.recv(65536)
            assert chunk, answers
            answers += chunk
        # The same connection takes a fourth, after a pause.
        sock.sendall(request)
        while answers.count(b"HTTP/1.1 200 ") < 4:
            chunk = sock.recv(65536)
            assert chunk, answers
            answers += chunk


def _access_request(email: str) -> bytes:
    return json.dumps({"company_name": "Acme", "contact_name": "Ana", "contact_email": email}).encode()


def test_chunked_and_expect_continue_bodies_reach_the_endpoint(api):
    url, port, _headers = api
    body = _access_request("chunked@acme.test")

    def pieces():
        yield body[:10]
        yield body[10:]

    chunked = requests.post(url + "/api/v1/access-requests", data=pieces(), timeout=10,
                            headers={"Content-Type": "application/json"})
    assert chunked.request.headers.get("Transfer-Encoding") == "chunked"
    assert chunked.status_code == 201, chunked.text
    assert chunked.json()["data"]["status"] == "pending"

    body = _access_request("expect@acme.test")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.putrequest("POST", "/api/v1/access-requests")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(len(body)))
    connection.putheader("Expect", "100-continue")
    connection.endheaders()
    # The client waits for the go-ahead before its body, as curl does.
    assert connection.sock.recv(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
    connection.send(body)
    answer = connection.getresponse()
    assert answer.status == 201
    assert json.loads(answer.read())["data"]["status"] == "pending"
    connection.close()
