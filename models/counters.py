"""Fixed-window counters shared by every process: rate limits and other per-window tallies.

Two stores with one interface: rows in the database (the embedded default) or keys in Redis.
`models.db.counters()` picks one; nothing else knows which.
"""

from __future__ import annotations

import time

from peewee import BigIntegerField, CharField, FloatField, IntegerField

from models.base import BaseModel
from models.db import execute


class RateCounter(BaseModel):
    key = CharField(max_length=200)
    window = BigIntegerField()
    count = IntegerField(default=0)

    class Meta:
        primary_key = False
        indexes = ((("key", "window"), True),)


class PacingBucket(BaseModel):
    """A token bucket for send pacing (models/dispatch.py), in the database store."""

    key = CharField(max_length=200, primary_key=True)
    tokens = FloatField()
    updated = FloatField()  # unix seconds of the last refill
    version = BigIntegerField(default=0)  # compare-and-swap guard: two consumers never spend one token


class Heartbeat(BaseModel):
    """`key` is alive until `expires` (unix seconds): dispatch engines announce themselves here."""

    key = CharField(max_length=200, primary_key=True)
    expires = FloatField()


PACING_TTL = 3600  # an idle bucket is forgotten after an hour; it would be full again anyway


def refill(tokens: float, updated: float, rate: float, burst: float, now: float) -> float:
    return min(burst, tokens + max(0.0, now - updated) * rate)


def grant_from(tokens: float, rate: float, wanted: int) -> tuple[int, float, float]:
    """(granted, tokens left, seconds until the next whole token) from a refilled bucket."""
    granted = min(wanted, int(tokens)) if tokens >= 1 else 0
    left = tokens - granted
    wait = 0.0 if left >= 1 else (1 - left) / rate
    return granted, left, wait


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

    # Send pacing and engine liveness (models/dispatch.py).

    def take_tokens(self, requests: dict[str, tuple[float, float, int]],
                    now: float | None = None) -> dict[str, tuple[int, float]]:
        """Take up to `wanted` tokens from each bucket `key: (rate, burst, wanted)`, all in one call.

        Returns `key: (granted, seconds until the next token)`. A new bucket starts full. Each row
        changes by a compare-and-swap on `version`, so consumers on other threads or hosts can only
        spend what the bucket holds: a lost race is retried against the fresh row.
        """
        from models.db import atomic

        results: dict[str, tuple[int, float]] = {}
        if not requests:
            return results
        now = time.time() if now is None else now
        with atomic():
            (PacingBucket.insert_many([{"key": key, "tokens": float(requests[key][1]), "updated": now, "version": 0}
                                       for key in sorted(requests)])
             .on_conflict_ignore().execute())
            rows = {row.key: row for row in PacingBucket.select().where(PacingBucket.key.in_(list(requests)))}
            # Keys in one order for every caller: two consumers never lock each other's rows in reverse.
            for key in sorted(requests):
                rate, burst, wanted = requests[key]
                row = rows[key]
                results[key] = (0, 0.05)
                for _attempt in range(20):
                    tokens = refill(row.tokens, row.updated, rate, burst, now)
                    granted, left, wait = grant_from(tokens, rate, wanted)
                    changed = (PacingBucket
                               .update(tokens=left, updated=max(now, row.updated), version=row.version + 1)
                               .where((PacingBucket.key == key) & (PacingBucket.version == row.version))
                               .execute())
                    if changed == 1:
                        results[key] = (granted, wait)
                        break
                    row = PacingBucket.get(PacingBucket.key == key)
        return results

    def hold_tokens(self, key: str, rate: float, seconds: float, now: float | None = None) -> None:
        """Put a bucket in debt so that it grants nothing for `seconds` (the platform throttled us)."""
        now = time.time() if now is None else now
        debt = -rate * seconds
        (PacingBucket.insert(key=key, tokens=debt, updated=now, version=0)
         .on_conflict(conflict_target=[PacingBucket.key],
                      update={PacingBucket.tokens: debt, PacingBucket.updated: now,
                              PacingBucket.version: PacingBucket.version + 1})
         .execute())

    def beat(self, key: str, ttl_seconds: float, now: float | None = None) -> None:
        expires = (time.time() if now is None else now) + ttl_seconds
        (Heartbeat.insert(key=key, expires=expires)
         .on_conflict(conflict_target=[Heartbeat.key], update={Heartbeat.expires: expires}).execute())

    def alive(self, keys: list[str], now: float | None = None) -> set[str]:
        if not keys:
            return set()
        now = time.time() if now is None else now
        return {row.key for row in Heartbeat.select(Heartbeat.key)
                .where(Heartbeat.key.in_(list(keys)) & (Heartbeat.expires > now))}

    def purge_pacing(self, older_than_seconds: int = PACING_TTL) -> int:
        cutoff = time.time() - older_than_seconds
        removed = PacingBucket.delete().where(PacingBucket.updated < cutoff).execute()
        return removed + Heartbeat.delete().where(Heartbeat.expires < cutoff).execute()


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

    # Send pacing and engine liveness (models/dispatch.py). One Lua script refills and spends
    # every bucket of a call atomically, on the Redis server's clock (one clock for all hosts).

    _TAKE = """
    local now = tonumber(ARGV[1])
    if now < 0 then
      local t = redis.call('TIME')
      now = tonumber(t[1]) + tonumber(t[2]) / 1000000
    end
    local out = {}
    for i, key in ipairs(KEYS) do
      local rate = tonumber(ARGV[3 * i - 1])
      local burst = tonumber(ARGV[3 * i])
      local wanted = tonumber(ARGV[3 * i + 1])
      local state = redis.call('HMGET', key, 'tokens', 'updated')
      local tokens = tonumber(state[1]) or burst
      local updated = tonumber(state[2]) or now
      tokens = math.min(burst, tokens + math.max(0, now - updated) * rate)
      local granted = 0
      if tokens >= 1 then granted = math.min(wanted, math.floor(tokens)) end
      tokens = tokens - granted
      local wait = 0
      if tokens < 1 then wait = (1 - tokens) / rate end
      redis.call('HSET', key, 'tokens', tostring(tokens), 'updated', tostring(math.max(now, updated)))
      redis.call('EXPIRE', key, tonumber(ARGV[#ARGV]))
      out[i] = {granted, tostring(wait)}
    end
    return out
    """

    _HOLD = """
    local now = tonumber(ARGV[1])
    if now < 0 then
      local t = redis.call('TIME')
      now = tonumber(t[1]) + tonumber(t[2]) / 1000000
    end
    redis.call('HSET', KEYS[1], 'tokens', tostring(-tonumber(ARGV[2]) * tonumber(ARGV[3])), 'updated', tostring(now))
    redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
    return 1
    """

    def _script(self, name: str):
        scripts = self.__dict__.setdefault("_scripts", {})
        if name not in scripts:
            scripts[name] = self.client.register_script(getattr(self, name))
        return scripts[name]

    def take_tokens(self, requests: dict[str, tuple[float, float, int]],
                    now: float | None = None) -> dict[str, tuple[int, float]]:
        if not requests:
            return {}
        keys = list(requests)
        args: list[float] = [-1.0 if now is None else now]
        for key in keys:
            rate, burst, wanted = requests[key]
            args += [rate, burst, wanted]
        args.append(PACING_TTL)
        answer = self._script("_TAKE")(keys=[f"{self.prefix}:tb:{key}" for key in keys], args=args)
        return {key: (int(granted), float(wait)) for key, (granted, wait) in zip(keys, answer, strict=True)}

    def hold_tokens(self, key: str, rate: float, seconds: float, now: float | None = None) -> None:
        self._script("_HOLD")(keys=[f"{self.prefix}:tb:{key}"],
                              args=[-1.0 if now is None else now, rate, seconds, PACING_TTL])

    def beat(self, key: str, ttl_seconds: float, now: float | None = None) -> None:
        # Redis expires the key on its own clock; `now` only matters to the database store.
        self.client.set(f"{self.prefix}:hb:{key}", "1", px=max(1, int(ttl_seconds * 1000)))

    def alive(self, keys: list[str], now: float | None = None) -> set[str]:
        keys = list(keys)
        if not keys:
            return set()
        values = self.client.mget([f"{self.prefix}:hb:{key}" for key in keys])
        return {key for key, value in zip(keys, values, strict=True) if value is not None}

    def purge_pacing(self, older_than_seconds: int = PACING_TTL) -> int:
        return 0  # keys expire by themselves
