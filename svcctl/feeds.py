"""The ERP's feeds on stdout (`svcctl cartera payments export`, `svcctl cartera responses export`):
rows numbered by a cursor, as CSV or JSON Lines, from a cursor given or kept in a file."""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import orjson
import typer

from svcctl.output import err, fail

# Every feed's command takes the same options.
SINCE_OPTION = typer.Option(None, "--since", help="Only what was recorded at or after this ISO time.")
AFTER_OPTION = typer.Option(None, "--after", min=0, help="Only what follows this cursor.")
CURSOR_FILE_OPTION = typer.Option(None, "--cursor-file",
                                  help="Read the cursor from this file, and write the last one back once everything "
                                       "is out: a nightly job gets exactly what is new.")
FORMAT_OPTION = typer.Option("csv", "--format", help="csv or jsonl")
FORMATS = ("csv", "jsonl")


def _plain_cell(value) -> str:
    return "" if value is None else str(value)


def stream_feed(rows_after: Callable[[int], Iterable[dict]], columns: tuple[str, ...], *, fmt: str,
                after: int | None, cursor_file: Path | None, csv_cell: Callable[[object], str] = _plain_cell,
                json_value: Callable[[str, object], object] = lambda _name, value: value) -> None:
    """Write a feed to stdout, CSV or JSON Lines, from `after` or the cursor in `cursor_file`
    (whose last cursor is written back once every row is out); the count and the last cursor go
    to stderr. `rows_after(cursor)` streams the rows after one, each with its "cursor"."""
    if fmt not in FORMATS:
        fail(f"--format must be csv or jsonl, got {fmt!r}")
    cursor = after or 0
    if cursor_file is not None and after is None and cursor_file.exists():
        text = cursor_file.read_text().strip()
        if not text.isdigit():
            fail(f"{cursor_file} does not hold a cursor")
        cursor = int(text)
    writer = csv.writer(sys.stdout, lineterminator="\n") if fmt == "csv" else None
    if writer is not None:
        writer.writerow(columns)
    count, last = 0, cursor
    for row in rows_after(cursor):
        if writer is not None:
            writer.writerow([csv_cell(row[name]) for name in columns])
        else:
            sys.stdout.write(orjson.dumps({name: json_value(name, row[name]) for name in columns}).decode() + "\n")
        count, last = count + 1, row["cursor"]
    sys.stdout.flush()
    if cursor_file is not None:
        # Written whole or not at all, and only after the rows are out.
        partial = cursor_file.with_name(cursor_file.name + ".tmp")
        partial.write_text(f"{last}\n")
        os.replace(partial, cursor_file)
    err.print(f"{count} row(s); cursor {last}")
