"""svcctl status: the service at a glance, live (or once as JSON)."""

from __future__ import annotations

import time

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from models.operations.heartbeats import FORGET_AFTER_SECONDS
from svcctl.output import JSON_OPTION, err, out, print_json, table, with_database


def snapshot() -> dict:
    """Everything the view shows, read now: processes, queue, campaigns, pace, webhooks, credits."""
    from jobs.queue import huey
    from models.inbox import batches
    from models.operations import heartbeats, state

    now = time.time()
    return {
        "processes": [process.as_dict(now) for process in heartbeats.processes(now)],
        "queue": {"pending": huey.pending_count(), "scheduled": huey.scheduled_count()},
        "campaigns": state.running_campaigns(),
        "numbers": state.number_pace(),
        "outbox": state.outbox(),
        "webhooks": state.webhook_backlog_by_endpoint(),
        "platform": state.platform_webhooks(),
        "parked_batches": [item.as_dict() for item in batches.parked_batches(limit=10)],
        "credits_reserved": [{"tenant": tenant, "reserved": reserved}
                             for tenant, reserved in state.credits_reserved_by_tenant().items()],
    }


def _seconds(value: float) -> str:
    value = float(value)
    if value < 120:
        return f"{value:.0f}s"
    if value < 7200:
        return f"{value / 60:.0f}m"
    return f"{value / 3600:.1f}h"


# Ours: a process's state is styled, never written as markup into a cell (which shows values as text).
STATE_STYLES = {"alive": "green", "dead": "bold red", "stopped": "dim"}


def _listing(title: str, columns: tuple[str, ...], rows: list[tuple]) -> Table | Text:
    """A table, or one line when it would be empty: the whole view fits a terminal's height more often."""
    return table(title, columns, rows) if rows else Text(f"{title}: none", style="dim")


def _processes(processes: list[dict]) -> tuple[Table | Text, Table | Text]:
    """The processes that should be running (alive, or dead: a fault), and apart from them the ones
    stopped cleanly, most recent first, until they are forgotten."""
    running = [item for item in processes if item["state"] != "stopped"]
    stopped = sorted((item for item in processes if item["state"] == "stopped"),
                     key=lambda item: item["seconds_since_stop"])
    return (_listing("processes", ("name", "kind", "state", "last beat", "threads", "periodic"),
                     [(item["name"], item["kind"], Text(item["state"], style=STATE_STYLES[item["state"]]),
                       f"{_seconds(item['seconds_since_beat'])} ago", item["threads"],
                       "yes" if item["periodic"] else "") for item in running]),
            _listing(f"stopped in the last {_seconds(FORGET_AFTER_SECONDS)}", ("name", "kind", "stopped", "periodic"),
                     [(item["name"], item["kind"], Text(f"{_seconds(item['seconds_since_stop'])} ago", style="dim"),
                       "yes" if item["periodic"] else "") for item in stopped]))


def render(data: dict) -> Group:
    processes, stopped = _processes(data["processes"])
    outbox, platform = data["outbox"], data["platform"]
    queue = table("queue", ("pending", "scheduled"), [(data["queue"]["pending"], data["queue"]["scheduled"])])
    backlog = table("outbox and platform webhooks", ("events", "oldest", "deliveries", "oldest", "batches",
                                                     "parked"),
                    [(outbox["events_pending"], _seconds(outbox["oldest_event_age_seconds"]),
                      outbox["deliveries_pending"], _seconds(outbox["oldest_delivery_age_seconds"]),
                      platform["batches_pending"],
                      Text(str(platform["batches_parked"]), style="bold red" if platform["batches_parked"] else ""))])
    # Each parked batch waits for an operator (`svcctl inbox retry`): named, with why.
    parked = _listing("parked platform batches (svcctl inbox parked)", ("id", "attempts", "sends named", "last error"),
                      [(item["id"], item["attempts"], item["sends_named"], item["last_error"])
                       for item in data["parked_batches"]])
    campaigns = _listing("campaigns running", ("campaign", "tenant", "done", "total", "msg/s"),
                         [(item["campaign"], item["tenant"], item["done"], item["total"], item["rate"])
                          for item in data["campaigns"]])
    numbers = _listing("per-number pace (last 10 s)", ("number", "phone id", "msg/s", "cap"),
                       [(item["number"], item["phone_id"], item["rate"], item["cap"]) for item in data["numbers"]])
    webhooks = _listing("webhook backlog by endpoint", ("endpoint", "tenant", "open", "failing", "oldest",
                                                        "last failure", "url"),
                        [(item["endpoint"], item["tenant"], item["pending"], item["failing"],
                          _seconds(item["oldest_age_seconds"]), item["last_failure_at"], item["url"])
                         for item in data["webhooks"]])
    credits = _listing("credits reserved by company", ("tenant", "reserved"),
                       [(item["tenant"], item["reserved"]) for item in data["credits_reserved"]])
    return Group(processes, stopped, queue, backlog, parked, campaigns, numbers, webhooks, credits)


@with_database
def status(as_json: bool = JSON_OPTION,
           interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between reads."),
           once: bool = typer.Option(False, "--once", help="Print one view and exit.")):
    """The service at a glance: API workers and consumers with their heartbeats, queue depth, running campaigns,
    per-number pace, webhook backlog, parked platform batches, credits reserved. Live until Ctrl-C; --json prints
    once."""
    if as_json:
        print_json(snapshot())
        return
    if once or not out.is_terminal:
        out.print(render(snapshot()), crop=False)
        return
    try:
        with Live(render(snapshot()), console=out, refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(interval)
                live.update(render(snapshot()))
    except KeyboardInterrupt:
        err.print("stopped watching")
