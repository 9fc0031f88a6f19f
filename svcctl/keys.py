"""svcctl keys: create (the key is printed once), list, rotate, revoke."""

from __future__ import annotations

import typer

from models.clock import isoformat
from models.tenancy.keys import SCOPES, create_key, revoke_key, rotate_key
from models.tenancy.tables import ApiKey
from models.tenancy.tenants import get_tenant
from svcctl.output import JSON_OPTION, err, record, show, table, with_database

app = typer.Typer(help="API keys.", no_args_is_help=True)


def key_dict(key: ApiKey) -> dict:
    return {
        "id": key.public_id,
        "tenant_id": key.tenant.public_id,
        "scopes": key.scopes,
        "allowed_ips": key.allowed_ips or [],
        "rate_limit": key.rate_limit,
        "status": "revoked" if key.revoked_at else "active",
        "created_at": isoformat(key.created_at),
        "rotated_at": isoformat(key.rotated_at),
        "revoked_at": isoformat(key.revoked_at),
    }


def _print_new_key(key: ApiKey, key_string: str, as_json: bool, title: str) -> None:
    data = {**key_dict(key), "key": key_string}
    show(data, as_json, lambda: record(data, title))
    if not as_json:
        err.print("[yellow]The key is shown only now; store it safely.[/yellow]")


@app.command("create")
@with_database
def create(tenant: str = typer.Option(..., "--tenant", help="Tenant id (ten_…)."),
           scope: list[str] = typer.Option(..., "--scope", help=f"A scope, repeatable, or 'all': {', '.join(SCOPES)}"),
           allow_ip: list[str] = typer.Option(None, "--allow-ip", help="An allowed IP or CIDR block, repeatable."),
           rate_limit: int = typer.Option(None, "--rate-limit", help="Requests per minute (default 120)."),
           as_json: bool = JSON_OPTION):
    """Create a key; its secret is printed once."""
    key, key_string = create_key(get_tenant(tenant), scope, allow_ip or None, rate_limit)
    _print_new_key(key, key_string, as_json, "key created")


@app.command("list")
@with_database
def list_keys(tenant: str = typer.Option(..., "--tenant"), as_json: bool = JSON_OPTION):
    """List a tenant's keys (never their secrets)."""
    owner = get_tenant(tenant)
    data = [key_dict(key) for key in ApiKey.select().where(ApiKey.tenant == owner.id).order_by(ApiKey.id)]
    show(data, as_json, lambda: table("keys", ("id", "status", "scopes", "allowed ips", "limit/min", "created"),
                                      [(k["id"], k["status"], " ".join(k["scopes"]), " ".join(k["allowed_ips"]),
                                        k["rate_limit"], k["created_at"]) for k in data]))


@app.command("rotate")
@with_database
def rotate(key_id: str, as_json: bool = JSON_OPTION):
    """Replace a key's secret; the old one stops working at once."""
    key, key_string = rotate_key(key_id)
    _print_new_key(key, key_string, as_json, "key rotated")


@app.command("revoke")
@with_database
def revoke(key_id: str, as_json: bool = JSON_OPTION):
    """Revoke a key for good."""
    data = key_dict(revoke_key(key_id))
    show(data, as_json, lambda: record(data, "key revoked"))
