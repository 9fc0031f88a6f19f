"""Fixed-window counters shared by every process: rate limits and other per-window tallies.

Two stores with one interface: rows in the database (the embedded default) or keys in Redis.
`models.db.counters()` picks one; nothing else knows which.
"""

from __future__ import annotations

import time

from peewee import BigIntegerField, CharField, IntegerField

from models.base import BaseModel
from models.db import execute


class RateCounter(BaseModel):
    key = CharField(max_length=200)
    window = BigIntegerField()
    count = IntegerField(default=0)

    class Meta:
        primary_key = False
        indexes = ((("key", "window"), True),)


def window_start(window_seconds: int, now: float | None = None) -> int:
    now = time.time() if now is None else now
    return int(now // window_seconds) * window_seconds


class DatabaseCounters:
    def incr(self, keys: list[str], window_seconds: int, now: float | None = None) -> dict[str, int]:
        """Count one hit on each key in the current window; returns the new counts.

        One INSERT .. ON CONFLICT .. RETURNING statement for all keys, so a request costs one
        round trip and one short write whatever the number of limits it is under.
        """
        start = window_start(window_seconds, now)
        values = ", ".join(["(?, ?, 1)"] * len(keys))
        params = [value for key in keys for value in (key, start)]
        cursor = execute(
            f'INSERT INTO "rate_counter" ("key", "window", "count") VALUES {values} '
            'ON CONFLICT ("key", "window") DO UPDATE SET "count" = "rate_counter"."count" + 1 '
            'RETURNING "key", "count"', params)
        return dict(cursor.fetchall())

    def purge(self, older_than_seconds: int = 3600) -> int:
        cutoff = window_start(1) - older_than_seconds
        return RateCounter.delete().where(RateCounter.window < cutoff).execute()


class RedisCounters:
    def __init__(self, client, prefix: str):
        self.client = client
        self.prefix = prefix

    def incr(self, keys: list[str], window_seconds: int, now: float | None = None) -> dict[str, int]:
        start = window_start(window_seconds, now)
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            name = f"{self.prefix}:rl:{key}:{start}"
            pipe.incr(name)
            pipe.expire(name, window_seconds * 2)
        results = pipe.execute()
        return {key: int(results[index * 2]) for index, key in enumerate(keys)}

    def purge(self, older_than_seconds: int = 3600) -> int:
        return 0  # keys expire by themselves
