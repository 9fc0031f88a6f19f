"""Real HTTPS receivers on loopback for webhook tests, with certificates from a trustme CA.

`Receiver` records every request (headers and raw body) and answers what its `respond` callable
says; `verify` checks a request's signature the way docs/webhooks.md tells receivers to.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import trustme

from config import get_settings

# Fixtures, for `from tests.webhooks_fixtures import *` in a test module (helpers are imported by name).
__all__ = ["webhook_ca", "webhook_settings", "receiver", "make_receiver"]

TOLERANCE_SECONDS = 300
CHUNK = 1000


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    sni: str | None = None
    peer_port: int = 0  # the sender's side of the connection: the same port, the same connection


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # close the connection without answering
    chunked: bool = False  # the body in chunks of CHUNK bytes, without Content-Length


class Receiver:
    """A threaded HTTPS server on 127.0.0.1 with a certificate for `names`."""

    def __init__(self, ca: trustme.CA, names: tuple[str, ...] = ("localhost", "127.0.0.1"),
                 respond: Callable[[Received], Reply] | None = None):
        self.requests: list[Received] = []
        self.respond = respond or (lambda request: Reply())
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 (the stdlib's naming)
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                if len(body) < length:
                    # The sender went away mid-body (a consumer killed mid-POST): no request
                    # arrived, as a real receiver would see it.
                    self.close_connection = True
                    return
                request = Received(self.path, {k: v for k, v in self.headers.items()}, body,
                                   getattr(self.connection, "sni", None), self.client_address[1])
                with receiver._lock:
                    receiver.requests.append(request)
                reply = receiver.respond(request)
                if reply.drop:
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for start in range(0, len(reply.body), CHUNK):
                        piece = reply.body[start:start + CHUNK]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format, *args):  # noqa: A002
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(*names).configure_cert(context)

        def remember_sni(sock, server_name, _context):
            sock.sni = server_name

        context.sni_callback = remember_sni
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, host: str = "127.0.0.1", path: str = "/hooks") -> str:
        return f"https://{host}:{self.port}{path}"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.02)
        raise AssertionError(f"expected {count} requests, got {len(self.requests)}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def verify(request: Received, secret: str, now: float | None = None) -> bool:
    """What a receiver does: HMAC over `timestamp.raw_body`, constant-time compare, fresh timestamp."""
    timestamp = request.headers.get("X-Service-Timestamp", "")
    signature = request.headers.get("X-Service-Signature", "")
    if not timestamp.isdigit() or abs((now or time.time()) - int(timestamp)) > TOLERANCE_SECONDS:
        return False
    expected = "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + request.body,
                                    hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


@pytest.fixture(scope="session")
def webhook_ca(tmp_path_factory) -> tuple[trustme.CA, str]:
    ca = trustme.CA()
    path = tmp_path_factory.mktemp("webhook-ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return ca, str(path)


def configure(settings, **values) -> None:
    """Change the test's settings in place. The object stays the one `init_db` and `create_app`
    were given, so no engine is reinstalled under the test's open connection."""
    for name, value in values.items():
        object.__setattr__(settings, name, value)


@pytest.fixture
def webhook_settings(storage, webhook_ca):
    """The test's settings with the receivers' CA trusted and private targets allowed."""
    configure(storage, webhook_allow_private=True, webhook_ca_bundle=webhook_ca[1])
    return storage


def set_allow_private(allowed: bool) -> None:
    configure(get_settings(), webhook_allow_private=allowed)


@pytest.fixture
def receiver(webhook_ca, webhook_settings):
    server = Receiver(webhook_ca[0])
    yield server
    server.close()


@pytest.fixture
def make_receiver(webhook_ca, webhook_settings):
    servers: list[Receiver] = []

    def make(**options) -> Receiver:
        server = Receiver(webhook_ca[0], **options)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()
