"""Campaign dispatch on the queue: the engine's runs, re-kicking held campaigns, stuck sends.

The queue only triggers the engine (models/dispatch.py). One engine runs per worker process:
a `dispatch` task that finds one already running wakes it and returns, so a thousand new
campaigns cost a thousand cheap wake-ups, not a thousand engines. A run ends when idle or
after its session (30 s), queueing the next one when work is left, so a consumer that stops
gracefully is never held up for long and several consumers share the work.
"""

from __future__ import annotations

import logging
import threading

from jobs.queue import crontab, huey, periodic_task, task
from models import dispatch as engine_module
from models.campaigns import ACTIVE_STATUSES, Campaign, CampaignRecipient
from models.clock import utcnow
from models.db import counters, db, outlast_outage, storage_unavailable

log = logging.getLogger(__name__)
# How long an engine stopped by a storage outage (a database or Redis restart) waits for it to
# come back before leaving the campaigns to the periodic re-kick.
RESUME_WAIT = 60.0

_lock = threading.Lock()
_running: engine_module.Engine | None = None
_kicked_at_start = False


def notify_events() -> None:
    """Ask for a prompt webhook fan-out after committing events (the webhooks area's hook)."""
    try:
        from jobs import webhooks
    except ImportError:
        return
    notify = getattr(webhooks, "notify_new_events", None)
    if notify is not None:
        notify()


def enqueue_dispatch(campaign_id: int) -> None:
    """Start dispatching a committed campaign (call after the creating transaction commits)."""
    dispatch(campaign_id)


@task()
def dispatch(campaign_id: int | None = None) -> None:
    """Run this process's engine until idle, or wake the one already running."""
    global _running
    with _lock:
        if _running is not None:
            _running.wake()
            return
        engine = _running = engine_module.Engine(notify=notify_events)
    interrupted = None
    try:
        # In-process queue (tests, one-off scripts): dispatch now, to the end, in the caller.
        left = engine.run(session=None, linger=0) if huey.immediate else engine.run()
    except Exception as error:
        if huey.immediate or not storage_unavailable(error):
            raise
        interrupted, left = error, True
    finally:
        with _lock:
            _running = None
    if huey.immediate:
        return
    if interrupted is not None:
        # Redis restarted (the queue and this task's successors with it) or the database did:
        # resume as soon as both answer rather than wait for the periodic re-kick.
        log.warning("dispatch interrupted, waiting for the storage: %s", str(interrupted).strip()[:200])
        outlast_outage(_storage_answers, RESUME_WAIT, "dispatch")
    if left or engine.woken_late():
        # Work is left (the session ended) or arrived while this run was ending.
        dispatch()
    else:
        _schedule_next_retry()


def _storage_answers() -> None:
    db.execute_sql("SELECT 1")
    counters().alive(["dispatch:probe"])  # Redis too when configured: the queue lives there


def _schedule_next_retry() -> None:
    """Recipients waiting for a retry time (131056 backs off up to minutes): a run at that time."""
    R = CampaignRecipient
    row = (R.select(R.not_before).join(Campaign)
           .where(Campaign.status.in_(ACTIVE_STATUSES) & (R.status == "pending") & R.not_before.is_null(False))
           .order_by(R.not_before).first())
    if row is not None:
        delay = max(0.5, (row.not_before - utcnow()).total_seconds())
        if delay < 60:  # later ones are re-kicked by the periodic task
            dispatch.schedule(delay=delay)


@periodic_task(crontab(minute="*"))
def rekick_campaigns() -> int:
    """Re-queue dispatch while campaigns are active: held ones resume when their number, wallet
    or daily window allows again, and a run lost with a killed worker is replaced."""
    active = Campaign.select().where(Campaign.status.in_(ACTIVE_STATUSES)).count()
    if active:
        dispatch()
    return active


@periodic_task(crontab(minute="*"))
def recover_stuck_sends() -> int:
    """Settle sends whose worker died mid-flight (see models.dispatch.recover_stuck)."""
    from jobs.messages import recover_messages

    settled = engine_module.recover_stuck() + recover_messages()
    if settled:
        notify_events()
    return settled


@huey.on_startup()
def _kick_on_start() -> None:
    """A consumer that starts (or restarts after a crash) picks up where dispatch was left.

    Huey calls this in every worker thread; one dispatch per process is enough.
    """
    global _kicked_at_start
    with _lock:
        if _kicked_at_start:
            return
        _kicked_at_start = True
    try:
        dispatch()
    except Exception:  # the periodic re-kick will do it
        log.warning("could not queue dispatch at start-up", exc_info=True)
