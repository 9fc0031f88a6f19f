"""Webhook delivery: one engine that POSTs due deliveries to an endpoint and records the outcomes.

It has the sending core's shape (models/sending/): `drain.py` runs one endpoint's drain, a loop
that hands each step to a part that does one thing:

- `claimer.py`: claims due deliveries, as many as keep the senders busy at the endpoint's
  observed latency, and vets the endpoint's addresses again every few seconds (SSRF);
- `senders.py`: ENDPOINT_CONCURRENCY threads that only do HTTP, and the cut-off that fails
  what is queued once the endpoint is unreachable;
- `recorder.py`: writes the outcomes in batches;
- `lease.py`: the drain's lease on the endpoint, taken, extended and given back.

`client.py` is the pinned HTTP client and the signed POST; `ping.py` the test event.

The queue only triggers it: a drain that must run again (its endpoint's next retry, a lease
that ends, no free slot) asks what the queue registered with `on_requeue` (jobs/webhooks.py),
and every attempt is told to what was registered with `on_attempt` (the metrics). This module
imports none of its submodules, so importing any of them stays cheap.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

_requeues: list[Callable[..., None]] = []
_observers: list[Callable[[bool, int | None, bool, int | None, int], None]] = []


def on_requeue(requeue: Callable[..., None]) -> None:
    """Let `requeue(endpoint_id, delay=, eta=, woke_for=)` queue the drains that drains ask for."""
    if requeue not in _requeues:
        _requeues.append(requeue)


def on_attempt(observer: Callable[[bool, int | None, bool, int | None, int], None]) -> None:
    """Call `observer(ok, status_code, unreachable, latency_ms, attempt)` after every POST."""
    if observer not in _observers:
        _observers.append(observer)


def requeue(endpoint_id: int, *, delay: float | None = None, eta: dt.datetime | None = None,
            woke_for: dt.datetime | None = None) -> None:
    """Queue another drain of the endpoint: after `delay` seconds, at `eta` (for the retry
    `woke_for`), or now, behind what is already queued, when neither is given."""
    for queue in list(_requeues):
        queue(endpoint_id, delay=delay, eta=eta, woke_for=woke_for)


def attempted(ok: bool, status_code: int | None, unreachable: bool, latency_ms: int | None, attempt: int) -> None:
    for observer in _observers:
        observer(ok, status_code, unreachable, latency_ms, attempt)
