"""Webhook delivery on the queue: the fan-out, each endpoint's drain, the sweeps.

The queue only triggers the delivery engine (models/events/delivery/):
1. `notify_new_events()` (run after every commit that wrote events: `models.events.outbox.on_new_events`)
   enqueues `fan_out_task`, coalesced to at most two tasks a second; `sweep` does the same every
   minute as a safety net.
2. The fan-out turns events into deliveries (models.events.webhooks.fan_out) and enqueues a drain for
   each endpoint that got some.
3. `drain_endpoint` runs one endpoint's drain (models.events.delivery.drain); the drain asks for
   the next one (its endpoint's next retry, the end of another drain's lease) through the
   `requeue` registered here, and each attempt is counted in the metrics (jobs/operations.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from config import get_settings
from jobs import operations
from jobs.queue import crontab, periodic_task, task
from models.clock import utcnow
from models.events import delivery, outbox, webhooks
from models.events.delivery.drain import drain
from models.store.counters import counters, window_start
from models.store.db import connection

log = logging.getLogger("webhooks")

FAN_OUT_BATCH = 500
NOTIFY_KEY = "webhooks:fan-out"


@task()
def drain_endpoint(endpoint_id: int, woke_for: dt.datetime | None = None) -> None:
    drain(endpoint_id, woke_for=woke_for)


def _requeue(endpoint_id: int, *, delay: float | None = None, eta: dt.datetime | None = None,
             woke_for: dt.datetime | None = None) -> None:
    if delay is None and eta is None:
        drain_endpoint(endpoint_id)
    else:
        args = (endpoint_id,) if woke_for is None else (endpoint_id, woke_for)
        drain_endpoint.schedule(args=args, delay=delay, eta=eta)


delivery.on_requeue(_requeue)
delivery.on_attempt(operations.observe_webhook_delivery)


def run_fan_out() -> int:
    """Fan out every pending event, starting each endpoint's drain as soon as it has work."""
    total = 0
    while True:
        result = webhooks.fan_out(FAN_OUT_BATCH)
        total += result.events
        start_drains(result.endpoint_ids)
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
