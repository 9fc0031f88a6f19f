"""svcctl secrets: re-encrypt the secrets stored at rest under the first SVC_SECRET_KEY."""

from __future__ import annotations

import typer

from models.operations import rotation
from svcctl.output import JSON_OPTION, err, show, table, with_database

app = typer.Typer(help="Secrets at rest (platform tokens, signing secrets, gateway credentials).",
                  no_args_is_help=True)


@app.command("rotate")
@with_database
def rotate(as_json: bool = JSON_OPTION,
           batch: int = typer.Option(rotation.ROTATE_BATCH, "--batch", min=1, max=10_000,
                                     help="Rows re-encrypted per transaction.")):
    """Re-encrypt every stored secret with the first key of SVC_SECRET_KEY, in batches.

    Safe to stop and run again: what is already under the first key is skipped. When it reports
    nothing rotated and nothing unreadable, the other keys can be removed from SVC_SECRET_KEY.
    """
    report = rotation.rotate(batch=batch, progress=None if as_json else
                             lambda column: err.print(f"{column.column}: {column.rotated} rotated"))
    data = {"rotated": report.rotated, "unreadable": report.unreadable,
            "columns": [vars(column) for column in report.columns]}
    show(data, as_json, lambda: table("secrets re-encrypted under the first key",
                                      ("column", "rotated", "already current", "plain", "unreadable"),
                                      [(column.column, column.rotated, column.current, column.plain,
                                        column.unreadable) for column in report.columns]))
    if report.unreadable:
        err.print(f"[red]{report.unreadable} secret(s) open with none of the configured keys[/red]")
        raise typer.Exit(1)
