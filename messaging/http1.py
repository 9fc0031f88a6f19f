"""HTTP/1.1 calls on a connection that is open already, written and read by hand.

For clients that make many small calls on keep-alive connections: the Graph client's transport
(messaging/transport.py) and webhook deliveries (models/events/delivery/client.py). urllib3's and
http.client's general machinery (a mail parser for the headers, a response object with its header
dictionary, retry bookkeeping) costs several times the system calls themselves on such a call.
Here the request goes out in one write, and the answer's status line and headers are split by
hand, its body framed by Content-Length, chunks or the end of the connection. Opening a
connection (TLS, proxies, the connect timeout) stays urllib3's.
"""

from __future__ import annotations

import re
import time
from typing import NamedTuple

MAX_HEAD = 65536  # bytes of status line and headers an answer may have (http.client's line limit)
_ILLEGAL_VALUE = re.compile(r"\n(?![ \t])|\r(?![ \t\n])")  # http.client's check: no header injection
_ILLEGAL_NAME = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
_RECEIVE = 65536


class BadAnswer(Exception):
    """What came back is not an HTTP/1.x answer this reader can frame."""


class Answer(NamedTuple):
    status: int
    fields: dict[bytes, bytes]  # header names in lower case; repeated ones joined with ", "
    body: bytes  # as sent (no content decoding), cut at the reader's limit
    keep: bool  # whether the connection can carry another call


def request_bytes(method: str, target: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    """The request line, the headers and the body as one message; header names and values are
    checked as http.client checks them (ValueError)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity"]
    for name, value in headers.items():
        if _ILLEGAL_NAME.search(name) or _ILLEGAL_VALUE.search(value):
            raise ValueError(f"Invalid header {name!r}: {value!r}")
        lines.append(f"{name}: {value}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


class _Reader:
    """The socket's bytes as they arrive, each receive bounded by the deadline when there is one."""

    def __init__(self, sock, deadline: float | None):
        self.sock = sock
        self.deadline = deadline
        self.data = b""

    def more(self, wanted: int = _RECEIVE) -> bytes:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the answer took longer than allowed")
            self.sock.settimeout(left)
        return self.sock.recv(max(_RECEIVE, wanted))


def read_answer(sock, method: str, *, limit: int | None = None, deadline: float | None = None) -> Answer:
    """Read one answer off `sock`. A body longer than `limit` bytes is cut there, and the
    connection is then not kept; `deadline` (time.monotonic()) bounds the whole answer."""
    reader = _Reader(sock, deadline)
    data = b""
    while True:
        end = data.find(b"\r\n\r\n")
        while end < 0:
            if len(data) > MAX_HEAD:
                raise BadAnswer("got more than 65536 bytes of headers")
            chunk = reader.more()
            if not chunk:
                raise BadAnswer("Remote end closed connection without response")
            data += chunk
            end = data.find(b"\r\n\r\n")
        lines = data[:end].split(b"\r\n")
        data = data[end + 4:]
        version, _, rest = lines[0].partition(b" ")
        code = rest[:3]
        if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
            raise BadAnswer(f"bad status line {lines[0][:100]!r}")
        status = int(code)
        if 100 <= status < 200:
            continue  # an interim answer (100 Continue): the real one follows
        fields = _fields(lines[1:])
        break
    keep = version == b"HTTP/1.1" and b"close" not in fields.get(b"connection", b"").lower()
    room = limit if limit is not None else -1
    if method == "HEAD" or status in (204, 304):
        body = b""
    elif b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        body, data, whole = _read_chunked(reader, data, room)
        keep = keep and whole
    elif b"content-length" in fields:
        length = fields[b"content-length"].split(b",")[0].strip()
        if not length.isdigit():
            raise BadAnswer(f"bad Content-Length {length[:30]!r}")
        length = int(length)
        wanted = length if room < 0 else min(length, room)
        while len(data) < wanted:
            chunk = reader.more(wanted - len(data))
            if not chunk:
                raise BadAnswer(f"IncompleteRead({len(data)} bytes read, {length - len(data)} more expected)")
            data += chunk
        body, data = data[:wanted], data[wanted:]
        keep = keep and wanted == length
    else:
        # Framed by the end of the connection.
        keep = False
        chunks = [data]
        size = len(data)
        while (room < 0 or size < room) and (chunk := reader.more()):
            chunks.append(chunk)
            size += len(chunk)
        body, data = b"".join(chunks), b""
        if room >= 0:
            body = body[:room]
    if data:
        keep = False  # more than one answer to one request: do not trust the connection again
    return Answer(status, fields, body, keep)


def _fields(lines: list[bytes]) -> dict[bytes, bytes]:
    fields: dict[bytes, bytes] = {}
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not name or name[-1:] in (b" ", b"\t") or line[:1] in (b" ", b"\t"):
            raise BadAnswer(f"bad header line {line[:100]!r}")
        name = name.lower()
        value = value.strip()
        if name in fields:
            if name == b"content-length" and fields[name] != value:
                raise BadAnswer("conflicting Content-Length headers")
            fields[name] = fields[name] + b", " + value
        else:
            fields[name] = value
    return fields


def _read_chunked(reader: _Reader, data: bytes, room: int) -> tuple[bytes, bytes, bool]:
    """A chunked body (cut at `room` bytes unless it is negative), what followed it, and whether
    it was read to its end."""
    parts = []
    size_read = 0
    while True:
        size_line, data = _chunked_line(reader, data)
        size_text = size_line.split(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BadAnswer(f"bad chunk size {size_text[:30]!r}") from None
        if size == 0:
            # Trailers, if any, up to the empty line that ends the body.
            while True:
                line, data = _chunked_line(reader, data)
                if not line:
                    return b"".join(parts), data, True
        if 0 <= room < size_read + size:  # the cut falls in this chunk
            need = room - size_read
            while len(data) < need and (chunk := reader.more(need - len(data))):
                data += chunk
            parts.append(data[:need])
            return b"".join(parts), b"", False
        while len(data) < size + 2:
            chunk = reader.more(size + 2 - len(data))
            if not chunk:
                raise BadAnswer("connection closed inside a chunked body")
            data += chunk
        if data[size:size + 2] != b"\r\n":
            raise BadAnswer("chunk not followed by CRLF")
        parts.append(data[:size])
        size_read += size
        data = data[size + 2:]


def _chunked_line(reader: _Reader, data: bytes) -> tuple[bytes, bytes]:
    """The next CRLF-ended line of a chunked body (without its CRLF), and what follows it."""
    line_end = data.find(b"\r\n")
    while line_end < 0:
        chunk = reader.more()
        if not chunk:
            raise BadAnswer("connection closed inside a chunked body")
        data += chunk
        line_end = data.find(b"\r\n")
    return data[:line_end], data[line_end + 2:]
