"""The store's own tables: the counters kept in the database (models/store/counters.py)."""

from __future__ import annotations

from peewee import BigIntegerField, CharField, DoubleField, IntegerField

from models.store.base import BaseModel


class RateCounter(BaseModel):
    key = CharField(max_length=200)
    window = BigIntegerField()
    count = IntegerField(default=0)

    class Meta:
        primary_key = False
        indexes = ((("key", "window"), True),)


class PacingSlot(BaseModel):
    """A number's send schedule in the database store: the next free slot (models/sending/engine.py)."""

    key = CharField(max_length=200, primary_key=True)
    # Double precision: unix seconds in PostgreSQL's 4-byte REAL would be off by minutes.
    next_free = DoubleField()  # unix seconds: the earliest time the next granted send may go
    version = BigIntegerField(default=0)  # compare-and-swap guard: two consumers never get one slot


class Heartbeat(BaseModel):
    """`key` is alive until `expires` (unix seconds): dispatch engines announce themselves here."""

    key = CharField(max_length=200, primary_key=True)
    expires = DoubleField()  # unix seconds: double precision, as for PacingSlot.next_free
