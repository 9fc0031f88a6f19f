"""svcctl campaigns: list, show, watch (a live view of a running campaign)."""

from __future__ import annotations

import signal
import threading
import time

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from models.sending import campaign_reads
from models.sending.tables import CAMPAIGN_STATUSES, Campaign
from models.tenancy.tables import Tenant
from models.tenancy.tenants import get_tenant
from svcctl.output import JSON_OPTION, err, fail, print_json, record, show, table, with_database

app = typer.Typer(help="Campaigns: list, inspect, watch progress.", no_args_is_help=True)

FINISHED = ("completed", "failed", "cancelled")


def campaign_dict(campaign: Campaign) -> dict:
    """The API's Campaign, plus what only an administrator sees."""
    return {**campaign_reads.campaign_dict(campaign), "tenant_id": Tenant.get_by_id(campaign.tenant_id).public_id}


@app.command("list")
@with_database
def list_campaigns(tenant: str = typer.Option(..., "--tenant", help="Tenant id (ten_…)."),
                   status: str = typer.Option(None, "--status", help="Only campaigns in this status."),
                   limit: int = typer.Option(50, "--limit", min=1, help="How many, newest first."),
                   as_json: bool = JSON_OPTION):
    """List a tenant's campaigns, newest first (every source: API and collection reminders)."""
    if status is not None and status not in CAMPAIGN_STATUSES:
        fail(f"--status must be one of {', '.join(CAMPAIGN_STATUSES)}")
    rows = list(campaign_reads.campaigns_of(get_tenant(tenant).id, status, source=None).limit(limit))
    data = campaign_reads.campaign_dicts(rows)

    def render():
        grid = table("campaigns", ("id", "status", "source", "template", "total", "sent", "delivered", "read",
                                   "failed", "pending", "created"),
                     [(c["id"], c["status"], c["source"], c["template_name"], c["total_recipients"], c["sent"],
                       c["delivered"], c["read"], c["failed"], c["pending"] + c["queued"], c["created_at"])
                      for c in data])
        grid.columns[0].no_wrap = True
        return grid

    show(data, as_json, render)


@app.command("show")
@with_database
def show_campaign(campaign_id: str, as_json: bool = JSON_OPTION):
    """Show one campaign with its counters and credits."""
    data = campaign_dict(campaign_reads.find_campaign(campaign_id))
    show(data, as_json, lambda: record(data, "campaign"))


def _view(data: dict, progress: Progress, task_id, rate: float) -> Group:
    settled = data["total_recipients"] - data["pending"] - data["queued"]
    progress.update(task_id, completed=settled, total=max(1, data["total_recipients"]),
                    description=f"{data['id']} [bold]{data['status']}[/bold]")
    counters = table(None, ("pending", "queued", "sent", "delivered", "read", "failed", "cancelled", "msg/s",
                            "credits reserved / consumed / released / refunded"),
                     [(data["pending"], data["queued"], data["sent"], data["delivered"], data["read"],
                       data["failed"], data["cancelled"], f"{rate:.0f}",
                       f"{data['reserved_credits']} / {data['consumed_credits']} / {data['released_credits']}"
                       f" / {data['refunded_credits']}")])
    return Group(progress, counters)


@app.command("watch")
@with_database
def watch(campaign_id: str, interval: float = typer.Option(0.5, "--interval", min=0.1, help="Seconds between reads.")):
    """Follow a campaign live until it finishes; Ctrl-C stops watching (the campaign goes on)."""
    campaign = campaign_reads.find_campaign(campaign_id)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err)
    task_id = progress.add_task(campaign.public_id, total=max(1, campaign.total_recipients))
    data = campaign_dict(campaign)
    last = (time.monotonic(), data["total_recipients"] - data["pending"] - data["queued"])
    rate = 0.0
    # Ctrl-C only sets a flag: a KeyboardInterrupt raised at an arbitrary point (inside a query,
    # or while the live view's refresh thread holds its lock) could leave the process hanging.
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    try:
        err.print(f"watching {campaign.public_id}; Ctrl-C stops watching (the campaign goes on)")
        with Live(_view(data, progress, task_id, rate), console=err, refresh_per_second=8, transient=False) as live:
            while data["status"] not in FINISHED and not stop.wait(interval):
                data = campaign_dict(Campaign.get_by_id(campaign.id))
                now, settled = time.monotonic(), data["total_recipients"] - data["pending"] - data["queued"]
                rate = (settled - last[1]) / max(1e-6, now - last[0])
                last = (now, settled)
                live.update(_view(data, progress, task_id, rate))
    finally:
        signal.signal(signal.SIGINT, previous)
    if stop.is_set():
        err.print("stopped watching; the campaign goes on")
        return
    print_json(data)
