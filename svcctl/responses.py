"""svcctl cartera responses export: what debtors said (promises, disputes, payments they claim),
the ERP's feed beside the payments' (`GET /cartera/respuestas` gives the same rows)."""

from __future__ import annotations

from pathlib import Path

import typer

from svcctl.feeds import AFTER_OPTION, CURSOR_FILE_OPTION, FORMAT_OPTION, SINCE_OPTION, stream_feed
from svcctl.output import moment_option, with_database

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
def export(tenant: str = typer.Option(..., "--tenant"), since: str = SINCE_OPTION, after: int = AFTER_OPTION,
           cursor_file: Path = CURSOR_FILE_OPTION, fmt: str = FORMAT_OPTION):
    """Stream every promise, dispute and payment claimed by debtors to stdout, oldest first."""
    from models.receivables.responses import response_rows
    from models.tenancy.tenants import get_tenant

    start = moment_option("--since", since)
    stream_feed(lambda cursor: response_rows(get_tenant(tenant).id, since=start, after=cursor), COLUMNS, fmt=fmt,
                after=after, cursor_file=cursor_file, csv_cell=_cell)
