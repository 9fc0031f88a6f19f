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

Every run that takes a batch counts an attempt. A run that does not finish -- it raised, or its
worker died and its claim expired -- leaves its error on the batch; after `MAX_ATTEMPTS` such runs
the batch is parked (`parked_at`), shown by `svcctl status`, `svcctl inbox parked` and the metrics,
and left alone until `retry` gives it its attempts back.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

import orjson
from peewee import Case, fn

from messaging.webhooks import StatusUpdate, parse_notification, status_callbacks
from models.clock import isoformat, utcnow
from models.inbox.updates import BatchOutcome, apply_update, remember_users_in_order
from models.numbers.tables import CLAIM_TIMEOUT, MAX_ATTEMPTS, PlatformWebhookBatch
from models.sending.statuses import apply_status_updates
from models.store.db import atomic, outlast_outage

log = logging.getLogger(__name__)


# What a run that never finished leaves on its batch: nothing else is known of a worker that died.
DIED = "the worker running it stopped before finishing: its claim expired unreleased (killed, crashed or stalled)"


def store_batch(raw: bytes, payload: Any = None) -> PlatformWebhookBatch:
    """Keep a verified POST for the worker, with its statuses' callback data (`payload`: the body
    already parsed); call inside a transaction."""
    if payload is None:
        payload = orjson.loads(raw)
    return PlatformWebhookBatch.create(body=raw.decode(), callbacks="\n".join(status_callbacks(payload)))


def pending_batches(older_than: dt.timedelta, limit: int = 200) -> list[int]:
    """Batches a sweep should (re)process: unfinished, not freshly received, not parked, no fresh
    claim on them (those out of attempts are parked when taken)."""
    now = utcnow()
    query = (PlatformWebhookBatch.select(PlatformWebhookBatch.id)
             .where(PlatformWebhookBatch.processed_at.is_null() & PlatformWebhookBatch.parked_at.is_null()
                    & (PlatformWebhookBatch.received_at < now - older_than)
                    & (PlatformWebhookBatch.claimed_at.is_null()
                       | (PlatformWebhookBatch.claimed_at < now - CLAIM_TIMEOUT)))
             .order_by(PlatformWebhookBatch.id).limit(limit))
    return [row.id for row in query]


def process_batch(batch_id: int) -> BatchOutcome:
    """Apply one stored batch.

    1. Claim it with a conditional UPDATE, counting an attempt: no other worker holds a fresh
       claim on it, and it has attempts left (`take`; one out of them is parked instead).
    2. Unless done before, apply every update but the statuses, with their events, and stamp
       `applied_at`, all in one transaction (so the events exist exactly once).
    3. Hand the statuses to `models.sending.statuses.apply_status_updates` and stamp `processed_at` in
       one transaction (applied again if the database rolls it back to break a lock conflict).
    4. Release the claim whatever happened; a failed last attempt parks the batch.
    """
    outcome = BatchOutcome()
    if not take(batch_id):
        return outcome
    outcome.claimed = True
    batch = PlatformWebhookBatch.get_by_id(batch_id)
    error: str | None = None
    try:
        updates = parse_notification(_without_nul(orjson.loads(batch.body)))
        statuses = [update for update in updates if isinstance(update, StatusUpdate)]
        # A batch of statuses alone (nearly every one) has nothing else to apply: it is stamped
        # applied with its statuses, sparing it a write transaction of its own.
        if batch.applied_at is None and _besides_statuses(updates):
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
            changes[PlatformWebhookBatch.last_error] = error
            if batch.attempts >= MAX_ATTEMPTS:
                changes[PlatformWebhookBatch.parked_at] = utcnow()
                log.error("platform webhook batch %s parked after %d attempts: %s", batch_id, batch.attempts, error)
        PlatformWebhookBatch.update(changes).where(PlatformWebhookBatch.id == batch_id).execute()
    return outcome


def take(batch_id: int) -> bool:
    """Claim the batch for this run and count the attempt; False when it is not this run's to do.

    A claim still set when the batch is taken again was never released: the run holding it died
    (or stalled past `CLAIM_TIMEOUT`), and that is recorded as the error of its attempt. A batch
    whose attempts are used up is parked here instead, by whichever run finds it so."""
    now = utcnow()
    batch = PlatformWebhookBatch
    takeable = ((batch.id == batch_id) & batch.processed_at.is_null() & batch.parked_at.is_null()
                & (batch.claimed_at.is_null() | (batch.claimed_at < now - CLAIM_TIMEOUT)))
    died = Case(None, [(batch.claimed_at.is_null(False), DIED)], batch.last_error)
    taken = (batch.update({batch.claimed_at: now, batch.attempts: batch.attempts + 1, batch.last_error: died})
             .where(takeable & (batch.attempts < MAX_ATTEMPTS)).execute())
    if taken == 1:
        return True
    parked = (batch.update({batch.claimed_at: None, batch.parked_at: now, batch.last_error: died})
              .where(takeable & (batch.attempts >= MAX_ATTEMPTS)).execute())
    if parked == 1:
        log.error("platform webhook batch %s parked after %d attempts: %s", batch_id, MAX_ATTEMPTS,
                  batch.get_by_id(batch_id).last_error)
    return False


@dataclass(frozen=True)
class ParkedBatch:
    id: int
    received_at: dt.datetime
    parked_at: dt.datetime
    attempts: int
    last_error: str | None
    # The sends its statuses name: recovery leaves them alone while the batch is parked.
    sends_named: int

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "received_at": isoformat(self.received_at), "parked_at": isoformat(self.parked_at),
                "attempts": self.attempts, "last_error": self.last_error, "sends_named": self.sends_named}


def parked_batches(limit: int = 100) -> list[ParkedBatch]:
    """Parked batches, oldest first."""
    batch = PlatformWebhookBatch
    rows = (batch.select(batch.id, batch.received_at, batch.parked_at, batch.attempts, batch.last_error,
                         batch.callbacks)
            .where(batch.processed_at.is_null() & batch.parked_at.is_null(False))
            .order_by(batch.id).limit(limit))
    return [ParkedBatch(row.id, row.received_at, row.parked_at, row.attempts, row.last_error,
                        len((row.callbacks or "").split())) for row in rows]


def retry_parked(batch_id: int) -> bool:
    """Give a parked batch its attempts back (its last error stays until it is processed); False
    when no parked batch has that id. The caller queues it."""
    batch = PlatformWebhookBatch
    return (batch.update({batch.parked_at: None, batch.attempts: 0, batch.claimed_at: None})
            .where((batch.id == batch_id) & batch.processed_at.is_null() & batch.parked_at.is_null(False))
            .execute()) == 1


def _apply_statuses(batch_id: int, statuses: list[StatusUpdate]) -> bool:
    def apply() -> None:
        with atomic():
            if statuses:
                apply_status_updates(statuses)
            now = utcnow()
            PlatformWebhookBatch.update({PlatformWebhookBatch.processed_at: now,
                                         PlatformWebhookBatch.applied_at: fn.COALESCE(
                                             PlatformWebhookBatch.applied_at, now)}).where(
                PlatformWebhookBatch.id == batch_id).execute()

    # The status transaction keeps the lock order; should the database still roll it back to
    # break a conflict, it is applied again at once rather than left for the sweep.
    outlast_outage(apply, what=f"applying the statuses of platform batch {batch_id}")
    return True


def _besides_statuses(updates: list[Any]) -> bool:
    """Whether a batch has more to apply than its statuses: another kind of update, or a
    recipient whose phone and id the platform links (`remember_users_in_order`)."""
    return any(not isinstance(update, StatusUpdate)
               or bool(update.recipient.wa_id and update.recipient.user_id) for update in updates)


def _without_nul(value: Any) -> Any:
    # PostgreSQL text cannot hold NUL; a JSON "\u0000" would make every retry of the batch fail.
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {key: _without_nul(item) for key, item in value.items()}
    return value


