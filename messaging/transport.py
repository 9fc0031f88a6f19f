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
read by hand (messaging/http1.py): urllib3's and http.client's general machinery cost several
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

from messaging import http1

# Never retried here: a retried POST /messages could send the message twice (requests' max_retries=0).
NO_RETRIES = Retry(0, read=False)
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
            answer = http1.read_answer(sock, method)
            status, body, reusable = answer.status, _decoded(answer), answer.keep
        except TimeoutError:
            raise requests.ReadTimeout(ReadTimeoutError(
                self._pool, url, f"Read timed out. (read timeout={self.timeout.read_timeout})")) from None
        except ssl.SSLError as error:
            raise requests.exceptions.SSLError(SSLError(error)) from None
        except (OSError, http1.BadAnswer) as error:
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
        return http1.request_bytes(method, url, self._host, headers, body)

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


def _decoded(answer: http1.Answer) -> bytes:
    """The body with its content encoding undone (the platform may compress what it answers)."""
    encoding = answer.fields.get(b"content-encoding", b"identity").lower()
    if encoding == b"gzip":
        return zlib.decompress(answer.body, 16 + zlib.MAX_WBITS)
    if encoding == b"deflate":
        try:
            return zlib.decompress(answer.body)
        except zlib.error:
            return zlib.decompress(answer.body, -zlib.MAX_WBITS)
    return answer.body
