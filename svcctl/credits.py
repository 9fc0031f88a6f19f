"""svcctl credits: grant, adjust, show, ledger."""

from __future__ import annotations

import typer

from models.tenancy import credits
from models.tenancy.tenants import get_tenant
from svcctl.output import JSON_OPTION, record, show, table, with_database

app = typer.Typer(help="Credits: the company-wide wallet.", no_args_is_help=True)


@app.command("grant")
@with_database
def grant(tenant: str = typer.Option(..., "--tenant"), amount: int = typer.Option(..., "--amount", min=1),
          reason: str = typer.Option(None, "--reason"),
          purchase: bool = typer.Option(False, "--purchase", help="Record as a confirmed package purchase."),
          as_json: bool = JSON_OPTION):
    """Add credits to a tenant's wallet."""
    entry = credits.grant(get_tenant(tenant).id, amount, reason=reason, purchase=purchase)
    data = entry.as_dict()
    show(data, as_json, lambda: record(data, "credits granted"))


@app.command("adjust")
@with_database
def adjust(tenant: str = typer.Option(..., "--tenant"),
           amount: int = typer.Option(..., "--amount", help="Positive adds, negative removes."),
           reason: str = typer.Option(None, "--reason"), as_json: bool = JSON_OPTION):
    """A manual correction; it never takes credits that are reserved."""
    entry = credits.adjust(get_tenant(tenant).id, amount, reason=reason)
    data = entry.as_dict()
    show(data, as_json, lambda: record(data, "wallet adjusted"))


@app.command("show")
@with_database
def show_wallet(tenant: str = typer.Option(..., "--tenant"), as_json: bool = JSON_OPTION):
    """Show a tenant's wallet."""
    data = credits.wallet_of(get_tenant(tenant).id).as_dict()
    show(data, as_json, lambda: record(data, "wallet"))


@app.command("set")
@with_database
def set_wallet(tenant: str = typer.Option(..., "--tenant"),
               status: str = typer.Option(None, "--status", help="active or paused"),
               low_balance_threshold: int = typer.Option(None, "--low-balance-threshold", min=0),
               as_json: bool = JSON_OPTION):
    """Pause or resume a wallet, or set its low-balance threshold."""
    tenant_id = get_tenant(tenant).id
    wallet = credits.wallet_of(tenant_id)
    if status is not None:
        wallet = credits.set_status(tenant_id, status)
    if low_balance_threshold is not None:
        wallet = credits.set_low_balance_threshold(tenant_id, low_balance_threshold)
    data = wallet.as_dict()
    show(data, as_json, lambda: record(data, "wallet"))


@app.command("ledger")
@with_database
def ledger(tenant: str = typer.Option(..., "--tenant"), limit: int = typer.Option(50, "--limit", min=1),
           as_json: bool = JSON_OPTION):
    """The newest ledger entries."""
    data = [entry.as_dict() for entry in credits.ledger(get_tenant(tenant).id).limit(limit)]
    show(data, as_json, lambda: table("ledger", ("id", "type", "amount", "balance", "reserved", "reference",
                                                 "created"),
                                      [(e["id"], e["type"], e["amount"], e["balance_after"], e["reserved_after"],
                                        e["reference"] or e["description"], e["created_at"]) for e in data]))
