"""Bearer-key authentication, the IP allow-list and scopes."""

from __future__ import annotations

import threading
import time
import weakref

import falcon

from api.errors import ApiError
from config import get_settings
from config.client_address import client_ip
from models.store.counters import counters
from models.tenancy import keys
from models.tenancy.tables import ApiKey

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="api"'}

# Failed authentications (401) per client address and minute (SVC_FAILED_AUTH_LIMIT), counted in
# the shared counter store; past them every request from that address is 429 until the minute
# ends, so keys cannot be guessed at speed. A process remembers the addresses it has seen go past
# the limit (per counter store), so a blocked address costs no round trip to the store.
FAILED_AUTH_WINDOW = 60
_blocked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # store -> {address: when the block ends}
_blocked_lock = threading.Lock()


def authenticate(req: falcon.Request) -> ApiKey:
    """The request's key; 401 when there is none that may be used, 429 for an address that has
    failed too often this minute."""
    ip = client_ip(req)
    _refuse_if_blocked(ip)
    try:
        return _authenticate(req, ip)
    except ApiError:
        _count_failure(ip)
        raise


def _blocked_in(store) -> dict[str, float]:
    blocked = _blocked.get(store)
    if blocked is None:
        with _blocked_lock:
            blocked = _blocked.setdefault(store, {})
    return blocked


def _refuse_if_blocked(ip: str) -> None:
    blocked = _blocked_in(counters())
    until = blocked.get(ip)
    if until is None:
        return
    now = time.time()
    if now >= until:
        with _blocked_lock:
            blocked.pop(ip, None)
        return
    _too_many_failures(int(until - now) + 1)


def _count_failure(ip: str) -> None:
    now = time.time()
    key = f"authfail:{ip}"
    store = counters()
    failures = store.incr([key], FAILED_AUTH_WINDOW, now)[key]
    if failures > get_settings().failed_auth_limit:
        reset = FAILED_AUTH_WINDOW - int(now % FAILED_AUTH_WINDOW)
        blocked = _blocked_in(store)
        with _blocked_lock:
            if len(blocked) > 10_000:  # forget the addresses whose block has ended
                for stale in [address for address, until in blocked.items() if until <= now]:
                    del blocked[stale]
            blocked[ip] = now + reset
        _too_many_failures(reset)


def _too_many_failures(retry_after: int) -> None:
    limit = get_settings().failed_auth_limit
    raise ApiError(429, "rate_limited",
                   f"too many failed authentications from this address; retry in {retry_after} s",
                   {"scope": "failed_authentications", "limit": limit, "retry_after": retry_after},
                   headers={"Retry-After": str(retry_after), "RateLimit-Limit": str(limit),
                            "RateLimit-Remaining": "0", "RateLimit-Reset": str(retry_after)})


def _authenticate(req: falcon.Request, ip: str) -> ApiKey:
    header = req.get_header("Authorization")
    if not header:
        raise ApiError(401, "unauthorized", "missing Authorization header (Bearer API key)", headers=_CHALLENGE)
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "the Authorization header must be 'Bearer <API key>'",
                       headers=_CHALLENGE)
    key = keys.authenticate(token.strip())
    if key is None:
        raise ApiError(401, "invalid_api_key", "the API key is invalid or revoked", headers=_CHALLENGE)
    if not key.allows_ip(ip):
        raise ApiError(401, "unauthorized", "this API key may not be used from this address",
                       {"reason": "ip_not_allowed"}, headers=_CHALLENGE)
    return key


def require_scope(key: ApiKey, scope: str) -> None:
    if scope not in key.scopes:
        raise ApiError(403, "missing_scope", f"the API key lacks the scope {scope}", {"required_scope": scope})
