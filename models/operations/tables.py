"""The operations package's table: each process's heartbeat (heartbeats.py)."""

from __future__ import annotations

from peewee import CharField, DoubleField, IntegerField

from models.store.base import BaseModel

API, WORKER = "api", "worker"


class ProcessHeartbeat(BaseModel):
    """One API worker or queue consumer: written every HEARTBEAT_SECONDS, and at a clean stop.

    (The counters' `beat` / `alive` answer "is this key alive" but cannot list who beats, nor
    tell when a dead one last did, which is what an operator asks.)
    """

    name = CharField(max_length=200, primary_key=True)  # host:pid
    kind = CharField(max_length=16)  # api or worker
    host = CharField(max_length=200)
    pid = IntegerField()
    threads = IntegerField()
    periodic = IntegerField(default=0)  # 1 for the consumer that schedules the periodic tasks
    started = DoubleField()  # unix seconds
    last_beat = DoubleField()
    stopped = DoubleField(null=True)  # a clean stop; a dead process never writes it
