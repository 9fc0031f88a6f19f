"""The HTTP side of a delivery: one pooled, address-pinned client per process, and a signed POST.

Every POST goes to an address the SSRF guard vetted (models/events/ssrf.py): the connection is
made to that address, so no second DNS lookup happens between the check and the connection, while
TLS checks the certificate against the real hostname. Redirects are never followed, an answer is
read up to MAX_RESPONSE_READ and within TIMEOUT, and nothing here raises: a failure is a
`Response` with its error.

urllib3 opens every connection (the connect timeout, TLS, the hostname check) and keeps it in its
pool. Every POST is written and read by hand (messaging/http1.py): `requests` and http.client
spent four times the system calls' cost on each (bench/webhooks.py). No proxy from the
environment is used (it would route around the address pinning) and no cookie is kept (one
company's receiver must never set one for another's).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import ssl
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import certifi
import urllib3
from urllib3.exceptions import ClosedPoolError, ConnectTimeoutError, HTTPError, NewConnectionError
from urllib3.util.ssl_ import create_urllib3_context
from urllib3.util.ssl_match_hostname import CertificateError

from config import get_settings
from messaging import http1
from models.events import ssrf, webhooks

# Concurrent POSTs to one endpoint (a drain's sender threads); the pool keeps connections for
# four endpoints' worth.
ENDPOINT_CONCURRENCY = 8
TIMEOUT = 10.0
MAX_RESPONSE_READ = 64 * 1024
MAX_ADDRESSES = 3
MAX_POOLS = 256  # receivers' addresses with connections kept
USER_AGENT = "Service-Webhooks/1.0"
_CONNECT_TIMEOUT = urllib3.Timeout(connect=TIMEOUT)


def _ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    """The public CA store plus the configured extra CAs, built once per process."""
    context = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED)
    context.load_verify_locations(cafile=certifi.where())
    if ca_bundle:
        context.load_verify_locations(cafile=ca_bundle)
    return context


@dataclass
class Response:
    status_code: int | None
    latency_ms: int
    excerpt: str | None = None
    error: str | None = None
    retry_after: float | None = None
    unreachable: bool = False

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class _Failed(Exception):
    """No answer: `text` says why; `never_connected` when the request cannot have reached the
    server, so that another of its addresses may be tried."""

    def __init__(self, text: str, never_connected: bool = False):
        super().__init__(text)
        self.text = text
        self.never_connected = never_connected


def _url_host(address: ssrf.IPAddress) -> str:
    return f"[{address}]" if address.version == 6 else str(address)


def _failure(error: Exception) -> _Failed:
    """What went wrong (urllib3's exception, or the socket's) as the words a delivery's log keeps."""
    if isinstance(error, NewConnectionError):  # refused, unreachable (a kind of connect timeout to urllib3)
        return _Failed("connection refused or unreachable", never_connected=True)
    if isinstance(error, ConnectTimeoutError):
        return _Failed(f"connection timed out after {TIMEOUT:g} s", never_connected=True)
    if isinstance(error, TimeoutError):
        return _Failed(f"no response within {TIMEOUT:g} s")
    if isinstance(error, urllib3.exceptions.SSLError | ssl.SSLError | CertificateError):
        return _Failed(f"TLS error: {error}")
    if isinstance(error, http1.BadAnswer):  # closed without an answer, or not HTTP/1.x
        return _Failed(f"connection failed: {error}")
    return _Failed(f"connection failed: {type(error).__name__}")


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


class DeliveryClient:
    """The process's pools of connections to receivers; safe to share between threads.

    One pool per address, port and hostname: the connection goes to the vetted address, the TLS
    handshake names the hostname (SNI) and checks the certificate against it. The pools are
    looked up in a dictionary of this client's own: urllib3's PoolManager builds and normalizes a
    key on every call, which cost as much as writing the request.
    """

    def __init__(self, ca_bundle: str | None, pool_size: int = 4 * ENDPOINT_CONCURRENCY):
        self.ca_bundle = ca_bundle
        self._context = _ssl_context(ca_bundle)
        self._pool_size = pool_size
        self._pools: OrderedDict[tuple[str, int, str], urllib3.HTTPSConnectionPool] = OrderedDict()
        self._pools_lock = threading.Lock()

    def _pool(self, address: ssrf.IPAddress, target: ssrf.Target) -> urllib3.HTTPSConnectionPool:
        key = (str(address), target.port, target.hostname)
        with self._pools_lock:
            pool = self._pools.get(key)
            if pool is not None:
                self._pools.move_to_end(key)
                return pool
            pool = self._pools[key] = urllib3.HTTPSConnectionPool(
                _url_host(address), target.port, timeout=_CONNECT_TIMEOUT, maxsize=self._pool_size, block=False,
                cert_reqs="CERT_REQUIRED", ssl_context=self._context, server_hostname=target.hostname,
                assert_hostname=target.hostname)
            if len(self._pools) > MAX_POOLS:
                _key, oldest = self._pools.popitem(last=False)
                oldest.close()  # a POST using it now finishes; its connection is then closed
            return pool

    def post(self, target: ssrf.Target, addresses: list[ssrf.IPAddress], body: bytes,
             headers: dict[str, str]) -> Response:
        """POST `body` to the first vetted address that accepts a connection. Never raises."""
        started = time.monotonic()
        headers = {"User-Agent": USER_AGENT, "Content-Length": str(len(body)), **headers}
        failure = _Failed("no address to connect to", never_connected=True)
        for address in addresses[:MAX_ADDRESSES]:
            try:
                status, retry_after, excerpt = self._call(self._pool(address, target), target, headers, body)
            except _Failed as failed:
                failure = failed
                if failed.never_connected:
                    continue
                break
            return _response(status, retry_after, excerpt, started)
        return Response(None, _elapsed_ms(started), error=failure.text, unreachable=True)

    def _call(self, pool, target: ssrf.Target, headers: dict[str, str], body: bytes) -> tuple[int, str | None, bytes]:
        """The answer's status, its Retry-After header if any, and its first EXCERPT_BYTES."""
        try:
            connection = pool._get_conn()
        except ClosedPoolError:  # dropped from the pools just now, for many newer endpoints
            raise _Failed("connection failed: too many endpoints at once", never_connected=True) from None
        keep = False
        try:
            if connection.sock is None:
                # Not open yet, or the receiver closed it while it waited in the pool: urllib3 opens
                # it to the vetted address, with TLS and the hostname checked.
                try:
                    connection.connect()
                except (HTTPError, OSError, CertificateError) as error:
                    raise _failure(error) from None
            request = http1.request_bytes("POST", target.path, target.host_header, headers, body)
            try:
                connection.sock.settimeout(TIMEOUT)
                connection.sock.sendall(request)
                answer = http1.read_answer(connection.sock, "POST", limit=MAX_RESPONSE_READ,
                                           deadline=time.monotonic() + TIMEOUT)
            except (OSError, http1.BadAnswer) as error:  # the request may have arrived: no other address
                raise _failure(error) from None
            keep = answer.keep
        finally:
            if not keep:
                connection.close()
            pool._put_conn(connection)
        retry_after = answer.fields.get(b"retry-after")
        return (answer.status, None if retry_after is None else retry_after.decode("latin-1"),
                answer.body[:webhooks.EXCERPT_BYTES])


def _elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _response(status: int, retry_after: str | None, excerpt: bytes, started: float) -> Response:
    result = Response(status, _elapsed_ms(started), excerpt=excerpt.decode("utf-8", "ignore") or None)
    if 300 <= status < 400:
        result.error = f"HTTP {status}: redirects are not followed; answer 2xx at the registered URL"
    elif not result.ok:
        result.error = f"HTTP {status}"
        if status in (429, 503):
            result.retry_after = _retry_after(retry_after)
    return result


_client_lock = threading.Lock()
_client: DeliveryClient | None = None


def delivery_client() -> DeliveryClient:
    """The shared client, rebuilt only if the configured CA bundle changes."""
    global _client
    bundle = get_settings().webhook_ca_bundle
    with _client_lock:
        if _client is None or _client.ca_bundle != bundle:
            _client = DeliveryClient(bundle)
        return _client


def vetted_addresses(target: ssrf.Target) -> list[ssrf.IPAddress]:
    return ssrf.vet(target, allow_private=get_settings().webhook_allow_private)


def post_signed(client: DeliveryClient, target: ssrf.Target, addresses: list[ssrf.IPAddress], secret: str,
                event_id: str, event_name: str, body: bytes) -> Response:
    """One signed attempt; the timestamp is taken now, so each retry carries a fresh one."""
    timestamp = int(time.time())
    return client.post(target, addresses, body,
                       webhooks.signed_headers(secret, event_id, event_name, body, timestamp))
