"""A drain: one endpoint's due deliveries POSTed and recorded, by one drain at a time.

A drain owns its endpoint for a while (the lease, lease.py): it claims due deliveries
(claimer.py), POSTs them through ENDPOINT_CONCURRENCY threads (senders.py), records the outcomes
in batches (recorder.py), and asks the queue for a drain at the endpoint's next retry. One drain
per endpoint bounds what a receiver sees; a drain yields after DRAIN_SLICE_SECONDS and stops
early when the receiver is unreachable, and drains never hold more than half of a worker's
threads, so a slow or dead endpoint delays neither sending nor other endpoints.

Delivery is at least once (a worker that dies mid-batch leaves claims that expire and are sent
again) and unordered (retries interleave with newer events). Receivers deduplicate by event id.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable

from config import get_settings
from models.clock import utcnow
from models.events import delivery, webhooks
from models.events.delivery.claimer import Claimer
from models.events.delivery.lease import LeaseKeeper
from models.events.delivery.recorder import RECORD_INTERVAL, DrainStats, Recorder
from models.events.delivery.senders import Senders
from models.events.tables import WebhookEndpoint
from models.store.counters import counters
from models.store.prepared import Prepared

log = logging.getLogger("webhooks")

DRAIN_SLICE_SECONDS = 20.0
# A drain for a retry is queued this long before the retry is due and waits out the rest: the
# queue's scheduler looks once a second and a worker may take half a second more to pick the
# task up, so a drain queued at the due time would send up to 1.5 s late (15 % of a 10 s gap).
WAKE_EARLY = 1.5

_slots_lock = threading.Lock()
_slots: threading.BoundedSemaphore | None = None


def _drain_slots() -> threading.BoundedSemaphore:
    """Drains may hold at most half of this process's worker threads: the rest stay free for
    sending campaigns and messages whatever the receivers do."""
    global _slots
    with _slots_lock:
        if _slots is None:
            _slots = threading.BoundedSemaphore(max(2, get_settings().worker_threads // 2))
        return _slots


def drain(endpoint_id: int, clock: Callable[[], dt.datetime] = utcnow,
          slice_seconds: float = DRAIN_SLICE_SECONDS, woke_for: dt.datetime | None = None) -> DrainStats:
    """Deliver what is due to one endpoint; callable directly with a clock (the retry schedule is
    computed from `clock()`). `woke_for` is the retry time a scheduled drain was queued for."""
    stats = DrainStats()
    if woke_for is not None:
        _wait_for(woke_for, clock)
        # This wake is used: whatever this drain finds, the next retry gets a drain of its own.
        webhooks.take_wake(endpoint_id, woke_for)
    slots = _drain_slots()
    if not slots.acquire(blocking=False):
        delivery.requeue(endpoint_id, delay=1)
        return stats
    again = False
    try:
        lease = LeaseKeeper.acquire(endpoint_id, clock)
        if lease is None:
            # Another drain has it and will see what is due, unless its worker died: then the
            # lease lapses within LEASE_SECONDS, and someone must come back to take it over.
            _come_back_when_lease_ends(endpoint_id)
            return stats
        stats.ran = True
        if lease.freed:
            log.warning("endpoint %s: %d deliveries claimed by an earlier drain go out again", endpoint_id,
                        lease.freed)
        try:
            _pump(endpoint_id, clock, slice_seconds, stats, lease)
        finally:
            lease.release()
        again = _plan_next(endpoint_id, clock())
    finally:
        slots.release()
    if again:
        delivery.requeue(endpoint_id)  # to the back of the queue: other work gets its turn
    return stats


def _wait_for(woke_for: dt.datetime, clock: Callable[[], dt.datetime]) -> None:
    early = (woke_for - clock()).total_seconds()
    if early > 0:
        time.sleep(min(early, WAKE_EARLY))


def _plan_next(endpoint_id: int, now: dt.datetime) -> bool:
    """True when more is due now; otherwise a drain is scheduled for the next retry, if any.

    Checked after the release: a delivery that became due while this drain was finishing had its
    own drain turned away by the lease, so it is picked up here."""
    if webhooks.has_due(endpoint_id, now):
        return True
    wake = webhooks.plan_wake(endpoint_id, now)
    if wake is not None:
        delivery.requeue(endpoint_id, eta=_eta(wake - dt.timedelta(seconds=WAKE_EARLY)), woke_for=wake)
    return False


def _come_back_when_lease_ends(endpoint_id: int) -> None:
    """Schedule one drain at the end of the endpoint's current lease (one per lease, however many
    drains it turned away)."""
    endpoint = WebhookEndpoint.get_or_none(WebhookEndpoint.id == endpoint_id)
    if endpoint is None or endpoint.drain_until is None:
        return
    key = f"webhooks:lease-ends:{endpoint_id}:{endpoint.drain_until.isoformat()}"
    if counters().incr([key], 3600)[key] == 1:
        delivery.requeue(endpoint_id, eta=_eta(endpoint.drain_until + dt.timedelta(seconds=0.5)))


def _eta(at: dt.datetime) -> dt.datetime:
    """A time for the queue's `eta`, which drops the fraction of a second from a naive one."""
    return at.replace(tzinfo=dt.UTC)


# The endpoint as each drain reads it first, in a statement built once.
_ENDPOINT = Prepared(lambda endpoint_id: WebhookEndpoint.select().where(WebhookEndpoint.id == endpoint_id).limit(1),
                     -7_000_000_001)


def _pump(endpoint_id: int, clock: Callable[[], dt.datetime], slice_seconds: float, stats: DrainStats,
          lease: LeaseKeeper) -> None:
    """Claim, send and record until nothing is due, the slice is over, or the endpoint is unreachable."""
    endpoint = _ENDPOINT.first(endpoint_id)
    if endpoint is None or endpoint.status != "active":
        return
    claimer = Claimer(endpoint, clock, slice_seconds, time.monotonic())
    recorder = Recorder(endpoint_id, stats)
    senders = Senders(endpoint.signing_secret, clock)
    try:
        while claimer.claiming or senders.inflight or recorder.outcomes:
            _top_up(claimer, senders, recorder)
            if senders.inflight:
                _collect(claimer, senders, recorder)
            now = time.monotonic()
            recorder.record_if_due(now, senders.inflight)
            if not lease.keep(now):
                claimer.stop()  # lapsed and taken over: finish what is in flight, claim no more
    finally:
        senders.stop()


def _top_up(claimer: Claimer, senders: Senders, recorder: Recorder) -> None:
    """Keep the senders' queue topped up so they never wait on the database."""
    claimed = claimer.claim(senders.inflight, senders.latency)
    if claimed is None:
        return
    if claimed.refused is not None:
        recorder.add(claimed.refused)
    else:
        senders.send(claimed.works, claimed.target, claimed.addresses)


def _collect(claimer: Claimer, senders: Senders, recorder: Recorder) -> None:
    """Take the outcomes finished by now; an unreachable endpoint gets no more of this drain."""
    recorder.add(senders.collect(wait=RECORD_INTERVAL))
    if senders.unreachable:
        claimer.stop()
        recorder.add(senders.fail_queued())
