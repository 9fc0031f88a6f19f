"""Idempotency records: one per tenant and key, holding the request's fingerprint and response.

A request claims its key by inserting the record (the unique index decides the race); a
concurrent duplicate finds it `in_progress` and gets a conflict instead of running twice.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from peewee import CharField, DateTimeField, ForeignKeyField, IntegerField, IntegrityError, TextField

from models.base import BaseModel, JSONField
from models.clock import utcnow
from models.db import atomic
from models.tenants import Tenant

TTL = dt.timedelta(hours=48)
# A claim older than this belongs to a process that died mid-request; a retry may take it over.
ABANDONED_AFTER = dt.timedelta(minutes=5)


class IdempotencyRecord(BaseModel):
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    key = CharField(max_length=255)
    method = CharField(max_length=8)
    path = CharField(max_length=1000)
    body_hash = CharField(max_length=64)
    state = CharField(max_length=16, default="in_progress")
    status = IntegerField(null=True)
    body = TextField(null=True)
    headers = JSONField(null=True)
    created_at = DateTimeField(default=utcnow, index=True)

    class Meta:
        indexes = ((("tenant", "key"), True),)


@dataclass
class Claim:
    """The outcome of claiming a key: `record` is ours to complete, or `replay`/`conflict` is set."""

    record: IdempotencyRecord | None = None
    replay: IdempotencyRecord | None = None
    conflict: str | None = None  # "mismatch" or "in_progress"


def claim(tenant_id: int, key: str, method: str, path: str, body_hash: str) -> Claim:
    now = utcnow()
    for _ in range(3):
        try:
            with atomic():
                record = IdempotencyRecord.create(tenant=tenant_id, key=key, method=method,
                                                  path=path, body_hash=body_hash, created_at=now)
            return Claim(record=record)
        except IntegrityError:
            pass
        existing = IdempotencyRecord.get_or_none(
            (IdempotencyRecord.tenant == tenant_id) & (IdempotencyRecord.key == key))
        if existing is None:
            continue
        stale = existing.created_at < now - TTL or (
            existing.state == "in_progress" and existing.created_at < now - ABANDONED_AFTER)
        if stale:
            # Only the process whose DELETE removes the row may insert the new one.
            IdempotencyRecord.delete().where(
                (IdempotencyRecord.id == existing.id)
                & (IdempotencyRecord.created_at == existing.created_at)).execute()
            continue
        if (existing.method, existing.path, existing.body_hash) != (method, path, body_hash):
            return Claim(conflict="mismatch")
        if existing.state == "in_progress":
            return Claim(conflict="in_progress")
        return Claim(replay=existing)
    return Claim(conflict="in_progress")


def complete(record: IdempotencyRecord, status: int, body: bytes, headers: dict[str, str]) -> None:
    IdempotencyRecord.update(state="done", status=status, body=body.decode(), headers=headers).where(
        IdempotencyRecord.id == record.id).execute()


def abandon(record: IdempotencyRecord) -> None:
    """The response is not one to replay (5xx and friends): free the key for a retry."""
    IdempotencyRecord.delete().where(IdempotencyRecord.id == record.id).execute()


def purge_expired(now: dt.datetime | None = None) -> int:
    cutoff = (now or utcnow()) - TTL
    return IdempotencyRecord.delete().where(IdempotencyRecord.created_at < cutoff).execute()
