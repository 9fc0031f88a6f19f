"""Bearer-key authentication, the IP allow-list and scopes."""

from __future__ import annotations

import ipaddress

import falcon

from api.errors import ApiError
from config import get_settings
from models import tenants
from models.tenants import ApiKey

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="api"'}


def client_ip(req: falcon.Request) -> str:
    """The socket peer, or the X-Forwarded-For hop set by the nearest trusted proxy."""
    peer = req.remote_addr or ""
    trusted = get_settings().trusted_proxies
    if not trusted:
        return peer
    hops = [hop.strip() for hop in (req.get_header("X-Forwarded-For") or "").split(",") if hop.strip()]
    candidate = peer
    # Walk from the nearest hop outwards while each hop is a proxy we trust to have set the next one.
    for hop in reversed(hops):
        try:
            if not any(ipaddress.ip_address(candidate) in network for network in trusted):
                break
        except ValueError:
            break
        candidate = hop
    return candidate


def authenticate(req: falcon.Request) -> ApiKey:
    header = req.get_header("Authorization")
    if not header:
        raise ApiError(401, "unauthorized", "missing Authorization header (Bearer API key)", headers=_CHALLENGE)
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "the Authorization header must be 'Bearer <API key>'",
                       headers=_CHALLENGE)
    key = tenants.authenticate(token.strip())
    if key is None:
        raise ApiError(401, "invalid_api_key", "the API key is invalid or revoked", headers=_CHALLENGE)
    if not key.allows_ip(client_ip(req)):
        raise ApiError(401, "unauthorized", "this API key may not be used from this address",
                       {"reason": "ip_not_allowed"}, headers=_CHALLENGE)
    return key


def require_scope(key: ApiKey, scope: str) -> None:
    if scope not in key.scopes:
        raise ApiError(403, "missing_scope", f"the API key lacks the scope {scope}", {"required_scope": scope})
