"""svcctl inbox: the platform's webhook batches that used up their attempts (parked): retrying or dropping them."""

from __future__ import annotations

import typer

from jobs.inbox import process_platform_batch
from models.errors import NotFound
from models.inbox import batches
from svcctl.output import JSON_OPTION, print_json, record, show, table, with_database

app = typer.Typer(help="The platform's webhook batches: parked ones, retries and drops.", no_args_is_help=True)


@app.command("parked")
@with_database
def parked(limit: int = typer.Option(100, "--limit", min=1, max=10000), as_json: bool = JSON_OPTION):
    """Batches parked after their attempts, oldest first, with the error of the last one and how many
    sends their statuses name (recovery leaves those alone until the batch is processed)."""
    data = [item.as_dict() for item in batches.parked_batches(limit)]
    show(data, as_json, lambda: table("parked platform batches", ("id", "received", "parked", "attempts",
                                                                  "sends named", "last error"),
                                      [(b["id"], b["received_at"], b["parked_at"], b["attempts"], b["sends_named"],
                                        b["last_error"]) for b in data]))


@app.command("retry")
@with_database
def retry(batch_id: int = typer.Argument(..., help="A batch id from `parked`."), as_json: bool = JSON_OPTION):
    """Give a parked batch its attempts back and queue it now (after fixing what killed its runs)."""
    if not batches.retry_parked(batch_id):
        raise NotFound(f"no parked platform batch {batch_id}")
    process_platform_batch(batch_id)
    data = {"id": batch_id, "queued": True, "attempts_left": batches.MAX_ATTEMPTS}
    if as_json:
        print_json(data)
    else:
        show(data, False, lambda: record(data, "parked batch queued again"))


@app.command("drop")
@with_database
def drop(batch_id: int = typer.Argument(..., help="A batch id from `parked`."),
         yes: bool = typer.Option(False, "--yes", help="Drop without asking."), as_json: bool = JSON_OPTION):
    """Give a parked batch up for good: its statuses are never applied. The sends it names stop
    waiting for it, and recovery settles them as unconfirmed (failed, their credit released). The
    batch's body stays, marked dropped, until the purge."""
    if not yes:
        parked = batches.parked_batch(batch_id)
        if parked is None:
            raise NotFound(f"no parked platform batch {batch_id}")
        typer.confirm(f"Drop parked platform batch {batch_id}? The {parked.sends_named} sends it names will be "
                      "settled as unconfirmed", abort=True, err=True)
    dropped = batches.drop_parked(batch_id)
    if dropped is None:
        raise NotFound(f"no parked platform batch {batch_id}")
    data = {"id": batch_id, "dropped": True, "sends_named": dropped.sends_named}
    if as_json:
        print_json(data)
    else:
        show(data, False, lambda: record(data, "parked batch dropped"))
