"""A company's API keys: creating, rotating and revoking them, and authenticating a request's key.

A key reads `svc_live_{public_id}.{secret}`. Only a SHA-256 of the secret is stored: the secret
is 32 random bytes, so a slow password hash would add latency to every request and no safety.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time

import orjson

from models.clock import utcnow
from models.errors import Invalid, NotFound
from models.ids import new_id
from models.store.db import fetch_one
from models.tenancy.tables import DEFAULT_KEY_RATE_LIMIT, ApiKey, Tenant

KEY_PREFIX = "svc_live_"
USED_EVERY = 60.0
# How long a process answers from its copy of a key row: a revocation, rotation or suspension made
# anywhere (API, portal, svcctl, another host) refuses the old key within a second.
KEY_CACHE_SECONDS = 0.9
KEY_CACHE_SIZE = 10_000

SCOPES = (
    "accounts:read",
    "accounts:connect",
    "templates:read",
    "templates:write",
    "campaigns:read",
    "campaigns:write",
    "campaigns:cancel",
    "messages:write",
    "webhooks:read",
    "webhooks:write",
    "credits:read",
    "cartera:read",
    "cartera:write",
)


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _new_secret() -> str:
    return secrets.token_urlsafe(32)


def normalize_scopes(scopes: list[str]) -> list[str]:
    if "all" in scopes:
        return list(SCOPES)
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise Invalid(f"unknown scope {unknown[0]!r}; known scopes: {', '.join(SCOPES)}",
                      details={"errors": {"scopes": ["unknown scope"]}})
    if not scopes:
        raise Invalid("a key needs at least one scope", details={"errors": {"scopes": ["at least one is required"]}})
    return [scope for scope in SCOPES if scope in scopes]


def normalize_networks(blocks: list[str] | None) -> list[str] | None:
    if not blocks:
        return None
    normalized = []
    for block in blocks:
        try:
            normalized.append(str(ipaddress.ip_network(block.strip(), strict=False)))
        except ValueError:
            raise Invalid(f"{block!r} is not an IP address or CIDR block",
                          details={"errors": {"allowed_ips": ["not an IP address or CIDR block"]}}) from None
    return normalized


def create_key(tenant: Tenant, scopes: list[str], allowed_ips: list[str] | None = None,
               rate_limit: int | None = None) -> tuple[ApiKey, str]:
    """Create a key; returns it with the full key string, which is never shown again."""
    if rate_limit is not None and not 1 <= rate_limit <= 1_000_000:
        raise Invalid("the rate limit is 1 to 1000000 requests a minute",
                      details={"errors": {"rate_limit": ["1 to 1000000"]}})
    secret = _new_secret()
    key = ApiKey.create(
        public_id=new_id("key_"),
        tenant=tenant,
        secret_hash=_hash_secret(secret),
        scopes=normalize_scopes(scopes),
        allowed_ips=normalize_networks(allowed_ips),
        rate_limit=rate_limit or DEFAULT_KEY_RATE_LIMIT,
    )
    return key, f"{KEY_PREFIX}{key.public_id}.{secret}"


def get_key(public_id: str, tenant_id: int | None = None) -> ApiKey:
    """A key by id; with `tenant_id`, only that tenant's (another's is not found)."""
    condition = ApiKey.public_id == public_id
    if tenant_id is not None:
        condition &= ApiKey.tenant == tenant_id
    key = ApiKey.get_or_none(condition)
    if key is None:
        raise NotFound(f"no key {public_id}", code="key_not_found")
    return key


def rotate_key(public_id: str, tenant_id: int | None = None) -> tuple[ApiKey, str]:
    """Replace the secret of a live key, keeping its id, scopes and limits."""
    key = get_key(public_id, tenant_id)
    if key.revoked_at is not None:
        raise Invalid(f"key {public_id} is revoked", code="key_revoked")
    secret = _new_secret()
    key.secret_hash = _hash_secret(secret)
    key.rotated_at = utcnow()
    key.save()
    _forget_passed(public_id)
    return key, f"{KEY_PREFIX}{key.public_id}.{secret}"


def revoke_key(public_id: str, tenant_id: int | None = None) -> ApiKey:
    key = get_key(public_id, tenant_id)
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        key.save()
    _forget_passed(public_id)
    return key


# Compared against when no key has the token's id, so that an unknown id costs the same work as
# a known one with a wrong secret: the answer's timing does not tell which key ids exist.
_NO_SUCH_KEY = _hash_secret("no such key")


def authenticate(token: str) -> ApiKey | None:
    """The live key this token names, or None. The look-up and the comparison take the same work
    whether the key id exists or not: one row either way, and the secret compared in constant time.

    A token that passed in this process within KEY_CACHE_SECONDS is answered from memory. The
    memory is keyed by the id and the hash of the secret presented, so only the right secret can
    meet it: for anyone without it, every attempt costs the same read, and timing still tells
    nothing about which key ids exist."""
    if not token.startswith(KEY_PREFIX) or len(token) > 200:
        return None
    public_id, _, secret = token[len(KEY_PREFIX):].partition(".")
    if not public_id or not secret:
        return None
    presented, now = _hash_secret(secret), time.monotonic()
    cached = _passed.get((public_id, presented))
    if cached is not None and now - cached[0] < KEY_CACHE_SECONDS:
        key = cached[1]
    else:
        key_id, tenant_id, secret_hash, scopes, allowed_ips, rate_limit, tenant_status = _key_row(public_id)
        if not hmac.compare_digest(secret_hash or _NO_SUCH_KEY, presented) or key_id is None \
                or tenant_status != "active":
            return None
        key = ApiKey.from_row(id=key_id, public_id=public_id, tenant=tenant_id, secret_hash=secret_hash,
                              scopes=scopes, allowed_ips=allowed_ips, rate_limit=rate_limit)
        if len(_passed) >= KEY_CACHE_SIZE:
            _passed.clear()
        _passed[(public_id, presented)] = (now, key)
    _mark_used(public_id, key.id)
    return key


# (key public id, hash of the secret presented) -> (monotonic time it passed, the key as read then).
# The key is built once per read and handed to every request it answers: none of them changes it.
_passed: dict[tuple[str, str], tuple[float, ApiKey]] = {}


def _forget_passed(public_id: str) -> None:
    """This process stops answering the key from memory at once (the others within KEY_CACHE_SECONDS)."""
    for entry in [entry for entry in list(_passed) if entry[0] == public_id]:  # list(): threads insert
        _passed.pop(entry, None)


def _key_row(public_id: str) -> tuple:
    """The live key's row and its tenant's status (all None for no live key). Fixed SQL rather
    than a query rebuilt per call; the outer join answers one row (of nulls) for an unknown id too."""
    key_id, tenant_id, secret_hash, scopes, allowed_ips, rate_limit, tenant_status = fetch_one(
        'SELECT k."id", k."tenant_id", k."secret_hash", k."scopes", k."allowed_ips", k."rate_limit", t."status" '
        'FROM (SELECT 1 AS "one") AS o LEFT JOIN "api_key" AS k ON k."public_id" = ? AND k."revoked_at" IS NULL '
        'LEFT JOIN "tenant" AS t ON t."id" = k."tenant_id"', (public_id,))
    return (key_id, tenant_id, secret_hash, orjson.loads(scopes) if scopes else None,
            orjson.loads(allowed_ips) if allowed_ips else None, rate_limit, tenant_status)


# key public id -> monotonic time this process last wrote its last_used_at.
_marked: dict[str, float] = {}


def _mark_used(public_id: str, key_id: int) -> None:
    """Record when a key was used, at most once a minute per key and process: "last used" is
    read by people, and a write on every request would be paid by every request."""
    now = time.monotonic()
    if now - _marked.get(public_id, -USED_EVERY) < USED_EVERY:
        return
    _marked[public_id] = now
    ApiKey.update(last_used_at=utcnow()).where(ApiKey.id == key_id).execute()
