"""Processing the platform's stored webhook batches, and the sweep that makes up for lost tasks."""

from __future__ import annotations

import datetime as dt
import threading

from jobs.accounts import refresh_number, sync_account_templates
from jobs.messages import enqueue_send
from jobs.queue import crontab, huey, periodic_task, task
from models.clock import utcnow
from models.inbox import batches, updates
from models.numbers.tables import CLAIM_TIMEOUT, PlatformWebhookBatch, ProcessedMessage

# A batch younger than this is left to the task its POST queued.
SWEEP_GRACE = dt.timedelta(seconds=15)
# Stale batches each task also takes on, so recovery follows the traffic rather than the sweep.
STRAGGLERS = 5
# The platform retries a webhook for up to 7 days: dedupe records must outlive that.
KEEP = dt.timedelta(days=8)


@task()
def process_platform_batch(batch_id: int) -> None:
    follow_up(batches.process_batch(batch_id))
    # Batches whose task died with a killed worker would otherwise wait for the minutely sweep.
    for stale_id in batches.pending_batches(SWEEP_GRACE, limit=STRAGGLERS):
        follow_up(batches.process_batch(stale_id))


def follow_up(outcome: updates.BatchOutcome) -> None:
    for account_id in outcome.resync_templates:
        sync_account_templates(account_id)
    for account_id in outcome.refresh_numbers:
        refresh_number(account_id)
    for message_id in outcome.answers:
        enqueue_send(message_id)


def _sweep() -> int:
    ids = batches.pending_batches(SWEEP_GRACE)
    for batch_id in ids:
        follow_up(batches.process_batch(batch_id))
    return len(ids)


@periodic_task(crontab(minute="*"))
def sweep_platform_batches() -> int:
    """Process stored batches whose task was lost, failed, or is waiting for status handling."""
    return _sweep()


@task()
def sweep_platform_batches_once() -> int:
    return _sweep()


_start_lock = threading.Lock()
_start_sweep_queued = False


@huey.on_startup()
def sweep_after_start() -> None:
    """A consumer starting is often one replacing a consumer that died: the batches it held are
    free again once their claims expire. Look for them then, rather than at a minutely sweep
    that may come up to a minute later. Once per process (the hook runs in every worker thread).
    """
    global _start_sweep_queued
    with _start_lock:
        if _start_sweep_queued:
            return
        _start_sweep_queued = True
    sweep_platform_batches_once.schedule(delay=CLAIM_TIMEOUT.total_seconds() + 1)


@periodic_task(crontab(minute="41", hour="3"))
def purge_platform_webhooks() -> int:
    cutoff = utcnow() - KEEP
    removed = (PlatformWebhookBatch.delete()
               .where(PlatformWebhookBatch.processed_at < cutoff).execute())
    removed += ProcessedMessage.delete().where(ProcessedMessage.processed_at < cutoff).execute()
    return removed
