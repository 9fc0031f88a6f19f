"""Recovery: claims nobody will answer, in both stores.

A message is handed to the platform only by the engine that claimed it, after its send-started
mark committed (engine.py), and a claim is only ever given up here, once its engine is known dead
(no heartbeat) or the claim is far too old:

- not started: its platform call never began, so it is given back to the queue (sent later at a
  new slot, no attempt used);
- started: the call may have reached the platform. A status webhook naming it (its callback
  data) settles it as `sent` at any time; one still unproven once the platform has had time to
  report it is failed `send_unconfirmed` (its credit released), never sent again. A started
  claim that a platform batch not processed yet names is left for that batch to settle; no
  other claim waits for the intake.
"""

from __future__ import annotations

import datetime as dt
import logging

from models.clock import utcnow
from models.numbers.tables import PlatformWebhookBatch
from models.sending.campaign_store import CampaignStore
from models.sending.message_store import MessageStore
from models.sending.tables import CampaignRecipient, Message
from models.sending.work import Store
from models.store.counters import counters

log = logging.getLogger(__name__)

# How long a claim may stay unanswered before it is settled here. A live engine answers within
# the client's timeout (13 s) plus one transaction; a dead engine's claims get a grace period for
# the platform's status webhooks to name them.
DEAD_ENGINE_GRACE = dt.timedelta(seconds=15)
STUCK_AFTER = dt.timedelta(minutes=2)


def engine_key(engine_id: str) -> str:
    return f"engine:{engine_id}"


def recover_stuck(pacer=None, now: dt.datetime | None = None, stuck_after: dt.timedelta = STUCK_AFTER,
                  grace: dt.timedelta = DEAD_ENGINE_GRACE, stores: list[Store] | None = None) -> int:
    """Settle claims nobody will answer; returns how many were failed.

    A claim older than `grace` whose engine has stopped beating, or any claim older than
    `stuck_after`, gets no answer any more. One never started goes back to the queue.
    A started one is ambiguous: status webhooks carrying the row's callback data have had that
    long to prove it reached the platform (they move `queued` rows to `sent` and on); what is
    still `queued` has no evidence, and sending it again could duplicate it, so it fails with
    `send_unconfirmed` and its credit is released. A started claim that a platform batch not
    processed yet names waits for that batch (`without_evidence_waiting`).
    """
    pacer = pacer or counters()
    now = now or utcnow()
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
        started = without_evidence_waiting(store.name, [(row_id, token) for row_id, token, started in stuck
                                                        if started])
        failed = store.fail_unconfirmed(started, now) if started else 0
        if failed:
            log.warning("recovered %d unconfirmed sends (%s store)", failed, store.name)
        settled += failed
    return settled


def without_evidence_waiting(store_name: str, claims: list[tuple[int, str | None]]) -> list[tuple[int, str | None]]:
    """The claims no platform batch still to be processed names.

    Recovery must not decide a claim got no answer while the answer sits in the intake: a worker
    that dies running an engine often dies processing the very batch that names that engine's last
    sends, and a batch may be waiting, held by a dead worker, or parked after killing every worker
    that took it. Each batch keeps the callback data its statuses carry (`callbacks`, written when
    it is stored), so only the sends it names wait for it -- for as long as it is unprocessed,
    parked included, so that a send it proves accepted is charged once and never failed first.
    Every other claim is settled on time, whatever the intake holds.
    """
    if not claims:
        return claims
    batch = PlatformWebhookBatch
    named = {callback for (text,) in batch.select(batch.callbacks)
             .where(batch.processed_at.is_null() & batch.callbacks.is_null(False) & (batch.callbacks != ""))
             .tuples() for callback in text.split()}
    if not named:
        return claims
    model = CampaignRecipient if store_name == "campaign" else Message
    ids = [row_id for row_id, _ in claims]
    waiting: set[int] = set()
    for start in range(0, len(ids), 500):
        waiting.update(row_id for row_id, public_id in model.select(model.id, model.public_id)
                       .where(model.id.in_(ids[start:start + 500])).tuples() if public_id in named)
    if waiting:
        log.info("%d unanswered %s sends wait for the platform batches that name them", len(waiting), store_name)
    return [claim for claim in claims if claim[0] not in waiting]
