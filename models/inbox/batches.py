"""The platform's webhook batches: stored as received, then applied by the worker.

A webhook POST is stored as one batch row and acknowledged at once; the worker processes it
later (`process_batch`). Processing is safe to repeat, because the platform redelivers batches
and a lost enqueue is made up for by a sweep:

- inbound messages and business-app echoes are deduplicated by wamid (`ProcessedMessage`, a
  unique key inserted in the same transaction as the event it guards);
- template, quality and account updates set state, so applying one twice changes nothing
  (what each kind of update does is models/inbox/updates.py);
- status updates go to `models.sending.statuses.apply_status_updates`, which keeps statuses moving
  forward only.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import orjson

from messaging.webhooks import StatusUpdate, parse_notification
from models.clock import utcnow
from models.inbox.updates import BatchOutcome, apply_update, remember_users_in_order
from models.numbers.tables import CLAIM_TIMEOUT, MAX_ATTEMPTS, PlatformWebhookBatch
from models.sending.statuses import apply_status_updates
from models.store.db import atomic, outlast_outage

log = logging.getLogger(__name__)


def store_batch(raw: bytes) -> PlatformWebhookBatch:
    """Keep a verified POST for the worker; call inside a transaction."""
    return PlatformWebhookBatch.create(body=raw.decode())


def pending_batches(older_than: dt.timedelta, limit: int = 200) -> list[int]:
    """Batches a sweep should (re)process: unfinished, not freshly received, not given up on."""
    now = utcnow()
    query = (PlatformWebhookBatch.select(PlatformWebhookBatch.id)
             .where(PlatformWebhookBatch.processed_at.is_null()
                    & (PlatformWebhookBatch.received_at < now - older_than)
                    & (PlatformWebhookBatch.attempts < MAX_ATTEMPTS)
                    & (PlatformWebhookBatch.claimed_at.is_null()
                       | (PlatformWebhookBatch.claimed_at < now - CLAIM_TIMEOUT)))
             .order_by(PlatformWebhookBatch.id).limit(limit))
    return [row.id for row in query]


def process_batch(batch_id: int) -> BatchOutcome:
    """Apply one stored batch.

    1. Claim it with a conditional UPDATE: no other worker holds a fresh claim on it.
    2. Unless done before, apply every update but the statuses, with their events, and stamp
       `applied_at`, all in one transaction (so the events exist exactly once).
    3. Hand the statuses to `models.sending.statuses.apply_status_updates` and stamp `processed_at` in
       one transaction (applied again if the database rolls it back to break a lock conflict).
    4. Release the claim whatever happened.
    """
    outcome = BatchOutcome()
    now = utcnow()
    claimed = (PlatformWebhookBatch.update(claimed_at=now)
               .where((PlatformWebhookBatch.id == batch_id) & PlatformWebhookBatch.processed_at.is_null()
                      & (PlatformWebhookBatch.claimed_at.is_null()
                         | (PlatformWebhookBatch.claimed_at < now - CLAIM_TIMEOUT)))
               .execute())
    if claimed != 1:
        return outcome
    outcome.claimed = True
    batch = PlatformWebhookBatch.get_by_id(batch_id)
    error: str | None = None
    try:
        updates = parse_notification(_without_nul(orjson.loads(batch.body)))
        statuses = [update for update in updates if isinstance(update, StatusUpdate)]
        if batch.applied_at is None:
            with atomic():
                remember_users_in_order(updates)
                for update in updates:
                    if not isinstance(update, StatusUpdate):
                        apply_update(update, outcome)
                PlatformWebhookBatch.update(applied_at=utcnow()).where(
                    PlatformWebhookBatch.id == batch_id).execute()
        outcome.statuses_applied = _apply_statuses(batch_id, statuses)
        if outcome.statuses_applied:
            outcome.statuses = len(statuses)
    except Exception as exc:  # recorded on the batch; the sweep retries it
        log.exception("platform webhook batch %s failed", batch_id)
        error = f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        changes: dict[Any, Any] = {PlatformWebhookBatch.claimed_at: None}
        if error is not None:
            # Only failures count: waiting for status handling to exist is not one.
            changes[PlatformWebhookBatch.last_error] = error
            changes[PlatformWebhookBatch.attempts] = PlatformWebhookBatch.attempts + 1
        PlatformWebhookBatch.update(changes).where(PlatformWebhookBatch.id == batch_id).execute()
    return outcome


def _apply_statuses(batch_id: int, statuses: list[StatusUpdate]) -> bool:
    def apply() -> None:
        with atomic():
            if statuses:
                apply_status_updates(statuses)
            PlatformWebhookBatch.update(processed_at=utcnow()).where(
                PlatformWebhookBatch.id == batch_id).execute()

    # The status transaction keeps the lock order; should the database still roll it back to
    # break a conflict, it is applied again at once rather than left for the sweep.
    outlast_outage(apply, what=f"applying the statuses of platform batch {batch_id}")
    return True


def _without_nul(value: Any) -> Any:
    # PostgreSQL text cannot hold NUL; a JSON "\u0000" would make every retry of the batch fail.
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {key: _without_nul(item) for key, item in value.items()}
    return value


