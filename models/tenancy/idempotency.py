"""Idempotency records: one per tenant and key, holding the request's fingerprint and response.

A request claims its key by inserting the record (the unique index decides the race); a
concurrent duplicate finds it `in_progress` and gets a conflict instead of running twice.

States: `in_progress` (claimed; nothing of the operation is committed), `applied` (the
operation committed, in the same transaction that set this state: see `applying`, but the
response is not stored yet), `done` (the response is stored for replay).

A request killed mid-way (a gunicorn worker killed, a machine lost) leaves its claim behind. A
retry takes an `in_progress` claim over once its claimer is known to be gone (a process of this
host that no longer exists) or after ABANDONED_AFTER: nothing of it was committed, so running
the operation is safe. An `applied` claim whose claimer is gone is never run again: the retry
gets a conflict saying so (`applied`), since its response was lost with the process.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
from peewee import IntegrityError

from models.clock import utcnow
from models.errors import Conflict
from models.store.db import before_commit, execute
from models.tenancy.tables import IdempotencyRecord

TTL = dt.timedelta(hours=48)
# A claim older than this belongs to a process that died mid-request; a retry may take it over.
ABANDONED_AFTER = dt.timedelta(minutes=5)


# Until the response is stored, `headers` holds the claimer (there are no response headers yet).
CLAIMER = "claimed_by"


@functools.cache
def _this_host() -> str:
    # The PID namespace tells containers that share a host name apart: a PID means nothing
    # outside its namespace.
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = "?"
    return f"{socket.gethostname()}/{namespace}"


def claimer() -> str:
    return f"{_this_host()}/{os.getpid()}"


def _claimer_gone(record: IdempotencyRecord) -> bool:
    """The process that claimed `record` no longer exists (known only for this host's processes)."""
    owner = (record.headers or {}).get(CLAIMER)
    if not owner:
        return True  # given up by its request (see `abandon`)
    host, _, pid = owner.rpartition("/")
    if host != _this_host() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@dataclass
class Claim:
    """The outcome of claiming a key: `record` is ours to complete, or `replay`/`conflict` is set."""

    record: IdempotencyRecord | None = None
    replay: IdempotencyRecord | None = None
    conflict: str | None = None  # "mismatch" or "in_progress"


# Every write with a key runs these three statements: written once, not built by the ORM on each.
_INSERT = ('INSERT INTO "idempotency_record" ("tenant_id", "key", "method", "path", "body_hash", "state", '
           '"headers", "created_at") VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING "id"')
_MARK_APPLIED = 'UPDATE "idempotency_record" SET "state" = ? WHERE "id" = ? AND "state" = ?'
_COMPLETE = 'UPDATE "idempotency_record" SET "state" = ?, "status" = ?, "body" = ?, "headers" = ? WHERE "id" = ?'


def claim(tenant_id: int, key: str, method: str, path: str, body_hash: str) -> Claim:
    now = utcnow()
    for _ in range(3):
        headers = {CLAIMER: claimer()}
        try:
            # One statement, its own transaction (read to the end: SQLite commits it then).
            [(record_id,)] = execute(_INSERT, (tenant_id, key, method, path, body_hash, "in_progress",
                                               orjson.dumps(headers).decode(), now)).fetchall()
            return Claim(record=IdempotencyRecord(id=record_id, tenant=tenant_id, key=key, method=method, path=path,
                                                  body_hash=body_hash, state="in_progress", headers=headers,
                                                  created_at=now))
        except IntegrityError:
            pass
        existing = IdempotencyRecord.get_or_none(
            (IdempotencyRecord.tenant == tenant_id) & (IdempotencyRecord.key == key))
        if existing is None:
            continue
        if existing.created_at < now - TTL:
            _take_over(existing, state=existing.state)
            continue
        if (existing.method, existing.path, existing.body_hash) != (method, path, body_hash):
            return Claim(conflict="mismatch")
        if existing.state == "done":
            return Claim(replay=existing)
        abandoned = existing.created_at < now - ABANDONED_AFTER or _claimer_gone(existing)
        if not abandoned:
            return Claim(conflict="in_progress")
        if existing.state == "applied":
            return Claim(conflict="applied")
        _take_over(existing, state="in_progress")
        continue
    return Claim(conflict="in_progress")


def _take_over(existing: IdempotencyRecord, state: str) -> None:
    # Only the process whose DELETE removes the row may insert the new one; and an `in_progress`
    # claim is only removed while it still is one (its operation has not committed meanwhile).
    IdempotencyRecord.delete().where(
        (IdempotencyRecord.id == existing.id) & (IdempotencyRecord.created_at == existing.created_at)
        & (IdempotencyRecord.state == state)).execute()


class ClaimLost(Conflict):
    """The claim was taken over by a retry that judged this request dead: it must not commit."""

    code = "idempotency_conflict"


@contextlib.contextmanager
def applying(record: IdempotencyRecord) -> Iterator[None]:
    """Run a request's operation: the first transaction it commits also moves the claim to
    `applied`, so "the operation happened" and "the key says so" commit together."""
    marked = False

    def mark() -> None:
        nonlocal marked
        if marked:
            return
        if execute(_MARK_APPLIED, ("applied", record.id, "in_progress")).rowcount != 1:
            raise ClaimLost("this request's Idempotency-Key was taken over by a retry; it was not applied",
                            details={"reason": "in_progress"})
        marked = True

    with before_commit(mark):
        yield


def complete(record: IdempotencyRecord, status: int, body: bytes, headers: dict[str, str]) -> None:
    execute(_COMPLETE, ("done", status, body.decode(), orjson.dumps(headers).decode(), record.id))


def abandon(record: IdempotencyRecord) -> None:
    """The response is not one to replay (5xx and friends): free the key for a retry, unless the
    operation committed before the failure, in which case a retry must not run it again."""
    deleted = IdempotencyRecord.delete().where(
        (IdempotencyRecord.id == record.id) & (IdempotencyRecord.state == "in_progress")).execute()
    if not deleted:
        IdempotencyRecord.update(headers={}).where(IdempotencyRecord.id == record.id).execute()


def purge_expired(now: dt.datetime | None = None) -> int:
    cutoff = (now or utcnow()) - TTL
    return IdempotencyRecord.delete().where(IdempotencyRecord.created_at < cutoff).execute()
