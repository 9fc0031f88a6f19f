"""Delivering outbox events to webhook endpoints.

Flow:
1. `notify_new_events()` (run after every commit that wrote events: `models.events.outbox.on_new_events`)
   enqueues `fan_out_task`, coalesced to at most two tasks a second; `sweep` does the same every
   minute as a safety net.
2. The fan-out turns events into deliveries (models.events.webhooks.fan_out) and enqueues a drain for
   each endpoint that got some.
3. A drain owns one endpoint for a while (a lease in the database): it claims due deliveries,
   POSTs them through ENDPOINT_CONCURRENCY threads, records the outcomes in batches, and
   schedules itself for the endpoint's next retry. One drain per endpoint bounds what a receiver
   sees; a drain yields after DRAIN_SLICE_SECONDS and stops early when the receiver is
   unreachable, and drains never hold more than half of a worker's threads, so a slow or dead
   endpoint delays neither sending nor other endpoints.

Delivery is at least once (a worker that dies mid-batch leaves claims that expire and are sent
again) and unordered (retries interleave with newer events). Receivers deduplicate by event id.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from config import get_settings
from jobs import operations
from jobs.queue import crontab, periodic_task, task
from models.clock import utcnow
from models.events import outbox, ssrf, webhooks
from models.events.delivery.client import ENDPOINT_CONCURRENCY, Response, delivery_client, post_signed, vetted_addresses
from models.events.tables import WebhookEndpoint
from models.events.webhooks import Outcome, Work
from models.store.counters import counters, window_start
from models.store.db import connection, outlast_outage, storage_unavailable

log = logging.getLogger("webhooks")

# How much a drain keeps claimed ahead (queued or in flight): about BACKLOG_SECONDS of the
# endpoint's work at its observed latency, between 2 x ENDPOINT_CONCURRENCY and MAX_BACKLOG.
# Enough that the senders never run dry while the drain waits on the database (a commit on
# PostgreSQL waits for the disk); little enough for a slow endpoint that every claimed delivery
# is sent long before its claim expires (CLAIM_SECONDS).
BACKLOG_SECONDS = 2.0
MAX_BACKLOG = 256
# Outcomes are written in batches of this size (or every RECORD_INTERVAL seconds). SQLite writes
# every page a commit touched (the attempt log, the delivery and its indexes): 128 outcomes a
# commit cost about a fifth less CPU each than 64. The price: a worker that dies may leave up to
# 128 POSTs unrecorded (plus those on the wire), sent again after a crash (at least once).
RECORD_BATCH = 128
RECORD_INTERVAL = 0.5
COLLECT_PAUSE = 0.01
DRAIN_SLICE_SECONDS = 20.0
# A drain extends its lease every LEASE_SECONDS / 4; a worker that dies frees the endpoint (and,
# through release_claims, what it had claimed) within LEASE_SECONDS.
LEASE_SECONDS = 30.0
# Consecutive connection failures (refused, timed out, TLS) after which a drain stops sending to
# the endpoint and fails the rest of its queue at once; those deliveries retry on the schedule.
UNREACHABLE_THRESHOLD = ENDPOINT_CONCURRENCY
FAN_OUT_BATCH = 500
# A drain for a retry is queued this long before the retry is due and waits out the rest: the
# queue's scheduler looks once a second and a worker may take half a second more to pick the
# task up, so a drain queued at the due time would send up to 1.5 s late (15 % of a 10 s gap).
WAKE_EARLY = 1.5
NOTIFY_KEY = "webhooks:fan-out"
# A drain resolves and vets its endpoint's host again after this long (a lookup per batch cost
# a blocking getaddrinfo every few dozen deliveries); shorter than the TTL most names carry.
VET_SECONDS = 10.0


# --- drains --------------------------------------------------------------------------------


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


@dataclass
class DrainStats:
    attempted: int = 0
    delivered: int = 0
    failed: int = 0
    ran: bool = False


def _outcome(work: Work, attempted_at: dt.datetime, response: Response) -> Outcome:
    operations.observe_webhook_delivery(response.ok, response.status_code, response.unreachable,
                                        response.latency_ms, work.attempt)
    return Outcome(work.delivery_id, work.attempt, work.max_attempts, attempted_at, response.ok,
                   response.status_code, response.latency_ms, response.excerpt, response.error,
                   response.retry_after, response.unreachable)


def _refused(work: Work, attempted_at: dt.datetime, reason: str) -> Outcome:
    return Outcome(work.delivery_id, work.attempt, work.max_attempts, attempted_at, False,
                   error=f"refused: {reason}")


def _not_sent(work: Work, attempted_at: dt.datetime, streak: int) -> Outcome:
    return Outcome(work.delivery_id, work.attempt, work.max_attempts, attempted_at, False, unreachable=True,
                   error=f"not sent: the endpoint failed {streak} connections in a row")


def drain(endpoint_id: int, clock: Callable[[], dt.datetime] = utcnow,
          slice_seconds: float = DRAIN_SLICE_SECONDS, woke_for: dt.datetime | None = None) -> DrainStats:
    """Deliver what is due to one endpoint; the body of `drain_endpoint`, callable directly
    with a clock (the retry schedule is computed from `clock()`). `woke_for` is the retry time
    a scheduled drain was queued for."""
    stats = DrainStats()
    if woke_for is not None:
        early = (woke_for - clock()).total_seconds()
        if early > 0:
            time.sleep(min(early, WAKE_EARLY))
        # This wake is used: whatever this drain finds, the next retry gets a drain of its own.
        webhooks.take_wake(endpoint_id, woke_for)
    slots = _drain_slots()
    if not slots.acquire(blocking=False):
        drain_endpoint.schedule(args=(endpoint_id,), delay=1)
        return stats
    again = False
    try:
        lease = webhooks.acquire_drain(endpoint_id, clock(), LEASE_SECONDS)
        if lease is None:
            # Another drain has it and will see what is due, unless its worker died: then the
            # lease lapses within LEASE_SECONDS, and someone must come back to take it over.
            _come_back_when_lease_ends(endpoint_id)
            return stats
        stats.ran = True
        holder = _Lease(endpoint_id, lease)
        freed = webhooks.release_claims(endpoint_id, clock())
        if freed:
            log.warning("endpoint %s: %d deliveries claimed by an earlier drain go out again", endpoint_id, freed)
        try:
            _pump(endpoint_id, clock, slice_seconds, stats, holder)
        finally:
            # Given back even across a storage restart: a lease left behind would hold the
            # endpoint's deliveries up for LEASE_SECONDS.
            outlast_outage(lambda: webhooks.release_drain(endpoint_id, holder.until), what="a drain's lease")
        # Checked after the release: a delivery that became due while this drain was finishing
        # had its own drain turned away by the lease, so it is picked up here.
        now = clock()
        if webhooks.has_due(endpoint_id, now):
            again = True
        else:
            wake = webhooks.plan_wake(endpoint_id, now)
            if wake is not None:
                drain_endpoint.schedule(args=(endpoint_id, wake), eta=_eta(wake - dt.timedelta(seconds=WAKE_EARLY)))
    finally:
        slots.release()
    if again:
        drain_endpoint(endpoint_id)  # to the back of the queue: other work gets its turn
    return stats


def _come_back_when_lease_ends(endpoint_id: int) -> None:
    """Schedule one drain at the end of the endpoint's current lease (one per lease, however many
    drains it turned away)."""
    endpoint = WebhookEndpoint.get_or_none(WebhookEndpoint.id == endpoint_id)
    if endpoint is None or endpoint.drain_until is None:
        return
    key = f"webhooks:lease-ends:{endpoint_id}:{endpoint.drain_until.isoformat()}"
    if counters().incr([key], 3600)[key] == 1:
        drain_endpoint.schedule(args=(endpoint_id,), eta=_eta(endpoint.drain_until + dt.timedelta(seconds=0.5)))


def _eta(at: dt.datetime) -> dt.datetime:
    """A time for the queue's `eta`, which drops the fraction of a second from a naive one."""
    return at.replace(tzinfo=dt.UTC)


@dataclass
class _Lease:
    endpoint_id: int
    until: dt.datetime


def _pump(endpoint_id: int, clock: Callable[[], dt.datetime], slice_seconds: float, stats: DrainStats,
          lease: _Lease) -> None:
    """Claim, send and record until nothing is due, the slice is over, or the endpoint is unreachable.

    The sender threads only do HTTP; this thread alone touches the database, so claims and
    records overlap with requests in flight instead of pausing them.
    """
    endpoint = WebhookEndpoint.get_or_none(WebhookEndpoint.id == endpoint_id)
    if endpoint is None or endpoint.status != "active":
        return
    secret = endpoint.signing_secret
    client = delivery_client()
    started = last_record = last_lease = time.monotonic()
    # The senders pull from a plain queue and hand back an outcome (or what they raised): one put and
    # one get a delivery, where an executor's future, condition and callback cost the drain
    # thread as much interpreter time as recording the outcomes.
    pending: queue.SimpleQueue[tuple[Work, ssrf.Target, list[ssrf.IPAddress]] | None] = queue.SimpleQueue()
    finished: queue.SimpleQueue[Outcome | BaseException] = queue.SimpleQueue()
    inflight = 0  # queued for the senders or on the wire
    outcomes: list[Outcome] = []
    unreachable_streak = 0
    latency = 1.0  # seconds per request, a moving average; pessimistic until answers come in
    claiming = True
    vetted: tuple[float, ssrf.Target, list[ssrf.IPAddress]] | None = None  # (when, target, addresses)

    def attempt(work: Work, target: ssrf.Target, addresses: list[ssrf.IPAddress]) -> Outcome:
        attempted_at = clock()
        try:
            response = post_signed(client, target, addresses, secret, work.event_id, work.event_name, work.body)
        except Exception as error:  # one odd delivery must not take the drain down with it
            log.exception("webhook delivery %s failed unexpectedly", work.delivery_id)
            response = Response(None, 0, error=f"internal error: {type(error).__name__}")
        return _outcome(work, attempted_at, response)

    def sender() -> None:
        while (item := pending.get()) is not None:
            try:
                finished.put(attempt(*item))
            except BaseException as error:  # handed to the drain, which raises it as before
                finished.put(error)

    senders = [threading.Thread(target=sender, name=f"webhook_{index}", daemon=True)
               for index in range(ENDPOINT_CONCURRENCY)]
    for thread in senders:
        thread.start()
    try:
        while True:
            # Keep the senders' queue topped up so they never wait on the database.
            backlog = int(min(MAX_BACKLOG, max(2 * ENDPOINT_CONCURRENCY,
                                               ENDPOINT_CONCURRENCY * BACKLOG_SECONDS / max(latency, 0.001))))
            if claiming and inflight < backlog // 2:
                if time.monotonic() - started >= slice_seconds:
                    claiming = False
                else:
                    try:
                        works = webhooks.claim_due(endpoint_id, backlog - inflight, clock())
                    except Exception as error:
                        if not storage_unavailable(error):
                            raise
                        # Finish and record what is on the wire; the next drain claims the rest.
                        log.warning("drain of endpoint %s stops claiming: %s", endpoint_id, error)
                        works = []
                    if not works:
                        claiming = False
                    else:
                        try:
                            # Checked again every VET_SECONDS: a name that now resolves inward
                            # is refused. Between checks the connections still go to the vetted
                            # addresses only, so a DNS change can delay the refusal, never
                            # redirect a POST.
                            if vetted is None or time.monotonic() - vetted[0] >= VET_SECONDS:
                                target = ssrf.parse_target(endpoint.url)
                                vetted = (time.monotonic(), target, vetted_addresses(target))
                            _at, target, addresses = vetted
                        except ssrf.UnsafeTarget as error:
                            vetted = None
                            outcomes.extend(_refused(work, clock(), str(error)) for work in works)
                        else:
                            for work in works:
                                pending.put((work, target, addresses))
                            inflight += len(works)
            if inflight:
                done = []
                try:
                    done.append(finished.get(timeout=RECORD_INTERVAL))
                    # Let a few more finish before taking them: waking for each one would make
                    # this thread compete with the senders for the interpreter.
                    time.sleep(COLLECT_PAUSE)
                    while True:
                        done.append(finished.get_nowait())
                except queue.Empty:
                    pass
                inflight -= len(done)
                for outcome in done:
                    if isinstance(outcome, BaseException):
                        raise outcome
                    outcomes.append(outcome)
                    if outcome.latency_ms is not None:
                        latency = 0.8 * latency + 0.2 * outcome.latency_ms / 1000
                    unreachable_streak = unreachable_streak + 1 if outcome.unreachable else 0
                if unreachable_streak >= UNREACHABLE_THRESHOLD:
                    # The receiver is down: fail what is queued now rather than wait out a timeout
                    # for each; those deliveries retry on their schedule like any failure. What a
                    # sender already took comes back through `finished` as usual.
                    claiming = False
                    try:
                        while True:
                            work, _target, _addresses = pending.get_nowait()  # type: ignore[misc]
                            inflight -= 1
                            outcomes.append(_not_sent(work, clock(), unreachable_streak))
                    except queue.Empty:
                        pass
            now_monotonic = time.monotonic()
            if outcomes and (len(outcomes) >= RECORD_BATCH or not inflight
                             or now_monotonic - last_record >= RECORD_INTERVAL):
                # The POSTs were made: their record waits out a storage restart rather than be
                # lost, which would leave the deliveries claimed (and resent) CLAIM_SECONDS later.
                outlast_outage(functools.partial(webhooks.record, endpoint_id, outcomes), what="webhook attempts")
                stats.attempted += len(outcomes)
                stats.delivered += sum(1 for outcome in outcomes if outcome.ok)
                stats.failed += sum(1 for outcome in outcomes if not outcome.ok)
                outcomes = []
                last_record = now_monotonic
            if now_monotonic - last_lease >= LEASE_SECONDS / 4:
                try:
                    extended = webhooks.extend_drain(endpoint_id, lease.until, clock(), LEASE_SECONDS)
                except Exception as error:
                    if not storage_unavailable(error):
                        raise
                    extended = None
                if extended is None:
                    claiming = False  # lapsed and taken over: finish what is in flight, claim no more
                else:
                    lease.until = extended
                last_lease = now_monotonic
            if not claiming and not inflight and not outcomes:
                return

    finally:
        # Whatever is still queued goes out before the senders stop, as an executor's shutdown
        # would: those deliveries are claimed, and their outcomes are already lost with the drain.
        for _thread in senders:
            pending.put(None)
        for thread in senders:
            thread.join()

@task()
def drain_endpoint(endpoint_id: int, woke_for: dt.datetime | None = None) -> None:
    drain(endpoint_id, woke_for=woke_for)


# --- fan-out, notification, sweeps ---------------------------------------------------------


def run_fan_out() -> int:
    """Fan out every pending event, starting each endpoint's drain as soon as it has work."""
    total = 0
    while True:
        result = webhooks.fan_out(FAN_OUT_BATCH)
        total += result.events
        for endpoint_id in sorted(result.endpoint_ids):
            drain_endpoint(endpoint_id)
        if result.events == 0:
            return total


@task()
def fan_out_task() -> None:
    run_fan_out()


def notify_new_events() -> None:
    """Ask for a prompt fan-out; call after committing events. Cheap, and never raises.

    Coalesced per one-second window in the shared counter store: the first call of a window
    enqueues a fan-out now, the second schedules one for the end of the window (so events
    committed after the first fan-out started are not left for the sweep), later calls do
    nothing. 5000 calls in a second therefore queue two tasks.
    """
    try:
        now = time.time()
        with connection():
            count = counters().incr([NOTIFY_KEY], 1, now)[NOTIFY_KEY]
        if count == 1:
            fan_out_task()
        elif count == 2:
            fan_out_task.schedule(delay=max(0.05, window_start(1, now) + 1 - now + 0.05))
    except Exception:
        # The caller's change is committed; the minute sweep will fan its events out.
        log.warning("could not enqueue the webhook fan-out; the sweep will catch up", exc_info=True)


outbox.on_new_events(notify_new_events)


def kick() -> tuple[int, int]:
    """Fan out now and start a drain for every endpoint with due deliveries.

    Returns (events fanned out, drains started).
    """
    fanned = run_fan_out()
    endpoint_ids = webhooks.endpoints_with_due_work(utcnow())
    start_drains(endpoint_ids)
    return fanned, len(endpoint_ids)


@periodic_task(crontab(minute="*"))
def sweep() -> None:
    """Safety net: events whose notification was lost, retries whose scheduled drain was lost."""
    kick()


@periodic_task(crontab(hour="4", minute="17"))
def prune_delivery_log() -> None:
    attempts, deliveries = webhooks.prune(get_settings().webhook_retention_days)
    if attempts or deliveries:
        log.info("pruned %d webhook attempts and %d finished deliveries", attempts, deliveries)


def start_drains(endpoint_ids) -> None:
    for endpoint_id in sorted(endpoint_ids):
        drain_endpoint(endpoint_id)
