"""Processing the platform's stored webhook batches, and the sweep that makes up for lost tasks."""

from __future__ import annotations

import datetime as dt

from jobs.accounts import notify_events, refresh_number, sync_account_templates
from jobs.queue import crontab, periodic_task, task
from models import platform
from models.clock import utcnow

# A batch younger than this is left to the task its POST queued.
SWEEP_GRACE = dt.timedelta(seconds=60)
# The platform retries a webhook for up to 7 days: dedupe records must outlive that.
KEEP = dt.timedelta(days=8)


@task()
def process_platform_batch(batch_id: int) -> None:
    follow_up(platform.process_batch(batch_id))


def follow_up(outcome: platform.BatchOutcome) -> None:
    if outcome.events or outcome.statuses:
        notify_events()
    for account_id in outcome.resync_templates:
        sync_account_templates(account_id)
    for account_id in outcome.refresh_numbers:
        refresh_number(account_id)


@periodic_task(crontab(minute="*"))
def sweep_platform_batches() -> int:
    """Process stored batches whose task was lost, failed, or is waiting for status handling."""
    ids = platform.pending_batches(SWEEP_GRACE)
    for batch_id in ids:
        follow_up(platform.process_batch(batch_id))
    return len(ids)


@periodic_task(crontab(minute="41", hour="3"))
def purge_platform_webhooks() -> int:
    cutoff = utcnow() - KEEP
    removed = (platform.PlatformWebhookBatch.delete()
               .where(platform.PlatformWebhookBatch.processed_at < cutoff).execute())
    removed += platform.ProcessedMessage.delete().where(platform.ProcessedMessage.processed_at < cutoff).execute()
    return removed
