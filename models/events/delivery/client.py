"""The HTTP side of a delivery: one pooled, address-pinned client per process, and a signed POST.

Every POST goes to an address the SSRF guard vetted (models/events/ssrf.py): the URL names the
address, so no second DNS lookup happens between the check and the connection, while TLS checks
the certificate against the real hostname. Redirects are never followed, a response is read up to
MAX_RESPONSE_READ, and nothing here raises: a failure is a `Response` with its error.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import ssl
import threading
import time
from dataclasses import dataclass
from http.cookiejar import DefaultCookiePolicy

import certifi
import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.util.ssl_ import create_urllib3_context

from config import get_settings
from models.events import ssrf, webhooks

# Concurrent POSTs to one endpoint (a drain's sender threads); the pool keeps connections for
# four endpoints' worth.
ENDPOINT_CONCURRENCY = 8
TIMEOUT = 10.0
MAX_RESPONSE_READ = 64 * 1024
MAX_ADDRESSES = 3
USER_AGENT = "Service-Webhooks/1.0"


def _ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    """The public CA store plus the configured extra CAs, built once per process."""
    context = create_urllib3_context()
    context.load_verify_locations(cafile=certifi.where())
    if ca_bundle:
        context.load_verify_locations(cafile=ca_bundle)
    return context


class _PinnedAdapter(HTTPAdapter):
    """Connects to the address in the URL (one we vetted) while TLS uses the real hostname.

    The request URL names the vetted IP, so no second DNS lookup happens between our check and
    the connection; `pinned_hostname` on the request supplies SNI and the name the certificate
    must match, and the Host header carries it to the application.
    """

    def __init__(self, context: ssl.SSLContext, **options):
        self._context = context
        super().__init__(**options)

    def get_connection_with_tls_context(self, request, verify, proxies=None, cert=None):
        host_params, pool_kwargs = self.build_connection_pool_key_attributes(request, verify, cert)
        hostname = getattr(request, "pinned_hostname", None)
        if hostname:
            pool_kwargs["server_hostname"] = hostname
            pool_kwargs["assert_hostname"] = hostname
        pool_kwargs["ssl_context"] = self._context
        pool_kwargs.pop("ca_certs", None)
        return self.poolmanager.connection_from_host(**host_params, pool_kwargs=pool_kwargs)

    def cert_verify(self, conn, url, verify, cert):
        # The context already holds every CA we trust; loading a bundle file on each new
        # connection (requests' default) would only repeat that work.
        conn.cert_reqs = "CERT_REQUIRED"
        conn.ca_certs = None
        conn.ca_cert_dir = None


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


def _url_host(address: ssrf.IPAddress) -> str:
    return f"[{address}]" if address.version == 6 else str(address)


def _never_connected(error: requests.RequestException) -> bool:
    """True when the request cannot have reached the server: another address may be tried."""
    if isinstance(error, requests.ConnectTimeout):
        return True
    reason = getattr(error.args[0], "reason", None) if error.args else None
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


def _describe(error: requests.RequestException) -> str:
    if isinstance(error, requests.ConnectTimeout):
        return f"connection timed out after {TIMEOUT:g} s"
    if isinstance(error, requests.ReadTimeout):
        return f"no response within {TIMEOUT:g} s"
    if isinstance(error, requests.exceptions.SSLError):
        reason = getattr(error.args[0], "reason", None) if error.args else None
        return f"TLS error: {reason or error}"
    if _never_connected(error):
        return "connection refused or unreachable"
    return f"connection failed: {type(error).__name__}"


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
    """The process's one pooled session for webhooks; safe to share between threads."""

    def __init__(self, ca_bundle: str | None, pool_size: int = 4 * ENDPOINT_CONCURRENCY):
        self.ca_bundle = ca_bundle
        self.session = requests.Session()
        # Environment proxies would route around the address pinning; cookies set by one
        # company's receiver must never travel to another's.
        self.session.trust_env = False
        self.session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        adapter = _PinnedAdapter(_ssl_context(ca_bundle), pool_connections=256, pool_maxsize=pool_size,
                                 max_retries=0)
        self.session.mount("https://", adapter)
        self.session.mount("http://", HTTPAdapter(max_retries=0))

    def post(self, target: ssrf.Target, addresses: list[ssrf.IPAddress], body: bytes,
             headers: dict[str, str]) -> Response:
        """POST `body` to the first vetted address that accepts a connection. Never raises."""
        started = time.monotonic()
        headers = {**headers, "Host": target.host_header, "User-Agent": USER_AGENT}
        error: requests.RequestException | None = None
        for address in addresses[:MAX_ADDRESSES]:
            prepared = requests.PreparedRequest()
            prepared.prepare(method="POST", url=f"https://{_url_host(address)}:{target.port}{target.path}",
                             headers=headers, data=body)
            prepared.pinned_hostname = target.hostname  # type: ignore[attr-defined]
            try:
                # Redirects are never followed: a 3xx is a failure, and following one would
                # bypass the address check.
                response = self.session.send(prepared, timeout=TIMEOUT, allow_redirects=False, stream=True)
            except requests.RequestException as raised:
                error = raised
                if _never_connected(raised):
                    continue
                break
            return self._read(response, started)
        assert error is not None
        return Response(None, int((time.monotonic() - started) * 1000), error=_describe(error), unreachable=True)

    @staticmethod
    def _read(response: requests.Response, started: float) -> Response:
        deadline = started + TIMEOUT
        excerpt = bytearray()
        read = 0
        try:
            for chunk in response.iter_content(8192):
                if len(excerpt) < webhooks.EXCERPT_BYTES:
                    excerpt += chunk[:webhooks.EXCERPT_BYTES - len(excerpt)]
                read += len(chunk)
                # Bounded: a receiver streaming a huge or endless body costs us nothing more.
                if read >= MAX_RESPONSE_READ or time.monotonic() > deadline:
                    break
        except requests.RequestException:
            pass  # the status line already tells the outcome
        finally:
            response.close()
        status = response.status_code
        result = Response(status, int((time.monotonic() - started) * 1000),
                          excerpt=excerpt.decode("utf-8", "ignore") if excerpt else None)
        if 300 <= status < 400:
            result.error = f"HTTP {status}: redirects are not followed; answer 2xx at the registered URL"
        elif not result.ok:
            result.error = f"HTTP {status}"
            if status in (429, 503):
                result.retry_after = _retry_after(response.headers.get("Retry-After"))
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
