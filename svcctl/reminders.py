"""svcctl cartera remind: the payment reminders due now."""

from __future__ import annotations

import typer

from models.receivables.collection import due_reminders, send_due_reminders
from svcctl.output import JSON_OPTION, show, table, with_database


@with_database
def remind(dry_run: bool = typer.Option(False, "--dry-run", help="List what is due without sending."),
           as_json: bool = JSON_OPTION):
    """Send the payment reminders due now (the worker does this every 15 minutes)."""
    if dry_run:
        data = [{"tenant_id": item.tenant_id, "account_id": item.account_public_id,
                 "deuda_external_id": item.debt_external_id, "cuota_external_id": item.installment_external_id,
                 "stage": item.stage, "wa_id": item.wa_id} for item in due_reminders()]
        show(data, as_json, lambda: table("reminders due", ("account", "debt", "installment", "stage", "to"),
                                          [(d["account_id"], d["deuda_external_id"], d["cuota_external_id"],
                                            d["stage"], d["wa_id"]) for d in data]))
        return
    from jobs.queue import load_tasks  # here: the queue reads the settings as it loads

    load_tasks()  # the queue's hooks: a created campaign wakes the sending engine
    campaigns = send_due_reminders()
    show({"campaigns": campaigns}, as_json, lambda: f"{len(campaigns)} collection campaign(s) created: "
                                                   + (", ".join(campaigns) or "none"))
