"""The API's gunicorn worker: gunicorn's threaded worker, except that each request is read whole
by the main loop before a thread takes it, as a buffering proxy would.

Why: a thread that reads a request from its socket belongs to that client for as long as the
client takes to send it, and a handful of clients sending a byte a second can hold every thread
of every worker (no key needed: any path reads a body). Here the main loop reads every
connection with non-blocking sockets into a buffer, so a slow client costs a buffer and a file
descriptor, never a thread, and the threads only ever run requests that are already complete.

1. A connection (new, or kept alive and readable again) goes to an `Inbox` fed by the selector.
2. The inbox knows when the request is whole: the end of the header block, then the body by its
   Content-Length or by its chunked framing.
3. Limits: the header block must arrive within HEADER_TIMEOUT, the body by a deadline that
   allows MIN_BODY_RATE; a body over MAX_BODY_BYTES is refused with 413 before it is read; the
   bytes held by all inboxes of a worker are capped (503 past it).
4. A whole request is handed back to the connection's parser ("unread") and queued for a
   thread, which then never waits on the socket.

TLS is for the front proxy (README, "Running behind a proxy"): with gunicorn's own TLS this
worker reads like gunicorn's threaded worker.
"""

from __future__ import annotations

import contextlib
import re
import selectors
import socket
import time
from functools import partial

import orjson
from gunicorn.workers.gthread import ThreadWorker

from config.settings import MAX_BODY_BYTES

MAX_HEADER_BYTES = 64 * 1024
HEADER_TIMEOUT = 10.0
# A body may take BODY_GRACE plus one second per MIN_BODY_RATE bytes: 8 MiB in under three
# minutes on the slowest link we serve, a byte a second not at all.
BODY_GRACE = 10.0
MIN_BODY_RATE = 50 * 1024
MAX_BUFFERED_BYTES = 64 * 1024 * 1024
RECV_SIZE = 64 * 1024

_HEADER_END = b"\r\n\r\n"
_CONTENT_LENGTH = re.compile(rb"^content-length[ \t]*:[ \t]*(\S*)[ \t]*$", re.IGNORECASE | re.MULTILINE)
_CHUNKED = re.compile(rb"^transfer-encoding[ \t]*:.*chunked", re.IGNORECASE | re.MULTILINE)
_EXPECT_CONTINUE = re.compile(rb"^expect[ \t]*:[ \t]*100-continue[ \t]*$", re.IGNORECASE | re.MULTILINE)
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

_REASONS = {
    400: ("Bad Request", "bad_request", "the request could not be read"),
    408: ("Request Timeout", "request_timeout", "the request was not received in time"),
    413: ("Payload Too Large", "payload_too_large", f"request bodies are limited to {MAX_BODY_BYTES} bytes"),
    431: ("Request Header Fields Too Large", "headers_too_large",
          f"request headers are limited to {MAX_HEADER_BYTES} bytes"),
    503: ("Service Unavailable", "service_unavailable", "the server is busy; retry shortly"),
}


class Inbox:
    """The bytes of one request as they arrive, and whether they make a whole request yet."""

    def __init__(self, now: float):
        self.data = bytearray()
        self.deadline = now + HEADER_TIMEOUT
        self.body_start: int | None = None
        self.body_length: int | None = None  # None with chunked framing
        self.chunk_cursor = 0  # chunked framing: where the next chunk-size line starts
        # A client that sent `Expect: 100-continue` waits for a 100 before its body, which must
        # come from here: gunicorn's own would only be sent once the body is in.
        self.expects_continue = False

    def feed(self, data: bytes, now: float) -> int | None:
        """Add what arrived; 0 when the request is whole, None when more is due, else the HTTP
        status that refuses it."""
        self.data += data
        if self.body_start is None:
            # Empty lines before a request line are allowed (RFC 9112 section 2.2).
            while self.data.startswith(b"\r\n"):
                del self.data[:2]
            end = self.data.find(_HEADER_END)
            if end < 0:
                return 431 if len(self.data) > MAX_HEADER_BYTES else None
            if end > MAX_HEADER_BYTES:
                return 431
            refusal = self._read_framing(bytes(self.data[:end]), end + len(_HEADER_END), now)
            if refusal is not None:
                return refusal
        return 0 if self._body_complete() else None

    def _read_framing(self, head: bytes, body_start: int, now: float) -> int | None:
        self.body_start = body_start
        self.expects_continue = bool(_EXPECT_CONTINUE.search(head))
        if _CHUNKED.search(head):
            self.chunk_cursor = body_start
            expected = MAX_BODY_BYTES
        else:
            lengths = {match.group(1) for match in _CONTENT_LENGTH.finditer(head)}
            if len(lengths) > 1 or any(not value.isdigit() for value in lengths):
                return 400
            self.body_length = int(lengths.pop()) if lengths else 0
            if self.body_length > MAX_BODY_BYTES:
                return 413
            expected = self.body_length
        self.deadline = now + BODY_GRACE + expected / MIN_BODY_RATE
        return None

    def _body_complete(self) -> bool:
        assert self.body_start is not None
        if self.body_length is not None:
            return len(self.data) - self.body_start >= self.body_length
        return self._chunks_complete()

    def _chunks_complete(self) -> bool:
        """Walk the chunks that have arrived; whole once the last chunk and its trailers are in.
        Framing errors count as whole: gunicorn's parser then answers 400 without waiting."""
        while True:
            line_end = self.data.find(b"\r\n", self.chunk_cursor)
            if line_end < 0:
                return False
            size_text = bytes(self.data[self.chunk_cursor:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                return True
            if size == 0:
                trailers = self.data.find(b"\r\n", line_end + 2)
                while trailers >= 0 and trailers != line_end + 2:
                    # Each trailer line ends with CRLF; the block ends with an empty line.
                    line_end, trailers = trailers, self.data.find(b"\r\n", trailers + 2)
                return trailers >= 0
            next_chunk = line_end + 2 + size + 2
            if len(self.data) < next_chunk:
                return False
            if next_chunk - self.body_start > MAX_BODY_BYTES:  # type: ignore[operator]
                return True
            self.chunk_cursor = next_chunk


class BufferingThreadWorker(ThreadWorker):
    """gthread with whole-request buffering in the main loop (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.inboxes: dict = {}
        self.buffered_bytes = 0

    def enqueue_req(self, conn):
        # Every path that gives a connection to a thread comes here: a new connection, a kept
        # alive one that is readable again, and bytes of a next request already read ahead.
        if getattr(conn, "request_buffered", False) or self.cfg.is_ssl:
            conn.request_buffered = False
            super().enqueue_req(conn)
            return
        self._start_reading(conn)

    def _start_reading(self, conn) -> None:
        if conn.parser is None:
            conn.init()  # plain HTTP/1.1: only makes the parser, reads nothing
        conn.sock.setblocking(False)
        inbox = Inbox(time.monotonic())
        self.inboxes[conn] = inbox
        read_ahead = conn.parser.unreader.take_buffered()
        if read_ahead:
            self._feed(conn, inbox, read_ahead)
            if conn not in self.inboxes:
                return
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))

    def _on_readable(self, conn, sock) -> None:
        try:
            data = sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            self._feed(conn, self.inboxes[conn], data)
            return
        # The client went away before its request was whole.
        self._unregister(conn)
        self._forget(conn)
        self._close(conn)

    def _feed(self, conn, inbox: Inbox, data: bytes) -> None:
        held_before, expected_continue = len(inbox.data), inbox.expects_continue
        verdict = inbox.feed(data, time.monotonic())
        self.buffered_bytes += len(inbox.data) - held_before
        if verdict is None and self.buffered_bytes > MAX_BUFFERED_BYTES:
            verdict = 503
        if verdict is None:
            if inbox.expects_continue and not expected_continue:
                self._send(conn, _CONTINUE)
            return
        self._unregister(conn)
        self._forget(conn)
        if verdict:
            self._refuse(conn, verdict)
            return
        conn.parser.unreader.unread(bytes(inbox.data))
        conn.sock.setblocking(True)
        conn.request_buffered = True
        super().enqueue_req(conn)

    def murder_pending(self):
        super().murder_pending()
        now = time.monotonic()
        for conn, inbox in list(self.inboxes.items()):
            if now > inbox.deadline:
                self._unregister(conn)
                self._forget(conn)
                if inbox.data:
                    self._refuse(conn, 408)
                else:  # never sent a byte: closed like an idle kept-alive connection
                    self._close(conn)

    def _refuse(self, conn, status: int) -> None:
        reason, code, message = _REASONS[status]
        body = orjson.dumps({"success": False, "error": {"message": message, "code": code, "details": {}}})
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        self._send(conn, head + body)
        self._close(conn)

    @staticmethod
    def _send(conn, data: bytes) -> None:
        # Best effort on the non-blocking socket: a few hundred bytes fit any send buffer, and a
        # client that cannot take them loses nothing it was owed.
        with contextlib.suppress(OSError):
            conn.sock.send(data)

    def _unregister(self, conn) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)

    def _forget(self, conn) -> None:
        inbox = self.inboxes.pop(conn, None)
        if inbox is not None:
            self.buffered_bytes -= len(inbox.data)

    def _close(self, conn) -> None:
        self.nr_conns -= 1
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
