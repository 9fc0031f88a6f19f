"""The event outbox: `evt_` events written in the same transaction as the change that causes them.

Nothing here talks to the network. Webhook delivery reads rows whose `fanned_out_at` is null,
creates one delivery per subscribed endpoint, and stamps the row; a crash between the write and
the fan-out only delays delivery, it never loses an event.

Writing an event also asks for a prompt fan-out once its transaction commits: the delivery side
(jobs/webhooks.py) registers its nudge with `on_new_events`, so no caller has to remember to.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from models.clock import isoformat, utcnow
from models.events.tables import ALL_EVENTS, ENVELOPED_EVENTS, Event
from models.ids import new_id, new_ids
from models.store.db import after_commit, bound_datetime, execute, placeholders

_ROWS_PER_INSERT = 500  # well under SQLite's bound-parameter limit
_FLAT_EVENTS = frozenset(ALL_EVENTS) - ENVELOPED_EVENTS

_listeners: list[Callable[[], None]] = []


def on_new_events(listener: Callable[[], None]) -> None:
    """Call `listener` after every commit that wrote events (once per transaction)."""
    if listener not in _listeners:
        _listeners.append(listener)


@contextlib.contextmanager
def listening(listeners: list[Callable[[], None]]) -> Iterator[None]:
    """Only these listeners while the block runs (a caller that runs the queue in its own
    thread fans out at once instead of through the queue's coalescing)."""
    saved = list(_listeners)
    _listeners[:] = listeners
    try:
        yield
    finally:
        _listeners[:] = saved


def _new_events_committed() -> None:
    for listener in list(_listeners):
        listener()


def announce() -> None:
    """Events are being written in the current transaction: tell the listeners once it commits."""
    after_commit(_new_events_committed)


def emit(tenant_id: int, name: str, fields: dict[str, Any]) -> Event:
    """Record an event; call inside the transaction that makes the change it reports.

    Core events are flat (`{"event": name, ...fields}`); receivables events such as
    `debt.payment_received` are enveloped (`{"id", "event", "created_at", "data": fields}`) as the
    contract shows. The body each event carries is described in models/events/types.py.
    """
    if name not in ALL_EVENTS:
        raise ValueError(f"unknown event {name!r}")
    public_id = new_id("evt_")
    now = utcnow()
    if name in ENVELOPED_EVENTS:
        payload = {"id": public_id, "event": name, "created_at": isoformat(now), "data": fields}
    else:
        payload = {"event": name, **fields}
    event = Event.create(public_id=public_id, tenant=tenant_id, name=name, payload=payload, created_at=now)
    announce()
    return event


# Core events in bulk, as a batch of sends or statuses writes them: hand-written multi-row INSERTs
# (peewee builds a node per value, which costs more than the database does for a few hundred rows).


def emit_rows(name: str, items: list[tuple[int, dict[str, Any]]], at: dt.datetime | None = None) -> int:
    """Write core events of one name, `(tenant id, fields)` each, in a few INSERTs: the outbox rows
    `emit` writes (`{"event": name, ...fields}`)."""
    return emit_named_rows([(name, tenant_id, fields) for tenant_id, fields in items], at)


def emit_named_rows(items: list[tuple[str, int, dict[str, Any]]], at: dt.datetime | None = None) -> int:
    """`emit_rows` for events of several names, `(name, tenant id, fields)` each, written (and so
    numbered) in the order given."""
    if not items:
        return 0
    not_flat = {name for name, _tenant_id, _fields in items if name not in _FLAT_EVENTS}
    if not_flat:
        raise ValueError(f"not core events: {sorted(not_flat)}")
    now = bound_datetime(at or utcnow())
    table = Event._meta.table_name
    ids = new_ids("evt_", len(items))
    for start in range(0, len(items), _ROWS_PER_INSERT):
        chunk = items[start:start + _ROWS_PER_INSERT]
        params: list = []
        for public_id, (name, tenant_id, fields) in zip(ids[start:], chunk, strict=False):
            params += [public_id, tenant_id, name, orjson.dumps({"event": name, **fields}).decode(), now]
        execute(f'INSERT INTO "{table}" (public_id, tenant_id, name, payload, created_at) '
                f"VALUES {placeholders(len(chunk), 5)}", params)
    announce()
    return len(items)


def emit_many(tenant_id: int, name: str, items: list[dict[str, Any]], at: dt.datetime | None = None) -> int:
    """Write many core events of one tenant and name at once (see `emit_rows`)."""
    return emit_rows(name, [(tenant_id, fields) for fields in items], at)


def pending_fan_out(limit: int = 500):
    return (Event.select().where(Event.fanned_out_at.is_null())
            .order_by(Event.id).limit(limit))
