"""The sending core on the queue: the engine's runs, re-kicks, recovery of unanswered sends.

The queue only triggers the engine (models/sending/). One engine runs per worker process: a
`dispatch` task that finds one already running wakes it and returns, so a thousand new campaigns
or messages cost a thousand cheap wake-ups, not a thousand engines. A run ends when idle or after
its session (30 s), queueing the next one when work is left, so a consumer that stops gracefully
is never held up for long and several consumers share the work.
"""

from __future__ import annotations

import logging
import threading

from jobs.queue import crontab, huey, periodic_task, task
from models import sending
from models.clock import utcnow
from models.sending.engine import Engine, Settings
from models.sending.recovery import recover_stuck
from models.sending.tables import ACTIVE_STATUSES, Campaign, CampaignRecipient, Message
from models.store.counters import counters
from models.store.db import db, outlast_outage, storage_unavailable

log = logging.getLogger(__name__)
# How long an engine stopped by a storage outage (a database or Redis restart) waits for it to
# come back before leaving the work to the periodic re-kick.
RESUME_WAIT = 60.0

_lock = threading.Lock()
_running: Engine | None = None
_kicked_at_start = False
# How an engine's run ends (a session, then the next run; or idle for a while). A caller that
# runs the queue in its own thread (tests) injects a run to the end instead.
engine_settings = Settings()


@task()
def dispatch() -> None:
    """Run this process's engine until idle, or wake the one already running."""
    global _running
    with _lock:
        if _running is not None:
            _running.wake()
            return
        engine = _running = Engine(settings=engine_settings)
    interrupted = None
    try:
        left = engine.run()
    except Exception as error:
        if not storage_unavailable(error):
            raise
        interrupted, left = error, True
    finally:
        with _lock:
            _running = None
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


sending.on_work(dispatch)


def _storage_answers() -> None:
    db.execute_sql("SELECT 1")
    counters().alive(["dispatch:probe"])  # Redis too when configured: the queue lives there


def _schedule_next_retry() -> None:
    """Work waiting for a retry time (131056 backs off up to minutes): a run at that time."""
    R = CampaignRecipient
    waits = [row.not_before for row in (
        R.select(R.not_before).join(Campaign)
        .where(Campaign.status.in_(ACTIVE_STATUSES) & (R.status == "pending") & R.not_before.is_null(False))
        .order_by(R.not_before).first(),
        Message.select(Message.not_before)
        .where((Message.status == "queued") & Message.claim_token.is_null() & Message.not_before.is_null(False))
        .order_by(Message.not_before).first()) if row is not None]
    if waits:
        delay = max(0.5, (min(waits) - utcnow()).total_seconds())
        if delay < 60:  # later ones are re-kicked by the periodic task
            dispatch.schedule(delay=delay)


@periodic_task(crontab(minute="*"))
def rekick_dispatch() -> int:
    """Re-queue dispatch while there is work: held campaigns resume when their number, wallet or
    daily window allows again, and a run lost with a killed worker is replaced. A scheduled
    campaign is work from its `send_at` (jobs/campaigns.py starts it)."""
    now = utcnow()
    waiting = (Campaign.select().where(Campaign.status.in_(ACTIVE_STATUSES)
                                       & (Campaign.send_at.is_null() | (Campaign.send_at <= now))).count()
               + Message.select().where(Message.status == "queued").count())
    if waiting:
        dispatch()
    return waiting


@periodic_task(crontab(minute="*"))
def recover_stuck_sends() -> int:
    """Settle sends whose engine died mid-flight (see models.sending.recovery)."""
    return recover_stuck()


@huey.on_startup()
def _kick_on_start() -> None:
    """A consumer that starts (or restarts after a crash) picks up where sending was left.

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
