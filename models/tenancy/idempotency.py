"""Idempotency records: one per tenant and key, holding the request's fingerprint and response.

A request looks its key up first (a read): a stored answer is replayed, a key used with another
request or still in flight is a conflict. Otherwise the request runs, and its operation's first
commit writes the record, `applied`, in that same transaction (`applying`): the unique index
decides the race, so of two concurrent duplicates one commits and the other finds the key taken
at its commit, rolls back and gets a conflict. The answer is then stored (`done`) for replay; an
operation that commits nothing has its answer's record written then.

An operation that calls another service before its first commit (a platform or gateway call)
claims its key before it runs instead (`claim`): the record is written `in_progress` in a
statement of its own, so a concurrent duplicate is turned away before it calls out twice.

States: `in_progress` (claimed; nothing of the operation is committed), `applied` (the
operation committed, in the same transaction that set this state, but the response is not stored
yet), `done` (the response is stored for replay).

A request killed mid-way (a gunicorn worker killed, a machine lost) leaves nothing behind if it
had not committed, unless it claimed first: a retry takes an `in_progress` claim over once its
claimer is known to be gone (a process of this host that no longer exists) or after
ABANDONED_AFTER: nothing of it was committed, so running the operation is safe. An `applied`
record whose claimer is gone is never run again: the retry gets a conflict saying so
(`applied`), since its response was lost with the process.
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

from models.clock import utcnow
from models.errors import Conflict
from models.store.db import after_commit, before_commit, execute, fetch_one
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
class KeyUse:
    """A request's use of its key: what its record is written from, and the record's id once it is."""

    tenant_id: int
    key: str
    method: str
    path: str
    body_hash: str
    started_at: dt.datetime
    record_id: int | None = None  # claimed first, or committed by the operation: else nothing is written
    applied: bool = False


@dataclass
class Claim:
    """The outcome of looking up or claiming a key: `use` is ours to apply and complete, or
    `replay`/`conflict` is set."""

    use: KeyUse | None = None
    replay: IdempotencyRecord | None = None
    conflict: str | None = None  # "mismatch", "in_progress" or "applied"


# Every write with a key runs some of these: written once, not built by the ORM on each.
_FIND = ('SELECT "id", "method", "path", "body_hash", "state", "status", "body", "headers", "created_at" '
         'FROM "idempotency_record" WHERE "tenant_id" = ? AND "key" = ?')
_INSERT = ('INSERT INTO "idempotency_record" ("tenant_id", "key", "method", "path", "body_hash", "state", '
           '"status", "body", "headers", "created_at") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) '
           'ON CONFLICT DO NOTHING RETURNING "id"')
_MARK_APPLIED = 'UPDATE "idempotency_record" SET "state" = ? WHERE "id" = ? AND "state" = ?'
_COMPLETE = 'UPDATE "idempotency_record" SET "state" = ?, "status" = ?, "body" = ?, "headers" = ? WHERE "id" = ?'


def look_up(tenant_id: int, key: str, method: str, path: str, body_hash: str) -> Claim:
    """What a request with this key may do, read without writing unless a stale record is in the
    way: run (`use`, its record written on its first commit), replay, or conflict."""
    use = KeyUse(tenant_id, key, method, path, body_hash, utcnow())
    for _ in range(3):
        existing = _find(tenant_id, key)
        if existing is None:
            return Claim(use=use)
        verdict = _judge(existing, use)
        if verdict is not None:
            return verdict
    return Claim(conflict="in_progress")


def claim(tenant_id: int, key: str, method: str, path: str, body_hash: str) -> Claim:
    """Claim the key before the request runs: its record is written `in_progress` at once."""
    use = KeyUse(tenant_id, key, method, path, body_hash, utcnow())
    for _ in range(3):
        use.record_id = _insert(use, "in_progress")  # a statement of its own: committed at once
        if use.record_id is not None:
            return Claim(use=use)
        existing = _find(tenant_id, key)
        if existing is None:
            continue
        verdict = _judge(existing, use)
        if verdict is not None:
            return verdict
    return Claim(conflict="in_progress")


def _find(tenant_id: int, key: str) -> IdempotencyRecord | None:
    row = fetch_one(_FIND, (tenant_id, key))
    if row is None:
        return None
    record_id, method, path, body_hash, state, status, body, headers, created_at = row
    return IdempotencyRecord(id=record_id, tenant=tenant_id, key=key, method=method, path=path, body_hash=body_hash,
                             state=state, status=status, body=body,
                             headers=IdempotencyRecord.headers.python_value(headers),
                             created_at=IdempotencyRecord.created_at.python_value(created_at))


def _judge(existing: IdempotencyRecord, use: KeyUse) -> Claim | None:
    """The answer a stored record gives a request, or None once a stale one is removed (look again)."""
    if existing.created_at < use.started_at - TTL:
        _take_over(existing, state=existing.state)
        return None
    if (existing.method, existing.path, existing.body_hash) != (use.method, use.path, use.body_hash):
        return Claim(conflict="mismatch")
    if existing.state == "done":
        return Claim(replay=existing)
    abandoned = existing.created_at < use.started_at - ABANDONED_AFTER or _claimer_gone(existing)
    if not abandoned:
        return Claim(conflict="in_progress")
    if existing.state == "applied":
        return Claim(conflict="applied")
    _take_over(existing, state="in_progress")
    return None


def _insert(use: KeyUse, state: str, status: int | None = None, body: str | None = None,
            headers: dict[str, str] | None = None) -> int | None:
    """Write the key's record; None when the key has one already (the unique index decides)."""
    headers = {CLAIMER: claimer()} if headers is None else headers
    # Read to the end: outside a transaction, SQLite commits the statement then.
    rows = execute(_INSERT, (use.tenant_id, use.key, use.method, use.path, use.body_hash, state, status, body,
                             orjson.dumps(headers).decode(), use.started_at)).fetchall()
    return rows[0][0] if rows else None


def _take_over(existing: IdempotencyRecord, state: str) -> None:
    # Only the process whose DELETE removes the row may insert the new one; and an `in_progress`
    # claim is only removed while it still is one (its operation has not committed meanwhile).
    IdempotencyRecord.delete().where(
        (IdempotencyRecord.id == existing.id) & (IdempotencyRecord.created_at == existing.created_at)
        & (IdempotencyRecord.state == state)).execute()


class ClaimLost(Conflict):
    """Another request with the key committed first, or took this one's claim over judging it
    dead: this one must not commit."""

    code = "idempotency_conflict"


@contextlib.contextmanager
def applying(use: KeyUse) -> Iterator[None]:
    """Run a request's operation: the first transaction it commits also writes its key's record
    `applied` (or moves its claim there), so "the operation happened" and "the key says so"
    commit together."""
    def mark() -> None:
        if use.applied:
            return
        if use.record_id is not None:  # claimed first
            if execute(_MARK_APPLIED, ("applied", use.record_id, "in_progress")).rowcount != 1:
                raise ClaimLost("this request's Idempotency-Key was taken over by a retry; it was not applied",
                                details={"reason": "in_progress"})
            record_id = use.record_id
        else:
            record_id = _insert(use, "applied")
            if record_id is None:
                raise ClaimLost("another request with this Idempotency-Key was applied meanwhile; this one was not",
                                details={"reason": "in_progress"})
        # Only once the transaction has committed: one rolled back (a blip at its commit, retried)
        # marks again.
        after_commit(lambda: _applied(use, record_id))

    with before_commit(mark):
        yield


def _applied(use: KeyUse, record_id: int) -> None:
    use.record_id, use.applied = record_id, True


def complete(use: KeyUse, status: int, body: bytes, headers: dict[str, str]) -> None:
    """Store the answer for replay (with the record, when the operation committed nothing)."""
    if use.record_id is None:
        _insert(use, "done", status, body.decode(), headers)
    else:
        execute(_COMPLETE, ("done", status, body.decode(), orjson.dumps(headers).decode(), use.record_id))


def abandon(use: KeyUse) -> None:
    """The response is not one to replay (5xx and friends): free the key for a retry, unless the
    operation committed before the failure, in which case a retry must not run it again."""
    if use.record_id is None:
        return
    deleted = IdempotencyRecord.delete().where(
        (IdempotencyRecord.id == use.record_id) & (IdempotencyRecord.state == "in_progress")).execute()
    if not deleted:
        IdempotencyRecord.update(headers={}).where(IdempotencyRecord.id == use.record_id).execute()


def purge_expired(now: dt.datetime | None = None) -> int:
    cutoff = (now or utcnow()) - TTL
    return IdempotencyRecord.delete().where(IdempotencyRecord.created_at < cutoff).execute()
