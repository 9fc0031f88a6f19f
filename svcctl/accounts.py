"""svcctl accounts: list, show, pause, resume, set (pacing and daily limit)."""

from __future__ import annotations

import typer

from models.clock import isoformat
from models.errors import Invalid
from models.numbers import accounts
from models.numbers.accounts import ADMIN_PAUSE
from models.numbers.tables import MessagingAccount
from models.tenancy.tenants import get_tenant
from svcctl.output import JSON_OPTION, record, show, table, with_database

app = typer.Typer(help="Numbers (messaging accounts): inspect, pause, resume, pace.", no_args_is_help=True)


def account_dict(account: MessagingAccount) -> dict:
    """The API's Account, plus what only an administrator sees."""
    return {
        **account.as_dict(messages_sent_today=accounts.messages_sent_today(account.id)),
        "tenant_id": account.tenant.public_id,
        "paused_reason": account.paused_reason,
        "mps": account.mps,
        "ready": account.ready,
        "templates_synced_at": isoformat(account.templates_synced_at),
        "contacts_synced_at": isoformat(account.contacts_synced_at),
        "history_synced_at": isoformat(account.history_synced_at),
        # The coexistence sync's progress: contacts and chats imported, the platform's percentage.
        "contacts_imported": account.contacts_imported,
        "history_threads": account.history_threads,
        "history_progress": account.history_progress,
    }


def _show_one(account: MessagingAccount, as_json: bool, title: str) -> None:
    data = account_dict(MessagingAccount.get_by_id(account.id))
    show(data, as_json, lambda: record(data, title))


@app.command("list")
@with_database
def list_accounts(tenant: str = typer.Option(..., "--tenant", help="Tenant id (ten_…)."), as_json: bool = JSON_OPTION):
    """List a tenant's numbers."""
    data = [account_dict(account) for account in accounts.accounts_of(get_tenant(tenant).id)]

    def render():
        grid = table("numbers", ("id", "label", "phone", "status", "quality", "daily limit", "sent today", "mps"),
                     [(a["id"], a["label"], a["phone_number"], a["status"], a["quality_rating"],
                       "unlimited" if a["daily_limit"] is None else a["daily_limit"], a["messages_sent_today"],
                       a["mps"]) for a in data])
        grid.columns[0].no_wrap = True  # the id is what the other commands take: never cut it
        return grid

    show(data, as_json, render)


@app.command("show")
@with_database
def show_account(account_id: str, as_json: bool = JSON_OPTION):
    """Show one number."""
    _show_one(accounts.find_account(account_id), as_json, "number")


@app.command("pause")
@with_database
def pause(account_id: str, reason: str = typer.Option(None, "--reason", help="Kept with the pause."),
          as_json: bool = JSON_OPTION):
    """Pause a number: new campaigns and messages are refused, running campaigns are held."""
    account = accounts.find_account(account_id)
    if account.status == "paused":
        raise Invalid(f"account {account_id} is already paused ({account.paused_reason or 'no reason'})")
    accounts.pause_account(account.id, f"{ADMIN_PAUSE}: {reason}" if reason else ADMIN_PAUSE)
    _show_one(account, as_json, "number paused")


@app.command("resume")
@with_database
def resume(account_id: str, as_json: bool = JSON_OPTION):
    """Resume a paused number (whoever paused it: an administrator or a platform flag)."""
    account = accounts.find_account(account_id)
    if account.status != "paused":
        raise Invalid(f"account {account_id} is not paused")
    accounts.resume_account(account.id)
    _show_one(account, as_json, "number resumed")


@app.command("set")
@with_database
def set_limits(account_id: str,
               mps: int = typer.Option(None, "--mps", help="Messages per second the dispatcher paces at (1-1000; "
                                                          "coexistence numbers at most 20)."),
               daily_limit: int = typer.Option(None, "--daily-limit",
                                               help="Unique users per moving 24 h (overrides the tier)."),
               unlimited: bool = typer.Option(False, "--unlimited", help="No daily limit."),
               as_json: bool = JSON_OPTION):
    """Set a number's pacing or daily limit."""
    if mps is None and daily_limit is None and not unlimited:
        raise Invalid("nothing to set: give --mps, --daily-limit or --unlimited")
    account = accounts.set_sending_limits(accounts.find_account(account_id), mps=mps, daily_limit=daily_limit,
                                          unlimited=unlimited)
    _show_one(account, as_json, "number updated")
