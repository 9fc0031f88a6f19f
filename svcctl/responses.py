"""svcctl cartera responses export: what debtors said (promises, disputes, payments they claim),
the ERP's feed beside the payments' (`GET /cartera/respuestas` gives the same rows)."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import orjson
import typer

from svcctl.output import err, fail, with_database
from svcctl.payments import moment_option

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

    if fmt not in ("csv", "jsonl"):
        fail(f"--format must be csv or jsonl, got {fmt!r}")
    start = moment_option("--since", since)
    cursor = after or 0
    if cursor_file is not None and after is None and cursor_file.exists():
        text = cursor_file.read_text().strip()
        if not text.isdigit():
            fail(f"{cursor_file} does not hold a cursor")
        cursor = int(text)
    writer = csv.writer(sys.stdout, lineterminator="\n") if fmt == "csv" else None
    if writer is not None:
        writer.writerow(COLUMNS)
    count, last = 0, cursor
    for row in response_rows(get_tenant(tenant).id, since=start, after=cursor):
        if writer is not None:
            writer.writerow([_cell(row[name]) for name in COLUMNS])
        else:
            sys.stdout.write(orjson.dumps({name: row[name] for name in COLUMNS}).decode() + "\n")
        count, last = count + 1, row["cursor"]
    sys.stdout.flush()
    if cursor_file is not None:
        # Written whole or not at all, and only after the rows are out.
        partial = cursor_file.with_name(cursor_file.name + ".tmp")
        partial.write_text(f"{last}\n")
        os.replace(partial, cursor_file)
    err.print(f"{count} row(s); cursor {last}")
