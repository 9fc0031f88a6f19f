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
and left alone until `retry` gives it its attempts back or `drop_parked` gives it up.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson
from peewee import Case

from messaging.webhooks import StatusUpdate, parse_notification, status_callbacks
from models.clock import isoformat, utcnow
from models.inbox.updates import BatchOutcome, apply_update, remember_users_in_order
from models.numbers.tables import CLAIM_TIMEOUT, MAX_ATTEMPTS, PlatformWebhookBatch
from models.sending.statuses import apply_status_updates
from models.store.db import atomic, bound_datetime, execute, outlast_outage

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
    claim on them (those out of attempts are parked when taken). Hand-written: every batch's task
    asks, after its own batch."""
    now = utcnow()
    return [row_id for (row_id,) in execute(
        'SELECT id FROM "platform_webhook_batch" WHERE processed_at IS NULL AND parked_at IS NULL '
        "AND received_at < ? AND (claimed_at IS NULL OR claimed_at < ?) ORDER BY id LIMIT ?",
        [bound_datetime(now - older_than), bound_datetime(now - CLAIM_TIMEOUT), limit]).fetchall()]


def process_batch(batch_id: int) -> BatchOutcome:
    """Apply one stored batch.

    1. Claim it with a conditional UPDATE, counting an attempt: no other worker holds a fresh
       claim on it, and it has attempts left (`take`; one out of them is parked instead).
    2. Unless done before, apply every update but the statuses, with their events, and stamp
       `applied_at`, all in one transaction (so the events exist exactly once).
    3. Hand the statuses to `models.sending.statuses.apply_status_updates` and stamp `processed_at`
       and release the claim in one transaction (applied again if the database rolls it back to
       break a lock conflict). A batch of statuses alone (nearly every one) has nothing for step 2:
       the users its statuses link are recorded here, first, and it is stamped applied too.
    4. A run that did not finish releases the claim with its error; a failed last attempt parks
       the batch.
    """
    outcome = BatchOutcome()
    taken = _take(batch_id)
    if taken is None:
        return outcome
    outcome.claimed = True
    error: str | None = None
    try:
        updates = parse_notification(_parsed(taken.body))
        statuses = [update for update in updates if isinstance(update, StatusUpdate)]
        users_with_statuses = taken.applied_at is None
        if taken.applied_at is None and len(statuses) < len(updates):
            with atomic():
                remember_users_in_order(updates)
                for update in updates:
                    if not isinstance(update, StatusUpdate):
                        apply_update(update, outcome)
                PlatformWebhookBatch.update(applied_at=utcnow()).where(
                    PlatformWebhookBatch.id == batch_id).execute()
            users_with_statuses = False
        outcome.statuses_applied = _apply_statuses(batch_id, statuses, users_with_statuses)
        if outcome.statuses_applied:
            outcome.statuses = len(statuses)
    except Exception as exc:  # recorded on the batch; the sweep retries it
        log.exception("platform webhook batch %s failed", batch_id)
        error = f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        if not outcome.statuses_applied:
            changes: dict[Any, Any] = {PlatformWebhookBatch.claimed_at: None}
            if error is not None:
                changes[PlatformWebhookBatch.last_error] = error
                if taken.attempts >= MAX_ATTEMPTS:
                    changes[PlatformWebhookBatch.parked_at] = utcnow()
                    log.error("platform webhook batch %s parked after %d attempts: %s", batch_id, taken.attempts,
                              error)
            PlatformWebhookBatch.update(changes).where(PlatformWebhookBatch.id == batch_id).execute()
    return outcome


def take(batch_id: int) -> bool:
    """Claim the batch for this run and count the attempt; False when it is not this run's to do.

    A claim still set when the batch is taken again was never released: the run holding it died
    (or stalled past `CLAIM_TIMEOUT`), and that is recorded as the error of its attempt. A batch
    whose attempts are used up is parked here instead, by whichever run finds it so."""
    return _take(batch_id) is not None


class _Taken(NamedTuple):
    body: str
    attempts: int  # this run's included
    applied_at: Any  # None until the updates besides statuses are applied


# Hand-written: every batch is taken. SET reads the row as it was, so `last_error` sees the claim
# this one replaces.
_TAKE = ('UPDATE "platform_webhook_batch" SET claimed_at = ?, attempts = attempts + 1, '
         "last_error = CASE WHEN claimed_at IS NOT NULL THEN ? ELSE last_error END "
         "WHERE id = ? AND processed_at IS NULL AND parked_at IS NULL AND (claimed_at IS NULL OR claimed_at < ?) "
         "AND attempts < ? RETURNING body, attempts, applied_at")


def _take(batch_id: int) -> _Taken | None:
    """`take`, returning what the run needs of the batch."""
    now = utcnow()
    row = execute(_TAKE, [bound_datetime(now), DIED, batch_id, bound_datetime(now - CLAIM_TIMEOUT),
                          MAX_ATTEMPTS]).fetchone()
    if row is not None:
        return _Taken(*row)
    batch = PlatformWebhookBatch
    takeable = ((batch.id == batch_id) & batch.waiting()
                & (batch.claimed_at.is_null() | (batch.claimed_at < now - CLAIM_TIMEOUT)))
    died = Case(None, [(batch.claimed_at.is_null(False), DIED)], batch.last_error)
    parked = (batch.update({batch.claimed_at: None, batch.parked_at: now, batch.last_error: died})
              .where(takeable & (batch.attempts >= MAX_ATTEMPTS)).execute())
    if parked == 1:
        log.error("platform webhook batch %s parked after %d attempts: %s", batch_id, MAX_ATTEMPTS,
                  batch.get_by_id(batch_id).last_error)
    return None


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
    return _parked(None, limit)


def parked_batch(batch_id: int) -> ParkedBatch | None:
    """The parked batch `batch_id`, or None when no batch by that id is parked."""
    found = _parked(PlatformWebhookBatch.id == batch_id)
    return found[0] if found else None


def _parked(condition, limit: int | None = None) -> list[ParkedBatch]:
    batch = PlatformWebhookBatch
    rows = (batch.select(batch.id, batch.received_at, batch.parked_at, batch.attempts, batch.last_error,
                         batch.callbacks)
            .where(batch.parked() if condition is None else batch.parked() & condition)
            .order_by(batch.id).limit(limit))
    return [ParkedBatch(row.id, row.received_at, row.parked_at, row.attempts, row.last_error,
                        len((row.callbacks or "").split())) for row in rows]


def retry_parked(batch_id: int) -> bool:
    """Give a parked batch its attempts back (its last error stays until it is processed); False
    when no parked batch has that id. The caller queues it."""
    batch = PlatformWebhookBatch
    return (batch.update({batch.parked_at: None, batch.attempts: 0, batch.claimed_at: None})
            .where((batch.id == batch_id) & batch.parked())
            .execute()) == 1


def drop_parked(batch_id: int) -> ParkedBatch | None:
    """Give a parked batch up: it counts as processed, its statuses never applied, and recovery no
    longer waits for it, so the sends it names are settled as unconfirmed at its next pass. The
    row and its body stay, marked `dropped_at`, until the purge. None when no parked batch has
    that id (a retried one is not parked any more)."""
    batch = PlatformWebhookBatch
    with atomic():
        parked = parked_batch(batch_id)
        now = utcnow()
        dropped = batch.update({batch.processed_at: now, batch.dropped_at: now, batch.claimed_at: None}).where(
            (batch.id == batch_id) & batch.parked()).execute()
    return parked if dropped == 1 else None


def _apply_statuses(batch_id: int, statuses: list[StatusUpdate], users_first: bool) -> bool:
    def apply() -> None:
        with atomic():
            if users_first:
                remember_users_in_order(statuses)
            if statuses:
                apply_status_updates(statuses)
            now = bound_datetime(utcnow())
            execute('UPDATE "platform_webhook_batch" SET processed_at = ?, applied_at = COALESCE(applied_at, ?), '
                    "claimed_at = NULL WHERE id = ?", [now, now, batch_id])

    # The status transaction keeps the lock order; should the database still roll it back to
    # break a conflict, it is applied again at once rather than left for the sweep.
    outlast_outage(apply, what=f"applying the statuses of platform batch {batch_id}")
    return True


def _parsed(body: str) -> Any:
    payload = orjson.loads(body)
    # JSON carries a NUL only escaped (`\u0000`): a body without the escape has none to take out,
    # and is spared a walk of everything in it.
    return _without_nul(payload) if "\\u0000" in body else payload


def _without_nul(value: Any) -> Any:
    # PostgreSQL text cannot hold NUL; a JSON "\u0000" would make every retry of the batch fail.
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {key: _without_nul(item) for key, item in value.items()}
    return value


