"""svcctl templates: sync them from the platform now (one number or all); create one from a JSON
file or stdin (the platform's `message_templates` shape, as the API takes it) and delete one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from messaging.errors import PlatformError
from models.errors import Invalid
from models.numbers import accounts, template_authoring
from models.numbers.tables import MessagingAccount
from models.numbers.templates import sync_templates
from svcctl.output import JSON_OPTION, err, fail, plain, record, show, styled, table, with_database

# A template is a few kilobytes; a file far past that is not one.
MAX_TEMPLATE_FILE = 1024 * 1024

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


@app.command("create")
@with_database
def create(account: str = typer.Option(..., "--account", help="The number (wacc_…) the template is for."),
           source: str = typer.Argument(..., metavar="FILE|-",
                                        help="A JSON file, or - for stdin: {name, language, category, components}."),
           as_json: bool = JSON_OPTION):
    """Check a template against the platform's rules and submit it for review."""
    data = _read_template(source)
    target = accounts.find_account(account)
    try:
        template = template_authoring.create_template(target, data)
    except Invalid as error:
        for field, messages in (error.details.get("errors") or {}).items():
            for message in messages:
                err.print(styled("  ", plain(field), ": ", plain(message)))
        fail(f"template not submitted: {error.message}" if error.code != "validation_failed"
             else "template not submitted: fix the fields above")
    show(template.with_review(), as_json, lambda: record(
        {name: template.with_review()[name] for name in ("id", "name", "language", "category", "status")},
        "template submitted for review"))


@app.command("delete")
@with_database
def delete(account: str = typer.Option(..., "--account", help="The number (wacc_…) the template is on."),
           name: str = typer.Argument(..., help="The template's name: every language of it is deleted."),
           as_json: bool = JSON_OPTION):
    """Delete a template on the platform (every language) and here."""
    deleted = template_authoring.delete_template(accounts.find_account(account), name)
    rows = [template.with_review() for template in deleted]
    show({"name": name, "deleted": rows}, as_json, lambda: table(
        f"template {name} deleted", ("language", "status"), [(row["language"], row["status"]) for row in rows]))


def _read_template(source: str) -> object:
    try:
        raw = sys.stdin.buffer.read(MAX_TEMPLATE_FILE + 1) if source == "-" else _read_file(source)
    except OSError as error:
        fail(f"cannot read {source}: {error.strerror or error}")
    if len(raw) > MAX_TEMPLATE_FILE:
        fail(f"{source} is larger than {MAX_TEMPLATE_FILE} bytes; a template is a small JSON object")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        fail(f"{source} is not valid JSON: {error}")


def _read_file(path: str) -> bytes:
    with Path(path).open("rb") as handle:
        return handle.read(MAX_TEMPLATE_FILE + 1)
