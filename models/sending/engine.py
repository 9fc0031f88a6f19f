"""The sending engine: plan, pace every number, claim, send, record.

One engine runs per worker process, inside a queue task (jobs/sending.py), over two stores
(models/sending/work.py's `Store`): single messages and campaign recipients. It works in ticks:

1. Every second, and at the tick after new work arrives, each store's `plan()` lists the numbers
   with work due (the campaign store holds campaigns whose number or wallet is paused or whose
   daily limit is reached, and fails those whose number is gone).
2. Every tick (0.2 s) it asks the pacer, in one call, for send slots per number (one every
   1.05 / `mps` seconds from the number's schedule, models/store/counters.py; the schedules live in
   the shared counter store, so every engine on every host takes from the same one), sharing the
   engine's send capacity first between tenants, then between a tenant's numbers
   (`fairness.fair_shares`).
3. A number's slots go to its single messages first, then to its campaigns, split evenly
   between them; each store claims its share in one transaction.
4. The tick's claims are one batch: each sent at its own slot on the send pool (slots.py; every
   HTTP call is bounded by the client's timeout; a send whose turn comes too late for its slot
   goes back to the queue unsent). Just before they go, the sends are marked started in waves
   (one transaction per store for the sends of the next 0.1 s); a send whose mark is not on record
   by its slot is not made and goes back to the queue. The batch is then recorded by each store
   in one transaction (see the messenger's error policy): accepted -> `sent` with the credit
   consumed; refused -> `failed` with the credit released; throttled -> back to the queue while
   the number's schedule is held (no worker thread sleeps for a pace); a lost answer -> left
   claimed for the status webhooks.
5. After the record commits, campaigns with nothing left complete.

Nobody is sent twice: a message is handed to the platform only by the engine that claimed it,
once its start is on record, and a claim is only given up by recovery (recovery.py), which sends
again only what was never started and fails, rather than resends, what was started and never
proven to have reached the platform.
A record the database rolled back to break a lock conflict is written again (`outlast_outage`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Protocol

from peewee import DatabaseError, InterfaceError
from redis.exceptions import RedisError

from messaging.errors import PlatformError, PlatformUnavailableError
from models.sending.campaign_store import CampaignStore
from models.sending.fairness import fair_shares
from models.sending.message_store import MessageStore
from models.sending.messenger import GraphMessenger, Messenger, SlotMissed, Verdict, verdict
from models.sending.recovery import engine_key, recover_stuck
from models.sending.slots import SlotExecutor
from models.sending.work import BatchResult, Job, NumberPlan, Store
from models.store.counters import counters, slot_interval
from models.store.db import connection, outlast_outage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """The engine's knobs, with their defaults and why."""

    tick: float = 0.2  # seconds between claims; each claimed send still goes out at its own slot
    refresh: float = 1.0  # seconds between plans (new work, holds, due messages)
    send_threads: int = 32  # concurrent platform calls per engine
    max_in_flight: int = 1200  # messages claimed and not yet recorded, per engine (backpressure)
    batch_threads: int = 6  # batches sent and recorded at once
    burst_seconds: float = 0.5  # pacing grants send slots up to this many seconds ahead
    # Sends are marked started in waves: one transaction per store marks the sends whose slots
    # fall in the next `start_window` seconds, `start_lead` seconds before the first of them (at
    # most 10 a second per store, whatever the rate). A dead engine's sends marked and not
    # yet made are what recovery cannot tell from sends made: about a wave and its lead at the
    # number's rate, plus those whose turn came late.
    start_window: float = 0.1
    start_lead: float = 0.05
    heartbeat_ttl: float = 10.0  # an engine that has not beaten for this long is dead
    recover_every: float = 5.0
    session: float | None = 30.0  # a run ends after this long (the task re-queues itself)
    linger: float = 5.0  # an idle engine waits this long for new work before ending


MAX_THROTTLE_HOLD = 16.0  # seconds a number's schedule is held after repeated 130429
# A paced number whose batch got one 130429 among sends the platform took is not held (its
# recipient goes back to the queue for a new slot): a platform short of CPU counts a second late
# now and then, and holding the schedule for it cost far more sends than the throttle did. A second
# throttle within this many seconds, several in one batch, or any other error holds it as before.
ISOLATED_THROTTLE_WINDOW = 10.0
# The same lone 130429 on a number whose sends the platform took this recently, though none in that
# batch (a slow number sends one at a time): it is at its pace, so it backs off a couple of its
# slots rather than resting a second or more; a repeat within the window rests as before.
PACED_WITHIN = 2.0
SHORT_BACKOFF_SLOTS = 2
SHORT_BACKOFF_MAX = 0.25  # seconds
LONG_HOLD = 8.0  # a throttle hold this long marks the number's campaigns `pending`
UNANSWERED_HOLD = 15.0  # seconds a number rests after a send got no answer (past the client's timeout)
# A send whose turn comes this long after its pacing slot (the process stalled) is not sent: late,
# it would bunch with the sends after it and overshoot the cap. It goes back to the queue.
LATE_SEND = 0.05
THROUGHPUT_THROTTLE = 130429  # the platform's answer to a number sending past its throughput


def bucket_key(account_id: int) -> str:
    return f"mps:{account_id}"


def _lone_throttles(jobs: list[Job], result: BatchResult) -> set[int]:
    """Numbers whose only setback in this batch was one 130429 (the number's throughput), none
    of their sends left unanswered."""
    setbacks: dict[int, list[Job]] = defaultdict(list)
    for job in jobs:
        if verdict(job) in (Verdict.THROTTLED, Verdict.RETRY):
            setbacks[job.account_id].append(job)
    return {account_id for account_id, setback in setbacks.items()
            if len(setback) == 1 and setback[0].error.code == THROUGHPUT_THROTTLE
            and account_id not in result.unanswered_numbers}


class _Countdown:
    """A batch's sends still to finish: its record waits for the last one."""

    def __init__(self, count: int):
        self._left = count
        self._lock = threading.Lock()
        self._done = threading.Event()
        if count <= 0:
            self._done.set()

    def count_down(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._done.set()

    def wait(self) -> None:
        self._done.wait()


@dataclass
class _Wave:
    """Sends of one batch whose slots are close together, marked started together."""

    jobs: list[Job]
    marked: threading.Event = field(default_factory=threading.Event)
    started: set[tuple[str, int]] = field(default_factory=set)  # (store, id) on record as started


def _waves(jobs: list[Job], window: float) -> list[_Wave]:
    """A batch's sends in slot order, cut into waves spanning at most `window` seconds."""
    waves: list[_Wave] = []
    for job in sorted(jobs, key=lambda job: job.send_at):
        if not waves or job.send_at - waves[-1].jobs[0].send_at >= window:
            waves.append(_Wave([]))
        waves[-1].jobs.append(job)
    return waves


class Pacer(Protocol):
    def take_tokens(self, requests: dict[str, tuple[float, float, int]]) -> dict[str, tuple[int, float]]: ...
    def hold_tokens(self, key: str, rate: float, seconds: float) -> None: ...
    def beat(self, key: str, ttl_seconds: float) -> None: ...
    def alive(self, keys: list[str]) -> set[str]: ...


@dataclass
class _Number:
    """One number as the engine sees it: what each store has for it, and its pacing state."""

    account_id: int
    tenant_id: int
    mps: int
    plans: dict[str, NumberPlan] = field(default_factory=dict)  # store name -> plan
    held_until: float = 0.0
    throttle_streak: int = 0
    excused_at: float = -math.inf  # when an isolated 130429 last went without a hold
    accepted_at: float = -math.inf  # when the platform last took a send of this number

    @property
    def due(self) -> int:
        return sum(plan.due for plan in self.plans.values())


class Engine:
    def __init__(self, stores: list[Store] | None = None, messenger: Messenger | None = None,
                 pacer: Pacer | None = None, settings: Settings | None = None):
        # Single messages first: a number's tokens go to them before its campaigns.
        self.stores: list[Store] = stores or [MessageStore(), CampaignStore()]
        self._stores = {store.name: store for store in self.stores}
        self.messenger = messenger or GraphMessenger()
        self._pacer = pacer
        self.settings = settings or Settings()
        self.id = uuid.uuid4().hex[:16]
        self._claims = itertools.count(1)
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._refresh_now = threading.Event()
        self._numbers: dict[int, _Number] = {}
        self._in_flight = 0  # claimed and not yet recorded
        self._unstarted: list[float] = []  # slot times of the claimed sends not yet started (a heap)
        self._batches: set = set()
        self._rotation = 0
        self._last_plan = 0.0
        self._last_batch_done = 0.0
        self.sent = 0

    @property
    def pacer(self) -> Pacer:
        return self._pacer or counters()

    @property
    def in_flight_anywhere(self) -> int:
        """Claims unanswered at the last plan, this engine's and any other's."""
        return sum(store.in_flight for store in self.stores)

    def woken_late(self) -> bool:
        """Someone asked for a plan after this run made its last one (call after `run`)."""
        return self._refresh_now.is_set()

    def wake(self) -> None:
        """New work may exist: plan again at once."""
        self._refresh_now.set()
        self._changed.set()

    def run(self, *, session: float | None = None, linger: float | None = None) -> bool:
        """Dispatch until idle for `linger` seconds or `session` seconds have passed.

        Returns True when the session ended with work due or in flight (the caller queues
        another run at once).
        """
        settings = self.settings
        session = settings.session if session is None else session
        linger = settings.linger if linger is None else linger
        started = time.monotonic()
        sender = SlotExecutor(settings.send_threads, thread_name_prefix="dispatch-send")
        batcher = ThreadPoolExecutor(settings.batch_threads, thread_name_prefix="dispatch-batch")
        next_plan = next_beat = next_recover = next_tick = 0.0
        idle_since: float | None = None
        try:
            while True:
                now = time.monotonic()
                over = session is not None and now - started >= session
                try:
                    if now >= next_beat:
                        self.pacer.beat(engine_key(self.id), settings.heartbeat_ttl)
                        next_beat = now + settings.heartbeat_ttl / 5
                    if now >= next_recover:
                        recover_stuck(self.pacer)
                        next_recover = now + settings.recover_every
                    # A wake-up (new work, work given back) plans again just before the next
                    # tick, not at once: only a tick claims, so one plan serves every wake-up
                    # since the last tick (a single message arriving every few milliseconds
                    # would otherwise cost a plan each).
                    if now >= next_plan or (self._refresh_now.is_set() and now >= next_tick):
                        self._refresh_now.clear()
                        self._replan()
                        next_plan = now + settings.refresh
                    if not over and now >= next_tick:
                        self._tick(now, sender, batcher)
                        next_tick = now + settings.tick
                except (DatabaseError, InterfaceError, RedisError):
                    # Storage restarting, a deadlock victim, a lock timeout: nothing was claimed
                    # by the failed step (its transaction rolled back). Try again shortly.
                    log.warning("dispatch step failed; retrying", exc_info=True)
                    next_tick = max(next_tick, now + 1.0)
                    next_plan = min(next_plan, now + 1.0)
                    if over and not self._batches:
                        return True  # the next run (queued by the task) tries again
                    self._changed.wait(1.0)
                    continue
                busy = bool(self._batches)
                has_work = any(n.due > 0 for n in self._numbers.values())
                if over and not busy:
                    return has_work or self.in_flight_anywhere > 0
                # Claims in flight elsewhere (another engine's, or a dead one's awaiting recovery)
                # keep a lingering engine alive: recovery runs here every few seconds.
                settling = linger > 0 and self.in_flight_anywhere > self._in_flight
                if not busy and not has_work and not settling:
                    if self._last_plan <= self._last_batch_done:
                        # A batch finished after the last plan: it may have given work back.
                        self._refresh_now.set()
                    else:
                        idle_since = idle_since if idle_since is not None else now
                        if now - idle_since >= linger:
                            # Held campaigns and later retries are for the periodic re-kick and
                            # the run the task schedules at the next retry time.
                            return False
                else:
                    idle_since = None
                self._changed.wait(max(0.005, min(next_tick, next_plan) - time.monotonic()))
                self._changed.clear()
        finally:
            for batch in list(self._batches):
                batch.result()
            batcher.shutdown(wait=True)
            sender.shutdown(wait=True)

    def _replan(self) -> None:
        self._last_plan = time.monotonic()
        plans = [(store.name, plan) for store in self.stores for plan in store.plan()]
        with self._lock:
            numbers: dict[int, _Number] = {}
            for name, plan in plans:
                number = numbers.get(plan.account_id)
                if number is None:
                    number = numbers[plan.account_id] = _Number(plan.account_id, plan.tenant_id, plan.mps)
                    known = self._numbers.get(plan.account_id)
                    if known is not None:
                        number.held_until, number.throttle_streak = known.held_until, known.throttle_streak
                        number.excused_at, number.accepted_at = known.excused_at, known.accepted_at
                number.plans[name] = plan
            # A number whose sends are all in flight has no plan now, but the batch coming back
            # may be throttled again: its throttle state stays while it can still matter, so a
            # storm's holds keep growing, an excused throttle is excused once, and a number at its
            # pace is still known as one.
            now = time.monotonic()
            for account_id, known in self._numbers.items():
                if account_id not in numbers and (known.held_until > now - MAX_THROTTLE_HOLD
                                                  or now - known.excused_at < ISOLATED_THROTTLE_WINDOW
                                                  or now - known.accepted_at <= PACED_WITHIN):
                    numbers[account_id] = replace(known, plans={})
            self._numbers = numbers

    def _tick(self, now: float, sender: SlotExecutor, batcher: ThreadPoolExecutor) -> None:
        settings = self.settings
        with self._lock:
            capacity = settings.max_in_flight - self._in_flight
            ready = [n for n in self._numbers.values() if n.due > 0 and n.held_until <= now]
            # Slots are taken when work is claimed, so claim more only when the send pool keeps
            # up: while sends due more than a burst ago still wait for a thread (the platform
            # hangs, or the pool is slower than the pace), claiming more would send them late in one burst.
            backlog = bool(self._unstarted) and now - self._unstarted[0] > settings.burst_seconds
        if capacity <= 0 or not ready or backlog:
            return
        wants = {n.account_id: min(n.due, max(1, math.ceil(max(1.0, n.mps * settings.burst_seconds))))
                 for n in ready}
        shares = fair_shares(capacity, {n.account_id: n.tenant_id for n in ready}, wants, self._rotation)
        self._rotation += 1
        requests = {bucket_key(account_id): (float(self._numbers[account_id].mps),
                                             max(1.0, self._numbers[account_id].mps * settings.burst_seconds), share)
                    for account_id, share in shares.items() if share > 0}
        if not requests:
            return
        asked = time.monotonic()
        grants = self.pacer.take_tokens(requests)
        granted = {account_id: grants[bucket_key(account_id)][0] for account_id in shares
                   if bucket_key(account_id) in grants and grants[bucket_key(account_id)][0] > 0}
        if not granted:
            return
        token = f"{self.id}.{next(self._claims)}"
        jobs: list[Job] = []
        claimed: dict[int, int] = defaultdict(int)
        left = dict(granted)
        for store in self.stores:
            share = {}
            for account_id, count in left.items():
                plan = self._numbers[account_id].plans.get(store.name)
                if plan is not None and count > 0:
                    share[account_id] = min(count, plan.due)
            if not share:
                continue
            got = store.claim(share, {a: self._numbers[a].plans[store.name] for a in share}, token)
            jobs += got
            for job in got:
                claimed[job.account_id] += 1
            with self._lock:
                for account_id, count in share.items():
                    taken = sum(1 for job in got if job.account_id == account_id)
                    plan = self._numbers[account_id].plans[store.name]
                    # Fewer than asked: nothing more is due for now (the next plan recounts).
                    plan.due = 0 if taken < count else max(0, plan.due - taken)
                    left[account_id] -= taken
        if not jobs:
            return
        slots = {account_id: itertools.count() for account_id in granted}
        for job in jobs:
            # Each send at its own slot: the first granted, then one interval apart.
            first = asked + grants[bucket_key(job.account_id)][1]
            job.send_at = first + next(slots[job.account_id]) * slot_interval(float(self._numbers[job.account_id].mps))
        with self._lock:
            self._in_flight += len(jobs)
            for job in jobs:
                heapq.heappush(self._unstarted, job.send_at)
        # Scheduled here, not by the batch: a batch waits for a free batch thread (others may be
        # recording), and its sends must not wait with it past their slots.
        sends = _Countdown(len(jobs))
        waves = _waves(jobs, settings.start_window)
        for wave in waves:
            sender.submit_at(wave.jobs[0].send_at - settings.start_lead, self._start_wave, wave)
            for job in wave.jobs:
                sender.submit_at(job.send_at, self._send_one, job, wave, sends)
        batch = batcher.submit(self._send_batch, jobs, sends, waves)
        self._batches.add(batch)
        batch.add_done_callback(self._batch_done)

    def _batch_done(self, batch) -> None:
        self._batches.discard(batch)
        self._changed.set()

    def _send_batch(self, jobs: list[Job], sends: _Countdown, waves: list[_Wave]) -> None:
        given_back = True
        try:
            sends.wait()
            # A send gives up on a mark that comes too late, but the record must not write the
            # rows while their mark is still being written.
            for wave in waves:
                wave.marked.wait()
            with connection():
                result = self._record(jobs)
                self._after(result, jobs)
                for store in self.stores:
                    mine = [job for job in jobs if job.store == store.name]
                    if mine:
                        store.settle(mine, result)
            self.sent += result.accepted
            given_back = result.retried > 0
        except Exception:
            # The claims stay unanswered; recovery settles them. Never resend from here.
            log.exception("sending batch of %d failed to record", len(jobs))
        finally:
            with self._lock:
                self._in_flight -= len(jobs)
                self._last_batch_done = time.monotonic()
            if given_back:
                # Work given back (throttled) is due again: count it at once.
                self._refresh_now.set()

    def _record(self, jobs: list[Job]) -> BatchResult:
        """Each store records its jobs in a transaction of its own, again if the database rolled
        it back to break a lock conflict or the storage restarted: recording is idempotent."""
        result = BatchResult()
        for store in self.stores:
            mine = [job for job in jobs if job.store == store.name]
            if mine:
                result.add(outlast_outage(lambda store=store, mine=mine: store.record(mine),
                                          what=f"recording a batch of {len(mine)}"))
        return result

    def _start_wave(self, wave: _Wave) -> None:
        """Mark a wave's sends started, one transaction per store, before the first of them goes."""
        try:
            with connection():
                for store in self.stores:
                    mine = [job for job in wave.jobs if job.store == store.name]
                    if mine:
                        wave.started |= {(store.name, row_id) for row_id in store.start(mine)}
        except Exception:
            # Unmarked, they are not sent: the batch's record gives them back to the queue.
            log.warning("could not mark %d sends started; they wait for new slots", len(wave.jobs), exc_info=True)
        finally:
            wave.marked.set()

    def _send_one(self, job: Job, wave: _Wave, sends: _Countdown) -> None:
        try:
            with self._lock:
                # Sends start in the order of their slots: this one was the earliest still waiting.
                if self._unstarted:
                    heapq.heappop(self._unstarted)
            # Only a send whose start is on record goes out: a dead engine's claims without the
            # mark are then known never to have reached the platform, and are sent again.
            wave.marked.wait(max(0.0, job.send_at + LATE_SEND - time.monotonic()))
            if (job.store, job.id) not in wave.started:
                job.error = SlotMissed("not sent: its start could not be recorded in time")
                return
            if time.monotonic() - job.send_at > LATE_SEND:
                job.error = SlotMissed("not sent: the engine fell behind its pacing slot")
                return
            try:
                job.wam_id = self.messenger.send(job)
            except PlatformError as error:
                job.error = error
            except Exception as error:  # a bug or a dropped connection: never retried blindly
                log.exception("send to %s failed unexpectedly", job.public_id)
                job.error = PlatformUnavailableError(f"unexpected send failure: {error}", ambiguous=True)
        finally:
            sends.count_down()

    @staticmethod
    def _throttle_hold(number: _Number | None, lone: bool, accepted: bool) -> float:
        """Seconds a throttled number's schedule is held (0: none); call under the lock.

        A lone 130429 on a paced number, the first within the window: nothing when sends of the
        batch were taken, a couple of its slots when its sends were taken just before. Anything
        else: a hold doubling with each throttle in a row."""
        now = time.monotonic()
        if (lone and number is not None and number.throttle_streak == 0
                and now - number.excused_at >= ISOLATED_THROTTLE_WINDOW):
            if accepted:
                number.excused_at = now
                return 0.0
            if now - number.accepted_at <= PACED_WITHIN:
                number.excused_at = now
                return min(SHORT_BACKOFF_MAX, SHORT_BACKOFF_SLOTS / max(1, number.mps))
        streak = (number.throttle_streak + 1) if number else 1
        hold = min(MAX_THROTTLE_HOLD, 2.0 ** (streak - 1))
        if number is not None:
            number.throttle_streak = streak
            number.held_until = now + hold
        return hold

    def _after(self, result: BatchResult, jobs: list[Job]) -> None:
        """Throttled numbers rest (their schedules held); numbers whose send got no answer too."""
        lone = _lone_throttles(jobs, result)
        for account_id in result.throttled_numbers:
            with self._lock:
                number = self._numbers.get(account_id)
                hold = self._throttle_hold(number, account_id in lone, account_id in result.accepted_numbers)
                rate = float(number.mps) if number is not None else 1.0
                plans = list(number.plans.items()) if number is not None else []
            if hold > 0:
                self.pacer.hold_tokens(bucket_key(account_id), rate, hold)
            if hold >= LONG_HOLD:
                for name, plan in plans:
                    self._stores[name].hold(plan, "throttled")
        for account_id in result.unanswered_numbers:
            # Requests still hanging at the platform may all be taken at once when it recovers:
            # sending more now would add to that burst and get refused (with nobody listening).
            with self._lock:
                number = self._numbers.get(account_id)
                if number is not None:
                    number.held_until = max(number.held_until, time.monotonic() + UNANSWERED_HOLD)
                rate = float(number.mps) if number is not None else 1.0
            self.pacer.hold_tokens(bucket_key(account_id), rate, UNANSWERED_HOLD)
        with self._lock:
            for account_id in result.accepted_numbers - result.throttled_numbers - result.unanswered_numbers:
                if account_id in self._numbers:
                    self._numbers[account_id].throttle_streak = 0
                    self._numbers[account_id].accepted_at = time.monotonic()
