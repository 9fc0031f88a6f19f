"""svcctl cartera responses export: what debtors said (promises, disputes, payments they claim),
the ERP's feed beside the payments' (`GET /cartera/respuestas` gives the same rows)."""

from __future__ import annotations

from pathlib import Path

import typer

from svcctl.output import with_database
from svcctl.payments import check_feed_format, moment_option, stream_feed

export_app = typer.Typer(help="What debtors said on their page or in WhatsApp, for the ERP.", no_args_is_help=True)

COLUMNS = ("cursor", "tipo", "origin", "deuda_external_id", "promised_date", "reason", "saldo_pendiente", "moneda",
           "registrado_en")
# A spreadsheet opening the CSV runs a cell that starts with one of these as a formula; a
# dispute's reason is the debtor's own words.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


@export_app.command("export")
@with_database
def export(tenant: str = typer.Option(..., "--tenant"),
           since: str = typer.Option(None, "--since", help="Only what was recorded at or after this ISO time."),
           after: int = typer.Option(None, "--after", min=0, help="Only what follows this cursor."),
           cursor_file: Path = typer.Option(None, "--cursor-file",
                                            help="Read the cursor from this file, and write the last one back "
                                                 "once everything is out: a nightly job gets exactly what is new."),
           fmt: str = typer.Option("csv", "--format", help="csv or jsonl")):
    """Stream every promise, dispute and payment claimed by debtors to stdout, oldest first."""
    from models.receivables.responses import response_rows
    from models.tenancy.tenants import get_tenant

    check_feed_format(fmt)
    start = moment_option("--since", since)
    stream_feed(lambda cursor: response_rows(get_tenant(tenant).id, since=start, after=cursor), COLUMNS, fmt=fmt,
                after=after, cursor_file=cursor_file, csv_cell=_cell)
