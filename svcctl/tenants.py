"""svcctl tenants: create, list, show, set (time zone, locale)."""

from __future__ import annotations

import typer

from models.clock import isoformat
from models.tenancy import credits
from models.tenancy.tables import DEFAULT_LOCALE, ApiKey, Tenant
from models.tenancy.tenants import create_tenant, get_tenant, update_tenant
from svcctl.output import JSON_OPTION, fail, record, show, table, with_database

app = typer.Typer(help="Companies (tenants).", no_args_is_help=True)
LOCALE_HELP = ("The tenant's locale: its portal's language when a reader's is unknown, and the country "
               "numbers, money and dates are written for (es_CL, es_CO, es_MX, pt_BR, en_US, ...).")


def tenant_dict(tenant: Tenant) -> dict:
    wallet = credits.wallet_of(tenant.id)
    return {
        "id": tenant.public_id,
        "name": tenant.name,
        "status": tenant.status,
        "timezone": tenant.timezone,
        "locale": tenant.locale,
        "balance": wallet.balance,
        "available_balance": wallet.available,
        "keys": ApiKey.select().where((ApiKey.tenant == tenant.id) & ApiKey.revoked_at.is_null()).count(),
        "created_at": isoformat(tenant.created_at),
    }


@app.command("create")
@with_database
def create(name: str, timezone: str = typer.Option("UTC", help="The tenant's time zone (IANA name)."),
           locale: str = typer.Option(DEFAULT_LOCALE, help=LOCALE_HELP), as_json: bool = JSON_OPTION):
    """Create a tenant with an empty wallet."""
    tenant = create_tenant(name, timezone=timezone, locale=locale)
    data = tenant_dict(tenant)
    show(data, as_json, lambda: record(data, "tenant created"))


@app.command("list")
@with_database
def list_tenants(as_json: bool = JSON_OPTION):
    """List tenants."""
    data = [tenant_dict(tenant) for tenant in Tenant.select().order_by(Tenant.id)]
    show(data, as_json, lambda: table("tenants", ("id", "name", "status", "balance", "keys", "created"),
                                      [(t["id"], t["name"], t["status"], t["balance"], t["keys"],
                                        t["created_at"]) for t in data]))


@app.command("show")
@with_database
def show_tenant(tenant_id: str, as_json: bool = JSON_OPTION):
    """Show one tenant."""
    data = tenant_dict(get_tenant(tenant_id))
    show(data, as_json, lambda: record(data))


@app.command("set")
@with_database
def set_tenant(tenant_id: str,
               timezone: str | None = typer.Option(None, help="The tenant's time zone (IANA name)."),
               locale: str | None = typer.Option(None, help=LOCALE_HELP), as_json: bool = JSON_OPTION):
    """Change a tenant's time zone or locale."""
    if timezone is None and locale is None:
        fail("nothing to change: give --timezone or --locale")
    data = tenant_dict(update_tenant(tenant_id, timezone=timezone, locale=locale))
    show(data, as_json, lambda: record(data, "tenant updated"))
