"""API keys: create (the key shown once), rotate (the new key shown once), revoke."""

from __future__ import annotations

import re

from config.i18n import N_
from models.store.db import atomic
from models.tenancy import keys
from models.tenancy.keys import SCOPES
from models.tenancy.tables import DEFAULT_KEY_RATE_LIMIT, ApiKey
from portal.errors import CHECK_THE_FORM
from portal.web import BASE, Refused, audit, ctx, form, page, redirect, render


def keys_of(tenant_id: int) -> list[ApiKey]:
    """Live keys first, newest first."""
    return list(ApiKey.select().where(ApiKey.tenant == tenant_id)
                .order_by(ApiKey.revoked_at.is_null(False), ApiKey.id.desc()))


def _rate_limit(raw: str) -> int | None:
    if not raw:
        return None
    if not raw.isdigit():
        raise Refused(422, CHECK_THE_FORM, N_("The rate limit is a whole number of requests a minute."))
    return int(raw)


def _show(req, resp, created: dict | None = None, status: int = 200) -> None:
    render(req, resp, "keys.html", status=status, keys=keys_of(ctx(req).tenant_id), scopes=SCOPES, created=created,
           default_rate_limit=DEFAULT_KEY_RATE_LIMIT)


class Keys:
    @page()
    def on_get(self, req, resp):
        _show(req, resp)

    @page(write="keys")
    def on_post(self, req, resp):
        fields = form(req)
        networks = [item for item in re.split(r"[\s,]+", fields.get("allowed_ips")) if item]
        with atomic():
            key, key_string = keys.create_key(ctx(req).user.tenant, fields.getlist("scopes"), networks or None,
                                              _rate_limit(fields.get("rate_limit")))
            audit(req, "key.created", key.public_id, {"scopes": key.scopes, "allowed_ips": key.allowed_ips,
                                                      "rate_limit": key.rate_limit})
        # The key is in this answer only (no-store); the page never shows it again.
        _show(req, resp, {"key": key, "secret": key_string, "verb": "created"}, status=201)


class KeyRotate:
    @page(write="keys")
    def on_post(self, req, resp, key_id: str):
        with atomic():
            key, key_string = keys.rotate_key(key_id, ctx(req).tenant_id)
            audit(req, "key.rotated", key.public_id)
        _show(req, resp, {"key": key, "secret": key_string, "verb": "rotated"})


class KeyRevoke:
    @page(write="keys")
    def on_post(self, req, resp, key_id: str):
        with atomic():
            key = keys.revoke_key(key_id, ctx(req).tenant_id)
            audit(req, "key.revoked", key.public_id)
        redirect(resp, f"{BASE}/keys", "key_revoked")


ROUTES = [
    ("/keys", Keys()),
    ("/keys/{key_id}/rotate", KeyRotate()),
    ("/keys/{key_id}/revoke", KeyRevoke()),
]
