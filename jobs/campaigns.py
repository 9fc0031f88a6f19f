"""Campaigns on the queue: a created campaign wakes the sending core (jobs/sending.py) at once,
a scheduled one at its `send_at`.

Starting a campaign is only waking the engine. The engine's plan leaves a campaign alone before
its `send_at`, and its claim moves the campaign from `queued` to `processing` with a conditional
UPDATE, once. So a start that comes twice, early, or for a cancelled campaign does nothing, and
three ways lead to it:

1. `start_scheduled`, queued at creation to run START_LEAD seconds before `send_at` (the
   consumer's scheduler reads its schedule once a second and a worker takes a task within half
   a second): it waits out the rest itself and runs the engine at `send_at`.
2. `sweep_scheduled`, every minute: a due campaign that was not started is started now, and each
   one due before the next sweep gets a start of its own. A start lost with its queue (a Redis
   restarted without its data) or with its worker (killed while it waited) is made good.
3. The same sweep when a consumer starts, so a restart never waits for the next minute.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

from jobs.queue import crontab, huey, periodic_task, task
from jobs.sending import dispatch
from models.clock import utcnow
from models.sending.campaign_reads import scheduled_until
from models.sending.tables import Campaign

log = logging.getLogger(__name__)

START_LEAD = 3.0  # seconds before `send_at` a start task is due: the queue's own delays fit in it
SWEEP_AHEAD = dt.timedelta(seconds=65)  # a minute between sweeps, and some overlap

_swept_at_start = False
_start_lock = threading.Lock()


def enqueue_dispatch(campaign_id: int, send_at: dt.datetime | None = None) -> None:
    """Start sending a committed campaign (call after the creating transaction commits): at once,
    or at its `send_at` (naive UTC)."""
    if send_at is not None and send_at > utcnow():
        schedule_start(campaign_id, send_at)
    else:
        dispatch()


def schedule_start(campaign_id: int, send_at: dt.datetime) -> None:
    start_scheduled.schedule(args=(campaign_id,), eta=send_at - dt.timedelta(seconds=START_LEAD))


@task()
def start_scheduled(campaign_id: int) -> None:
    """Run the engine at the campaign's `send_at` (this task comes a little before it)."""
    campaign = Campaign.get_or_none(Campaign.id == campaign_id)
    if campaign is not None and campaign.status == "queued" and campaign.send_at:
        wait = (campaign.send_at - utcnow()).total_seconds()
        if wait > 2 * START_LEAD:
            schedule_start(campaign_id, campaign.send_at)  # came far too early (a clock moved): again later
            return
        if wait > 0:
            time.sleep(wait)
            campaign = Campaign.get_or_none(Campaign.id == campaign_id)  # cancelled meanwhile, say
    if campaign is None or campaign.status != "queued":
        log.info("scheduled campaign %s is %s: not started", campaign.public_id if campaign else campaign_id,
                 campaign.status if campaign else "gone")
        return
    log.info("scheduled campaign %s starting (send_at %s)", campaign.public_id, campaign.send_at)
    dispatch.call_local()  # this process's engine: started here, or woken to plan at once


@periodic_task(crontab(minute="*"))
def sweep_scheduled() -> int:
    """Start the scheduled campaigns that are due and still queued; give those due before the
    next sweep a start task. Returns how many it started or gave a start."""
    now = utcnow()
    found = scheduled_until(now + SWEEP_AHEAD)
    due = [public_id for _id, public_id, send_at in found if send_at <= now]
    for campaign_id, _public_id, send_at in found:
        if send_at > now:
            schedule_start(campaign_id, send_at)
    if due:
        log.info("sweep: %d scheduled campaigns due and not started, starting them: %s", len(due),
                 ", ".join(due[:10]))
        dispatch()
    if found:
        log.info("sweep: %d scheduled campaigns due or coming within %ds", len(found), SWEEP_AHEAD.seconds)
    return len(found)


@huey.on_startup()
def _sweep_on_start() -> None:
    """A consumer that starts (or restarts) sweeps once; huey calls this in every worker thread."""
    global _swept_at_start
    with _start_lock:
        if _swept_at_start:
            return
        _swept_at_start = True
    try:
        sweep_scheduled()
    except Exception:  # the periodic sweep will do it
        log.warning("could not queue the scheduled campaigns' sweep at start-up", exc_info=True)
