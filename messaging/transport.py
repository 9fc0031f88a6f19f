"""The Graph client's HTTP transport: one keep-alive pool for the platform's origin, set up once.

`requests` works out, on every call, what never changes for a client that talks to one origin:
the environment's proxy and CA settings, the pool's key (parsing the URL, asking the filesystem
whether the CA path is a directory), the CA bundle on the pool's connection, hooks, cookies and
a `Response` with its own header dictionary. Sending thousands of messages a second, that was
most of a send's CPU. Here all of it is decided when the client is made:

- the proxy the environment names for the origin (HTTPS_PROXY, NO_PROXY...), if any;
- the TLS settings: certificates verified against the environment's CA bundle
  (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE) or certifi's, loaded once into one SSL context, with the
  host name checked; a connection is never made without verification;
- one urllib3 connection pool for the origin, as large as the client's concurrency.

A call on a connection the pool has open (every send but a connection's first) is written and
read here: the request in one write, the answer's status line and headers split by hand, its body
framed by Content-Length or chunks. urllib3's and http.client's general machinery (a mail parser
for the headers, a response object with its header dictionary, retry bookkeeping) cost several
times the system calls themselves. What guards a call stays urllib3's: it opens every connection
(proxy, TLS, the connect timeout) with one `urlopen`, and a pooled connection the platform closed
is noticed before it is written to. An answer that is not plain HTTP/1.x, and any failure, closes
the connection. Failures come out as the exceptions `requests` raises for them (the same types,
the same words), translated exactly as its `HTTPAdapter` does, so
`messaging.errors.error_from_exception` classifies them as before.
"""

from __future__ import annotations

import os
import re
import ssl
import zlib
from urllib.parse import urlsplit

import requests
import urllib3
from requests.utils import DEFAULT_CA_BUNDLE_PATH, extract_zipped_paths, get_auth_from_url, select_proxy
from urllib3.connection import HTTPConnection, HTTPSConnection, _ResponseOptions
from urllib3.exceptions import (
    ClosedPoolError,
    ConnectTimeoutError,
    DecodeError,
    HTTPError,
    InvalidHeader,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
    ProxyError,
    ReadTimeoutError,
    ResponseError,
    SSLError,
)
from urllib3.util import make_headers
from urllib3.util.retry import Retry
from urllib3.util.ssl_ import create_urllib3_context

# Never retried here: a retried POST /messages could send the message twice (requests' max_retries=0).
NO_RETRIES = Retry(0, read=False)
MAX_HEAD = 65536  # bytes of status line and headers an answer may have (http.client's line limit)
_ILLEGAL_VALUE = re.compile(r"\n(?![ \t])|\r(?![ \t\n])")  # http.client's check: no header injection
_ILLEGAL_NAME = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")  # never in a request line's URL (http.client's check)


class _OneWrite:
    """A request whose body is bytes of a known length goes out in one write with its headers:
    urllib3 writes the headers and the body separately, two system calls for a small POST."""

    def request(self, method, url, body=None, headers=None, *, chunked=False, preload_content=True,
                decode_content=True, enforce_content_length=True):
        if chunked or not isinstance(body, bytes) or not headers or "Content-Length" not in headers:
            return super().request(method, url, body, headers, chunked=chunked, preload_content=preload_content,
                                   decode_content=decode_content, enforce_content_length=enforce_content_length)
        # What urllib3's request does before writing (a reused connection's timeout, what the
        # answer is read with), then the request line, the headers and the body as one message.
        if self.sock is not None:
            self.sock.settimeout(self.timeout)
        self._response_options = _ResponseOptions(
            request_method=method, request_url=url, preload_content=preload_content,
            decode_content=decode_content, enforce_content_length=enforce_content_length)
        self.putrequest(method, url, skip_accept_encoding="Accept-Encoding" in headers, skip_host="Host" in headers)
        for header, value in headers.items():
            self.putheader(header, value)
        self.endheaders(body)

    def _send_output(self, message_body=None, encode_chunked=False):
        # http.client writes the headers, then the body in a send of its own: bytes go in the same one.
        if not isinstance(message_body, bytes) or encode_chunked:
            return super()._send_output(message_body, encode_chunked=encode_chunked)
        self._buffer.extend((b"", b""))
        message = b"\r\n".join(self._buffer) + message_body
        del self._buffer[:]
        self.send(message)
        return None


class OneWriteHTTPConnection(_OneWrite, HTTPConnection):
    pass


class OneWriteHTTPSConnection(_OneWrite, HTTPSConnection):
    pass


def verified_context(environment_verify: bool | str) -> ssl.SSLContext:
    """The SSL context of every connection: certificates required and checked against the CA
    bundle (a file or a directory) the environment names, or certifi's."""
    context = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED)
    location = environment_verify if isinstance(environment_verify, str) else DEFAULT_CA_BUNDLE_PATH
    if os.path.isdir(location):
        context.load_verify_locations(capath=location)
    else:
        context.load_verify_locations(cafile=extract_zipped_paths(location))
    return context


class Transport:
    """`request(method, path_url, headers, body)` against `origin` (scheme://host[:port])."""

    def __init__(self, origin: str, *, timeout: tuple[float, float], pool_size: int):
        self.origin = origin
        self.timeout = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        scheme = urlsplit(origin).scheme.lower()
        session = requests.Session()
        environment = session.merge_environment_settings(origin, {}, None, None, None)
        session.close()
        self.proxy = select_proxy(origin, environment["proxies"])
        pool_options = {"num_pools": 4, "maxsize": pool_size, "block": False}
        if scheme == "https":
            pool_options.update(cert_reqs="CERT_REQUIRED", ssl_context=verified_context(environment["verify"]))
        if self.proxy:
            username, password = get_auth_from_url(self.proxy)
            proxy_headers = make_headers(proxy_basic_auth=f"{username}:{password}") if username else None
            self._manager = urllib3.ProxyManager(self.proxy, proxy_headers=proxy_headers, **pool_options)
        else:
            self._manager = urllib3.PoolManager(**pool_options)
        self._pool = self._manager.connection_from_url(origin)
        self._pool.ConnectionCls = OneWriteHTTPSConnection if scheme == "https" else OneWriteHTTPConnection
        # Through a proxy, a plain-HTTP request names the whole URL (an HTTPS one goes through a tunnel).
        self._absolute = bool(self.proxy) and scheme == "http"
        parts = urlsplit(origin)
        default_port = 443 if scheme == "https" else 80
        host = parts.hostname.encode("idna").decode("ascii")
        host = f"[{host}]" if ":" in host else host
        self._host = host if parts.port in (None, default_port) else f"{host}:{parts.port}"

    def close(self) -> None:
        self._manager.clear()

    def request(self, method: str, path_url: str, headers: dict[str, str], body: bytes | None) -> tuple[int, bytes]:
        """The answer's status and body; raises `requests.RequestException` when there is none."""
        url = self.origin + path_url if self._absolute else path_url
        request = self._request_bytes(method, url, headers, body)
        try:
            connection = self._pool._get_conn()
        except ClosedPoolError as error:
            raise requests.ConnectionError(error) from None
        if connection.sock is None:
            # Not open yet, or the platform closed it while it waited: urllib3 opens it.
            self._pool._put_conn(connection)
            return self._urlopen(method, url, headers, body)
        return self._on_open(connection, method, request, url)

    def _on_open(self, connection, method: str, request: bytes, url: str) -> tuple[int, bytes]:
        """One call on a pooled connection that is open. Whatever happens, the request may have
        reached the platform: every failure is one whose answer is lost."""
        sock = connection.sock
        reusable = False
        try:
            sock.settimeout(self.timeout.read_timeout)
            sock.sendall(request)
            status, body, reusable = _read_answer(sock, method)
        except TimeoutError:
            raise requests.ReadTimeout(ReadTimeoutError(
                self._pool, url, f"Read timed out. (read timeout={self.timeout.read_timeout})")) from None
        except ssl.SSLError as error:
            raise requests.exceptions.SSLError(SSLError(error)) from None
        except (OSError, _BadAnswer) as error:
            raise requests.ConnectionError(ProtocolError("Connection aborted.", error)) from None
        finally:
            if not reusable:
                connection.close()
            self._pool._put_conn(connection)
        return status, body

    def _request_bytes(self, method: str, url: str, headers: dict[str, str], body: bytes | None) -> bytes:
        """The request line, headers and body as one message, checked as http.client checks them."""
        if _CONTROL.search(url):
            raise requests.exceptions.InvalidURL(f"URL can't contain control characters. {url!r}")
        lines = [f"{method} {url} HTTP/1.1", f"Host: {self._host}", "Accept-Encoding: identity"]
        for name, value in headers.items():
            if _ILLEGAL_NAME.search(name) or _ILLEGAL_VALUE.search(value):
                raise ValueError(f"Invalid header {name!r}: {value!r}")
            lines.append(f"{name}: {value}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + body if body else head

    def _urlopen(self, method: str, url: str, headers: dict[str, str], body: bytes | None) -> tuple[int, bytes]:
        try:
            response = self._pool.urlopen(
                method, url, body=body, headers=headers, redirect=False, assert_same_host=False,
                preload_content=False, decode_content=False, retries=NO_RETRIES, timeout=self.timeout)
        except (ProtocolError, OSError) as error:
            raise requests.ConnectionError(error) from None
        except MaxRetryError as error:
            reason = error.reason
            if isinstance(reason, ConnectTimeoutError) and not isinstance(reason, NewConnectionError):
                raise requests.ConnectTimeout(error) from None
            if isinstance(reason, ResponseError):
                raise requests.exceptions.RetryError(error) from None
            if isinstance(reason, ProxyError):
                raise requests.exceptions.ProxyError(error) from None
            if isinstance(reason, SSLError):
                raise requests.exceptions.SSLError(error) from None
            raise requests.ConnectionError(error) from None
        except ClosedPoolError as error:
            raise requests.ConnectionError(error) from None
        except ProxyError as error:
            raise requests.exceptions.ProxyError(error) from None
        except (SSLError, HTTPError) as error:
            if isinstance(error, SSLError):
                raise requests.exceptions.SSLError(error) from None
            if isinstance(error, ReadTimeoutError):
                raise requests.ReadTimeout(error) from None
            if isinstance(error, InvalidHeader):
                raise requests.exceptions.InvalidHeader(error) from None
            raise
        try:
            # Read whole: the connection goes back to the pool once its body is consumed.
            return response.status, response.read(decode_content=True)
        except ProtocolError as error:
            raise requests.exceptions.ChunkedEncodingError(error) from None
        except DecodeError as error:
            raise requests.exceptions.ContentDecodingError(error) from None
        except ReadTimeoutError as error:
            raise requests.ConnectionError(error) from None
        except SSLError as error:
            raise requests.exceptions.SSLError(error) from None


class _BadAnswer(Exception):
    """What came back is not an HTTP/1.x answer this client can frame."""


def _read_answer(sock, method: str) -> tuple[int, bytes, bool]:
    """Read one answer off `sock`: (status, body, whether the connection can carry another call)."""
    data = b""
    while True:
        end = data.find(b"\r\n\r\n")
        while end < 0:
            if len(data) > MAX_HEAD:
                raise _BadAnswer("got more than 65536 bytes of headers")
            chunk = sock.recv(65536)
            if not chunk:
                raise _BadAnswer("Remote end closed connection without response")
            data += chunk
            end = data.find(b"\r\n\r\n")
        lines = data[:end].split(b"\r\n")
        data = data[end + 4:]
        version, _, rest = lines[0].partition(b" ")
        code = rest[:3]
        if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
            raise _BadAnswer(f"bad status line {lines[0][:100]!r}")
        status = int(code)
        if 100 <= status < 200:
            continue  # an interim answer (100 Continue): the real one follows
        fields: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name[-1:] in (b" ", b"\t") or line[:1] in (b" ", b"\t"):
                raise _BadAnswer(f"bad header line {line[:100]!r}")
            name = name.lower()
            value = value.strip()
            if name in fields:
                if name == b"content-length" and fields[name] != value:
                    raise _BadAnswer("conflicting Content-Length headers")
                fields[name] = fields[name] + b", " + value
            else:
                fields[name] = value
        break
    keep = version == b"HTTP/1.1" and b"close" not in fields.get(b"connection", b"").lower()
    if method == "HEAD" or status in (204, 304):
        body = b""
    elif b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        body, data = _read_chunked(sock, data)
    elif b"content-length" in fields:
        length = fields[b"content-length"].split(b",")[0].strip()
        if not length.isdigit():
            raise _BadAnswer(f"bad Content-Length {length[:30]!r}")
        length = int(length)
        while len(data) < length:
            chunk = sock.recv(max(65536, length - len(data)))
            if not chunk:
                raise _BadAnswer(f"IncompleteRead({len(data)} bytes read, {length - len(data)} more expected)")
            data += chunk
        body, data = data[:length], data[length:]
    else:
        # Framed by the end of the connection.
        keep = False
        chunks = [data]
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        body, data = b"".join(chunks), b""
    if data:
        keep = False  # more than one answer to one request: do not trust the connection again
    encoding = fields.get(b"content-encoding", b"identity").lower()
    if encoding == b"gzip":
        body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
    elif encoding == b"deflate":
        try:
            body = zlib.decompress(body)
        except zlib.error:
            body = zlib.decompress(body, -zlib.MAX_WBITS)
    return status, body, keep


def _read_chunked(sock, data: bytes) -> tuple[bytes, bytes]:
    """A chunked body, and what followed it."""
    parts = []
    while True:
        size_line, data = _chunked_line(sock, data)
        size_text = size_line.split(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise _BadAnswer(f"bad chunk size {size_text[:30]!r}") from None
        if size == 0:
            # Trailers, if any, up to the empty line that ends the body.
            while True:
                line, data = _chunked_line(sock, data)
                if not line:
                    return b"".join(parts), data
        while len(data) < size + 2:
            chunk = sock.recv(65536)
            if not chunk:
                raise _BadAnswer("connection closed inside a chunked body")
            data += chunk
        if data[size:size + 2] != b"\r\n":
            raise _BadAnswer("chunk not followed by CRLF")
        parts.append(data[:size])
        data = data[size + 2:]


def _chunked_line(sock, data: bytes) -> tuple[bytes, bytes]:
    """The next CRLF-ended line of a chunked body (without its CRLF), and what follows it."""
    line_end = data.find(b"\r\n")
    while line_end < 0:
        chunk = sock.recv(65536)
        if not chunk:
            raise _BadAnswer("connection closed inside a chunked body")
        data += chunk
        line_end = data.find(b"\r\n")
    return data[:line_end], data[line_end + 2:]
