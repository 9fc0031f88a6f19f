"""A small threaded HTTP/1.1 server for JSON endpoints (keep-alive, one thread per connection).

`http.server.BaseHTTPRequestHandler` parses every request's headers with the `email`
package and writes each response in several system calls; that alone capped the simulator
at a few hundred requests per second on two cores. This parser reads only what a JSON API
needs (request line, headers, Content-Length or chunked body) and answers in one write.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, BinaryIO

log = logging.getLogger(__name__)

MAX_LINE = 65536
MAX_HEADERS = 100


@dataclass(slots=True)
class Request:
    method: str
    target: str  # path and query, as sent
    version: str
    headers: dict[str, str]  # names in lower case
    body: bytes


class DropConnection(Exception):
    """Raised by a handler to close the connection without answering."""


class BadRequest(Exception):
    pass


Handler = Callable[[Request], tuple[int, Any]]


class JSONHTTPServer(socketserver.ThreadingTCPServer):
    """Calls `app(request) -> (status, payload)` and answers `payload` as JSON."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256
    idle_timeout = 300.0  # seconds a keep-alive connection may sit unused
    max_body = 1 << 20

    def __init__(self, address: tuple[str, int], app: Handler) -> None:
        self.app = app
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _ConnectionHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Cut open keep-alive connections, so a stopped server stops answering on them."""
        with self._connections_lock:
            connections, self._connections = self._connections, set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection error from %s", client_address, exc_info=True)


class _ConnectionHandler(socketserver.StreamRequestHandler):
    disable_nagle_algorithm = True
    server: JSONHTTPServer

    def setup(self) -> None:
        self.timeout = self.server.idle_timeout
        super().setup()

    def handle(self) -> None:
        while True:
            try:
                request = read_request(self.rfile, self.wfile, self.server.max_body)
            except BadRequest as exc:
                self.wfile.write(encode_response(400, {"error": {"message": str(exc)}}, True))
                return
            except (TimeoutError, ConnectionError):
                return
            if request is None:
                return
            close = _wants_close(request)
            try:
                status, payload = self.server.app(request)
            except DropConnection:
                return
            try:
                self.wfile.write(encode_response(status, payload, close))
            except OSError:
                return
            if close:
                return


def read_request(rfile: BinaryIO, wfile: Any, max_body: int) -> Request | None:
    """Read one request; None when the client closed the connection between requests."""
    line = _read_line(rfile)
    while line in (b"\r\n", b"\n"):  # tolerated before a request line (RFC 9112, 2.2)
        line = _read_line(rfile)
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("malformed request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = _read_line(rfile)
        if line in (b"\r\n", b"\n", b""):
            break
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise BadRequest("malformed header line")
        headers[name.strip().lower()] = value.strip()
    else:
        raise BadRequest("too many headers")
    if headers.get("expect", "").lower() == "100-continue":
        wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _read_chunked(rfile, max_body)
    else:
        try:
            length = int(headers.get("content-length") or 0)
        except ValueError:
            raise BadRequest("invalid Content-Length") from None
        if length < 0 or length > max_body:
            raise BadRequest("body too large")
        body = rfile.read(length) if length else b""
    return Request(method, target, version, headers, body)


def _read_line(rfile: BinaryIO) -> bytes:
    line = rfile.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise BadRequest("line too long")
    return line


def _read_chunked(rfile: BinaryIO, max_body: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        size_line = _read_line(rfile).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise BadRequest("malformed chunk size") from None
        if size == 0:
            while _read_line(rfile) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        total += size
        if total > max_body:
            raise BadRequest("body too large")
        chunks.append(rfile.read(size))
        _read_line(rfile)


def _wants_close(request: Request) -> bool:
    connection = request.headers.get("connection", "").lower()
    if request.version == "HTTP/1.0":
        return connection != "keep-alive"
    return connection == "close"


_date_cache: tuple[int, str] = (0, "")


def _http_date() -> str:
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True))
    return _date_cache[1]


def encode_response(status: int, payload: Any, close: bool) -> bytes:
    body = json.dumps(payload, separators=(",", ":")).encode()
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        f"Date: {_http_date()}\r\n"
        "Content-Type: application/json; charset=UTF-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    return head.encode("latin-1") + body
