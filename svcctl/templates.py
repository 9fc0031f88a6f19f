"""svcctl templates sync: read templates from the platform now, for one number or all."""

from __future__ import annotations

import typer

from messaging.errors import PlatformError
from models.numbers import accounts
from models.numbers.tables import MessagingAccount
from models.numbers.templates import sync_templates
from svcctl.output import JSON_OPTION, err, fail, show, table, with_database

app = typer.Typer(help="Templates of the connected numbers.", no_args_is_help=True)


def _sync_one(account: MessagingAccount) -> dict:
    try:
        return {**sync_templates(account).as_dict(), "error": None}
    except PlatformError as error:
        return {"account_id": account.public_id, "total": None, "approved": None, "deactivated": None,
                "error": str(error)}


@app.command("sync")
@with_database
def sync(account: str = typer.Option(None, "--account", help="One number (wacc_…); default: every connected one."),
         as_json: bool = JSON_OPTION):
    """Sync templates from the platform."""
    if account is not None:
        target = accounts.find_account(account)
        if not target.access_token:
            fail(f"account {account} has not finished onboarding; nothing to sync")
        result = _sync_one(target)
        if result["error"]:
            fail(f"could not sync {account}: {result['error']}")
        results = [result]
    else:
        connected = (MessagingAccount.select().where(MessagingAccount.access_token.is_null(False))
                     .order_by(MessagingAccount.id))
        results = [_sync_one(target) for target in connected]
    show(results, as_json, lambda: table(
        "templates synced", ("account", "templates", "approved", "deactivated", "error"),
        [(r["account_id"], r["total"], r["approved"], r["deactivated"], r["error"]) for r in results]))
    failed = [r["account_id"] for r in results if r["error"]]
    if failed:
        fail(f"{len(failed)} of {len(results)} numbers could not be synced: {', '.join(failed)}")
    if not results and not as_json:
        err.print("no connected numbers")
