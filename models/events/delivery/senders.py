"""The threads that POST a drain's deliveries: ENDPOINT_CONCURRENCY of them, doing only HTTP.

They pull from a plain queue and hand back an outcome (or what they raised): one put and one get
a delivery, where an executor's future, condition and callback cost the drain thread as much
interpreter time as recording the outcomes. The drain's thread alone touches the database, so
claims and records overlap with requests in flight instead of pausing them.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
from collections.abc import Callable

from models.events import delivery, ssrf
from models.events.delivery.client import ENDPOINT_CONCURRENCY, Response, delivery_client, post_signed
from models.events.webhooks import Outcome, Work

log = logging.getLogger("webhooks")

# Consecutive connection failures (refused, timed out, TLS) after which a drain stops sending to
# the endpoint and fails the rest of its queue at once; those deliveries retry on the schedule.
UNREACHABLE_THRESHOLD = ENDPOINT_CONCURRENCY
# After the first outcome of a round, how long to let a few more finish before taking them.
COLLECT_PAUSE = 0.01

Send = tuple[Work, ssrf.Target, list[ssrf.IPAddress]]


def _outcome(work: Work, attempted_at: dt.datetime, response: Response) -> Outcome:
    delivery.attempted(response.ok, response.status_code, response.unreachable, response.latency_ms, work.attempt)
    return Outcome(work.delivery_id, work.attempt, work.max_attempts, attempted_at, response.ok,
                   response.status_code, response.latency_ms, response.excerpt, response.error,
                   response.retry_after, response.unreachable)


def _not_sent(work: Work, attempted_at: dt.datetime, streak: int) -> Outcome:
    return Outcome(work.delivery_id, work.attempt, work.max_attempts, attempted_at, False, unreachable=True,
                   error=f"not sent: the endpoint failed {streak} connections in a row")


class Senders:
    """Sends what the drain queues; tracks the endpoint's latency and its run of connection failures."""

    def __init__(self, secret: str, clock: Callable[[], dt.datetime]):
        self._secret = secret
        self._clock = clock
        self._client = delivery_client()
        self._pending: queue.SimpleQueue[Send | None] = queue.SimpleQueue()
        self._finished: queue.SimpleQueue[Outcome | BaseException] = queue.SimpleQueue()
        self.inflight = 0  # queued for the senders or on the wire
        self.latency = 1.0  # seconds per request, a moving average; pessimistic until answers come in
        self.unreachable_streak = 0
        self._threads = [threading.Thread(target=self._send_loop, name=f"webhook_{index}", daemon=True)
                         for index in range(ENDPOINT_CONCURRENCY)]
        for thread in self._threads:
            thread.start()

    def send(self, works: list[Work], target: ssrf.Target, addresses: list[ssrf.IPAddress]) -> None:
        for work in works:
            self._pending.put((work, target, addresses))
        self.inflight += len(works)

    def _send_loop(self) -> None:
        while (item := self._pending.get()) is not None:
            try:
                self._finished.put(self._attempt(*item))
            except BaseException as error:  # handed to the drain, which raises it
                self._finished.put(error)

    def _attempt(self, work: Work, target: ssrf.Target, addresses: list[ssrf.IPAddress]) -> Outcome:
        attempted_at = self._clock()
        try:
            response = post_signed(self._client, target, addresses, self._secret, work.event_id, work.event_name,
                                   work.body)
        except Exception as error:  # one odd delivery must not take the drain down with it
            log.exception("webhook delivery %s failed unexpectedly", work.delivery_id)
            response = Response(None, 0, error=f"internal error: {type(error).__name__}")
        return _outcome(work, attempted_at, response)

    def collect(self, wait: float) -> list[Outcome]:
        """The outcomes finished by now, waiting up to `wait` seconds for the first."""
        done: list[Outcome | BaseException] = []
        try:
            done.append(self._finished.get(timeout=wait))
            # Let a few more finish before taking them: waking for each one would make this
            # thread compete with the senders for the interpreter.
            time.sleep(COLLECT_PAUSE)
            while True:
                done.append(self._finished.get_nowait())
        except queue.Empty:
            pass
        self.inflight -= len(done)
        outcomes = []
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
            outcomes.append(outcome)
            if outcome.latency_ms is not None:
                self.latency = 0.8 * self.latency + 0.2 * outcome.latency_ms / 1000
            self.unreachable_streak = self.unreachable_streak + 1 if outcome.unreachable else 0
        return outcomes

    @property
    def unreachable(self) -> bool:
        return self.unreachable_streak >= UNREACHABLE_THRESHOLD

    def fail_queued(self) -> list[Outcome]:
        """The receiver is down: fail what is queued now rather than wait out a timeout for each;
        those deliveries retry on their schedule like any failure. What a sender already took
        comes back through `collect` as usual."""
        outcomes = []
        try:
            while True:
                work, _target, _addresses = self._pending.get_nowait()  # type: ignore[misc]
                self.inflight -= 1
                outcomes.append(_not_sent(work, self._clock(), self.unreachable_streak))
        except queue.Empty:
            pass
        return outcomes

    def stop(self) -> None:
        # Whatever is still queued goes out before the senders stop, as an executor's shutdown
        # would: those deliveries are claimed, and their outcomes are already lost with the drain.
        for _thread in self._threads:
            self._pending.put(None)
        for thread in self._threads:
            thread.join()
