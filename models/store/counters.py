"""Counters shared by every process: fixed-window rate limits and other per-window tallies,
send slots for pacing, and engine heartbeats.

Stores with one interface: keys in Redis when configured, else rows in the database; on the
embedded (SQLite) profile the per-window tallies live in a shared-memory table next to the
database file instead, so counting a request never takes the database's single write lock.
`models.setup.init_db` picks one for the process (`use`) and `counters()` answers it; nothing
else knows which.
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import mmap
import os
import struct
import threading
import time
import zlib
from pathlib import Path

from peewee import Case

from models.store.db import atomic, execute, is_postgres, placeholders
from models.store.tables import Heartbeat, PacingSlot, RateCounter

# Send pacing is a GCRA (generic cell rate algorithm, "virtual scheduling"): every granted send
# gets its own slot, one `slot_interval` after the previous one, and the caller sends it at that
# time, never earlier. Nothing is banked while a number is idle, so there is no burst: the
# platform counts sends in any one-second window, and slots at least 1/rate apart keep any
# window at or under the rate. A little more than 1/rate (PACING_MARGIN) absorbs the jitter
# between a slot and the moment the platform receives the send (threads, network), which
# would otherwise let an unlucky window catch one send too many.
PACING_MARGIN = 0.05
# The first slot of a call is at least this far ahead: time for the caller to claim what it sends.
SLOT_LEAD = 0.25
PACING_TTL = 3600  # a schedule idle this long is forgotten (its slots are all in the past)
_PACING_CHUNK = 200  # numbers per pacing statement: a few parameters each, well under SQLite's limit
_UNCHANGED = '("key" = ? AND "version" = ?)'  # a schedule row as it was read


def slot_interval(rate: float) -> float:
    """Seconds between two sends of a number paced at `rate` messages a second."""
    return (1 + PACING_MARGIN) / rate


def slot_phase(key: str) -> float:
    """Where in its interval a number's slots fall, as a fraction: fixed per number and spread
    over numbers, so numbers that start together do not all send at the same instants (a burst
    of concurrent requests every interval, each number's send landing early or late in it)."""
    return (zlib.crc32(key.encode()) % 1024) / 1024


def on_grid(at: float, interval: float, phase: float) -> float:
    """The first of a number's slot times (phase + k * interval) at or after `at`."""
    return at + (phase * interval - at) % interval


def schedule_slots(next_free: float | None, interval: float, phase: float, burst: float, wanted: int,
                   now: float) -> tuple[int, float, float]:
    """`(granted, next free slot after them, seconds until the first granted slot)`.

    Slots are granted up to `burst` intervals ahead of the lead time, so a caller working in
    ticks always has the next tick's sends scheduled. When nothing is granted, the last value
    is the seconds until a call could get a slot.
    """
    first = max(next_free or 0.0, on_grid(now + SLOT_LEAD, interval, phase))
    ahead = first - (now + SLOT_LEAD)  # how far the schedule already runs past the lead
    # Slots before the horizon (with a tolerance for rounding: unix times carry ~0.2 µs of it).
    granted = max(0, min(int(wanted), math.ceil(burst - ahead / interval - 1e-6)))
    if granted:
        return granted, first + granted * interval, first - now
    return 0, first, max(0.0, ahead - burst * interval)


def window_start(window_seconds: int, now: float | None = None) -> int:
    now = time.time() if now is None else now
    return int(now // window_seconds) * window_seconds


class DatabaseCounters:
    def incr(self, keys: list[str], window_seconds: int, now: float | None = None,
             amounts: dict[str, int] | None = None) -> dict[str, int]:
        """Count one hit (or `amounts[key]` hits) on each key in the current window; returns the
        new counts.

        One INSERT .. ON CONFLICT .. RETURNING statement for all keys, so a request costs one
        round trip and one short write whatever the number of limits it is under.
        """
        start = window_start(window_seconds, now)
        values = ", ".join(["(?, ?, ?)"] * len(keys))
        params = [value for key in keys for value in (key, start, (amounts or {}).get(key, 1))]
        cursor = execute(
            f'INSERT INTO "rate_counter" ("key", "window", "count") VALUES {values} '
            'ON CONFLICT ("key", "window") DO UPDATE SET "count" = "rate_counter"."count" + excluded."count" '
            'RETURNING "key", "count"', params)
        return dict(cursor.fetchall())

    def purge(self, older_than_seconds: int = 3600) -> int:
        cutoff = window_start(1) - older_than_seconds
        return RateCounter.delete().where(RateCounter.window < cutoff).execute()

    # Send pacing and engine liveness (models/sending/engine.py).

    def take_tokens(self, requests: dict[str, tuple[float, float, int]],
                    now: float | None = None) -> dict[str, tuple[int, float]]:
        """Grant up to `wanted` send slots for each number `key: (rate, burst, wanted)`, in one call.

        Returns `key: (granted, seconds until the first granted slot)`; the slots that follow are
        `slot_interval(rate)` apart, and each send must wait for its own (see `schedule_slots`).
        Each row changes by a compare-and-swap on `version`, so consumers on other threads or
        hosts never get the same slot: a lost race is retried against the fresh row.
        """
        results: dict[str, tuple[int, float]] = {}
        if not requests:
            return results
        now = time.time() if now is None else now
        # Keys in one order for every caller: two consumers never lock each other's rows in reverse.
        keys = sorted(requests)
        with atomic():
            # Hand-written SQL: this runs every engine tick for every number with work, and peewee
            # would build each statement (and a node per value) anew.
            for start in range(0, len(keys), _PACING_CHUNK):
                chunk = keys[start:start + _PACING_CHUNK]
                execute(f'INSERT INTO "pacing_slot" ("key", "next_free", "version") VALUES '
                        f'{", ".join(["(?, 0.0, 0)"] * len(chunk))} ON CONFLICT ("key") DO NOTHING', chunk)
            rows: dict[str, tuple[float, int]] = {}
            for start in range(0, len(keys), _PACING_CHUNK):
                chunk = keys[start:start + _PACING_CHUNK]
                # PostgreSQL: the rows locked in key order, so the one UPDATE below (whose own
                # order is the planner's) never waits on a row out of that order.
                for key, next_free, version in execute(
                        f'SELECT "key", "next_free", "version" FROM "pacing_slot" WHERE "key" IN '
                        f'({placeholders(len(chunk))}) ORDER BY "key"'
                        + (" FOR UPDATE" if is_postgres() else ""), chunk).fetchall():
                    rows[key] = (next_free, version)
            # Every row's compare-and-swap in one statement; a row another caller changed in between
            # is not returned, and is tried again alone against its fresh value.
            planned: dict[str, tuple[int, float, float, int]] = {}
            for key in keys:
                rate, burst, wanted = requests[key]
                next_free, version = rows[key]
                granted, next_free, wait = schedule_slots(next_free, slot_interval(rate), slot_phase(key), burst,
                                                          wanted, now)
                results[key] = (0, wait)
                if granted:
                    planned[key] = (granted, wait, next_free, version)
            swapped: set[str] = set()
            chunked = sorted(planned)
            for start in range(0, len(chunked), _PACING_CHUNK):
                chunk = chunked[start:start + _PACING_CHUNK]
                params: list = []
                for key in chunk:
                    params += [key, planned[key][2]]
                for key in chunk:
                    params += [key, planned[key][3]]
                unchanged = " OR ".join([_UNCHANGED] * len(chunk))
                swapped.update(key for (key,) in execute(
                    f'UPDATE "pacing_slot" SET "next_free" = CASE "key"{" WHEN ? THEN ?" * len(chunk)} END, '
                    f'"version" = "version" + 1 WHERE {unchanged} RETURNING "key"', params).fetchall())
            for key in chunked:
                if key in swapped:
                    results[key] = planned[key][:2]
                else:
                    results[key] = self._take_one(key, requests[key], now)
        return results

    @staticmethod
    def _take_one(key: str, request: tuple[float, float, int], now: float) -> tuple[int, float]:
        """One number's slots by compare-and-swap, retried against the fresh row while others win."""
        rate, burst, wanted = request
        for _attempt in range(20):
            next_free, version = execute('SELECT "next_free", "version" FROM "pacing_slot" WHERE "key" = ?',
                                         (key,)).fetchone()
            granted, next_free, wait = schedule_slots(next_free, slot_interval(rate), slot_phase(key), burst,
                                                      wanted, now)
            if not granted:
                return 0, wait
            changed = execute('UPDATE "pacing_slot" SET "next_free" = ?, "version" = "version" + 1 '
                              'WHERE "key" = ? AND "version" = ?', (next_free, key, version)).rowcount
            if changed == 1:
                return granted, wait
        return 0, 0.05

    def hold_tokens(self, key: str, rate: float, seconds: float, now: float | None = None) -> None:
        """Grant no new slot for `seconds` (the platform throttled us); slots granted stay valid."""
        now = time.time() if now is None else now
        until = on_grid(now + seconds, slot_interval(rate), slot_phase(key))
        later = Case(None, [(PacingSlot.next_free < until, until)], PacingSlot.next_free)
        (PacingSlot.insert(key=key, next_free=until, version=0)
         .on_conflict(conflict_target=[PacingSlot.key],
                      update={PacingSlot.next_free: later, PacingSlot.version: PacingSlot.version + 1})
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
        removed = PacingSlot.delete().where(PacingSlot.next_free < cutoff).execute()
        return removed + Heartbeat.delete().where(Heartbeat.expires < cutoff).execute()


class SharedMemoryCounters(DatabaseCounters):
    """The embedded profile's store: tallies (`incr`) in a file-backed shared-memory table that every
    process on the host maps (gunicorn workers, the queue consumer, `svcctl`); pacing and heartbeats
    stay in the database.

    The table is exact across processes: each call holds an exclusive `flock` on the file (and a
    thread lock, since threads of one process share its open file) while it reads and bumps its
    slots. A slot is `(key hash, window start, expiry, count)`; a key is found by linear probing
    from its 64-bit hash, and a slot whose window has expired is reused. The one tolerance: when
    every slot of a probe run is live (more than ~PROBE live keys hashing together, far beyond the
    table's 65536 slots' worth of keys per window), the slot closest to expiring is taken over and
    that key restarts from this call's hits.
    """

    SLOTS = 65536
    PROBE = 64
    _SLOT = struct.Struct("<QqqQ")  # key hash, window start, expires (unix seconds), count

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._fd: int | None = None
        self._map: mmap.mmap | None = None

    def _table(self) -> tuple[int, mmap.mmap]:
        # Opened per process: an open file inherited across fork would share its flock with the parent.
        if self._pid != os.getpid() or self._map is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            size = self.SLOTS * self._SLOT.size
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            self._fd, self._map, self._pid = fd, mmap.mmap(fd, size), os.getpid()
        return self._fd, self._map

    # os's functions are bound here: at interpreter exit a module's globals may be gone before
    # the last table is collected.
    def __del__(self, getpid=os.getpid, close=os.close):
        if self._map is not None and self._pid == getpid():
            self._map.close()
            close(self._fd)

    @staticmethod
    def _hash(key: str) -> int:
        return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") or 1

    def incr(self, keys: list[str], window_seconds: int, now: float | None = None,
             amounts: dict[str, int] | None = None) -> dict[str, int]:
        now = time.time() if now is None else now
        start = window_start(window_seconds, now)
        expires = start + window_seconds
        slot, size = self._SLOT, self._SLOT.size
        counts: dict[str, int] = {}
        with self._lock:
            fd, table = self._table()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                for key in keys:
                    wanted, hits = self._hash(key), (amounts or {}).get(key, 1)
                    home = wanted % self.SLOTS
                    free = None
                    oldest = (None, math.inf)
                    for step in range(self.PROBE):
                        offset = ((home + step) % self.SLOTS) * size
                        found, window, until, count = slot.unpack_from(table, offset)
                        if found == wanted and window == start:
                            counts[key] = count + hits
                            slot.pack_into(table, offset, wanted, start, expires, count + hits)
                            break
                        if found == 0 or until <= now:
                            if free is None:
                                free = offset
                        elif until < oldest[1]:
                            oldest = (offset, until)
                    else:
                        offset = free if free is not None else oldest[0]
                        slot.pack_into(table, offset, wanted, start, expires, hits)
                        counts[key] = hits
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        return counts

    def purge(self, older_than_seconds: int = 3600) -> int:
        return 0  # expired slots are reused in place


class RedisCounters:
    def __init__(self, client, prefix: str):
        self.client = client
        self.prefix = prefix

    def incr(self, keys: list[str], window_seconds: int, now: float | None = None,
             amounts: dict[str, int] | None = None) -> dict[str, int]:
        start = window_start(window_seconds, now)
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            name = f"{self.prefix}:rl:{key}:{start}"
            pipe.incrby(name, (amounts or {}).get(key, 1))
            pipe.expire(name, window_seconds * 2)
        results = pipe.execute()
        return {key: int(results[index * 2]) for index, key in enumerate(keys)}

    def purge(self, older_than_seconds: int = 3600) -> int:
        return 0  # keys expire by themselves

    # Send pacing and engine liveness (models/sending/engine.py). One Lua script schedules the slots of
    # every number of a call atomically (`schedule_slots`, spelled in Lua), on the Redis server's
    # clock: one clock for all hosts.

    _TAKE = """
    local now = tonumber(ARGV[1])
    if now < 0 then
      local t = redis.call('TIME')
      now = tonumber(t[1]) + tonumber(t[2]) / 1000000
    end
    local lead = tonumber(ARGV[2])
    local ttl = tonumber(ARGV[3])
    local out = {}
    for i, key in ipairs(KEYS) do
      local interval = tonumber(ARGV[4 * i])
      local phase = tonumber(ARGV[4 * i + 1])
      local burst = tonumber(ARGV[4 * i + 2])
      local wanted = tonumber(ARGV[4 * i + 3])
      local start = now + lead
      start = start + math.fmod(math.fmod(phase * interval - start, interval) + interval, interval)
      local first = math.max(tonumber(redis.call('GET', key)) or 0, start)
      local ahead = first - (now + lead)
      local granted = math.max(0, math.min(wanted, math.ceil(burst - ahead / interval - 1e-6)))
      if granted > 0 then
        redis.call('SET', key, string.format('%.6f', first + granted * interval), 'EX', ttl)
        out[i] = {granted, string.format('%.6f', first - now)}
      else
        out[i] = {0, string.format('%.6f', math.max(0, ahead - burst * interval))}
      end
    end
    return out
    """

    _HOLD = """
    local now = tonumber(ARGV[1])
    if now < 0 then
      local t = redis.call('TIME')
      now = tonumber(t[1]) + tonumber(t[2]) / 1000000
    end
    local interval = tonumber(ARGV[4])
    local start = now + tonumber(ARGV[2])
    start = start + math.fmod(math.fmod(tonumber(ARGV[5]) * interval - start, interval) + interval, interval)
    local until_ = math.max(tonumber(redis.call('GET', KEYS[1])) or 0, start)
    redis.call('SET', KEYS[1], string.format('%.6f', until_), 'EX', tonumber(ARGV[3]))
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
        args: list[float] = [-1.0 if now is None else now, SLOT_LEAD, PACING_TTL]
        for key in keys:
            rate, burst, wanted = requests[key]
            args += [slot_interval(rate), slot_phase(key), burst, wanted]
        answer = self._script("_TAKE")(keys=[f"{self.prefix}:slot:{key}" for key in keys], args=args)
        return {key: (int(granted), float(wait)) for key, (granted, wait) in zip(keys, answer, strict=True)}

    def hold_tokens(self, key: str, rate: float, seconds: float, now: float | None = None) -> None:
        self._script("_HOLD")(keys=[f"{self.prefix}:slot:{key}"],
                              args=[-1.0 if now is None else now, seconds, PACING_TTL, slot_interval(rate),
                                    slot_phase(key)])

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


# The process's store, chosen by models/setup.py beside the database it installs.
Counters = DatabaseCounters | RedisCounters
_installed: Counters | None = None


def use(store: Counters) -> None:
    """Make `store` the process's counter store."""
    global _installed
    _installed = store


def counters() -> Counters:
    """The shared counter store: Redis when configured, else the database (whose tallies, on SQLite,
    live in shared memory beside it)."""
    if _installed is None:
        raise RuntimeError("init_db() has not been called")
    return _installed
