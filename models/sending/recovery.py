"""Recovery: claims nobody will answer, in both stores.

A message is handed to the platform only by the engine that claimed it, after its send-started
mark committed (engine.py), and a claim is only ever given up here, once its engine is known dead
(no heartbeat) or the claim is far too old:

- not started: its platform call never began, so it is given back to the queue (sent later at a
  new slot, no attempt used);
- started: the call may have reached the platform. A status webhook naming it (its callback
  data) settles it as `sent` at any time; one still unproven once the platform has had time to
  report it is failed `send_unconfirmed` (its credit released), never sent again.
"""

from __future__ import annotations

import datetime as dt
import logging

from models.clock import utcnow
from models.numbers.tables import MAX_ATTEMPTS, PlatformWebhookBatch
from models.sending.campaign_store import CampaignStore
from models.sending.message_store import MessageStore
from models.sending.work import Store
from models.store.counters import counters

log = logging.getLogger(__name__)

# How long a claim may stay unanswered before it is settled here. A live engine answers within
# the client's timeout (13 s) plus one transaction; a dead engine's claims get a grace period for
# the platform's status webhooks to name them.
DEAD_ENGINE_GRACE = dt.timedelta(seconds=15)
STUCK_AFTER = dt.timedelta(minutes=2)
# Platform webhooks received this long ago and not yet processed are a backlog: the evidence for a
# claim may be in it, so recovery waits for it to drain.
WEBHOOK_BACKLOG = dt.timedelta(seconds=3)
# A batch held by a worker is waited for this long after it arrived: enough for a dead worker's
# claim to time out and the intake's next task or sweep to take it over.
HELD_BATCH_LIMIT = dt.timedelta(minutes=2)


def engine_key(engine_id: str) -> str:
    return f"engine:{engine_id}"


def recover_stuck(pacer=None, now: dt.datetime | None = None, stuck_after: dt.timedelta = STUCK_AFTER,
                  grace: dt.timedelta = DEAD_ENGINE_GRACE, stores: list[Store] | None = None) -> int:
    """Settle claims nobody will answer; returns how many were failed.

    A claim older than `grace` whose engine has stopped beating, or any claim older than
    `stuck_after`, gets no answer any more. One never started goes back to the queue at once.
    A started one is ambiguous: status webhooks carrying the row's callback data have had that
    long to prove it reached the platform (they move `queued` rows to `sent` and on), and once
    the intake has no backlog, what is still `queued` has no evidence; sending it again could
    duplicate it, so it fails with `send_unconfirmed` and its credit is released.
    """
    pacer = pacer or counters()
    now = now or utcnow()
    caught_up = None
    settled = 0
    for store in stores or [CampaignStore(), MessageStore()]:
        claims = store.claims_before(now - grace)
        if not claims:
            continue
        engines = {token.split(".")[0] for _, token, _, _ in claims if token}
        live = {key.split(":", 1)[1] for key in pacer.alive([engine_key(e) for e in engines])}
        stuck = [(row_id, token, started) for row_id, token, claimed_at, started in claims
                 if claimed_at < now - stuck_after or not token or token.split(".")[0] not in live]
        unstarted = [(row_id, token) for row_id, token, started in stuck if not started]
        if unstarted:
            # No evidence can exist for them: a send begins only once its mark has committed.
            returned = store.give_back_unstarted(unstarted)
            if returned:
                log.warning("gave %d claimed but unstarted sends back to the queue (%s store)", returned,
                            store.name)
        started = [(row_id, token) for row_id, token, started in stuck if started]
        if not started:
            continue
        if caught_up is None:
            caught_up = webhooks_caught_up(now)
        if not caught_up:
            continue
        failed = store.fail_unconfirmed(started, now)
        if failed:
            log.warning("recovered %d unconfirmed sends (%s store)", failed, store.name)
        settled += failed
    return settled


def webhooks_caught_up(now: dt.datetime | None = None) -> bool:
    """No platform webhook received before the last few seconds is still waiting to be applied.

    Recovery must not decide a claim got no answer while the answer sits unprocessed in the
    intake. A worker that dies running an engine often dies processing the very batch that names
    that engine's last sends: the batch stays claimed until its claim times out (15 s) and another
    worker takes it over, so claimed batches count too -- but only for `HELD_BATCH_LIMIT` after
    they arrived, so that a batch that kills every worker taking it cannot hold recovery back for
    good. Batches the intake gave up on do not count either. Should such a batch name a row
    recovery failed, the status update accepts it late (models/sending/statuses.py), so the record still
    ends as the platform says.
    """
    now = now or utcnow()
    batch = PlatformWebhookBatch
    return not (batch.select(batch.id)
                .where(batch.processed_at.is_null() & (batch.attempts < MAX_ATTEMPTS)
                       & (batch.received_at < now - WEBHOOK_BACKLOG)
                       & (batch.claimed_at.is_null() | (batch.received_at > now - HELD_BATCH_LIMIT)))
                .exists())
