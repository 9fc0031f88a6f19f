"""The limits of section 8, counted in the shared counter store (per-minute fixed windows).

Near a limit every request is counted in the shared store and answered from its count, so the
limits hold exactly across processes and hosts. Far from it (a count at most half of a limit of
LOCAL_FLOOR or more a minute), a process counts hits in its own memory and adds them to the store
at most FLUSH_SECONDS apart: a high-volume key costs no store round trip per request. The
tolerance: while every process sees a count under half the limit, hits other processes took in
their last FLUSH_SECONDS are not yet in the count a process checks; past half, no process
counts locally, so what is admitted past a limit is at most those few hundred milliseconds of the
other processes' traffic. One thread of a process adds its tallies to the store at a time: the
others count in memory until its answer is in (a round trip more of local counting). Limits
under LOCAL_FLOOR (the contract's defaults) are always exact.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import falcon

from api.errors import ApiError
from config import get_settings
from models.store.counters import counters, window_start

WINDOW = 60
LOCAL_FLOOR = 1000
FLUSH_SECONDS = 0.1

# key -> [count the store last answered, hits not yet added to it, monotonic time of that answer],
# for the window (and store: tests switch stores) in `_tallies_window`; a new window starts empty.
_tallies: dict[tuple, list] = {}
_tallies_window: list = [None]
_tallies_lock = threading.Lock()


@dataclass(frozen=True)
class Limit:
    key: str
    limit: int
    scope: str
    # The limit as its RateLimit-Limit header says it, written once rather than on every request.
    limit_text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "limit_text", str(self.limit))


def _reset_in(now: float) -> int:
    return WINDOW - int(now % WINDOW)


def check(limits: Sequence[Limit], resp: falcon.Response | None = None) -> None:
    """Count this request against every limit; 429 when any is exceeded.

    With `resp`, the RateLimit-* headers describe the limit closest to running out.
    """
    now = time.time()
    counts = _count(limits, now)
    # One pass: the limit with the fewest requests left (the first of equals), and the first exceeded.
    tightest, left, exceeded = None, 0, None
    for limit in limits:
        limit_left = limit.limit - counts.get(limit.key, 0)
        if tightest is None or limit_left < left:
            tightest, left = limit, limit_left
        if exceeded is None and limit_left < 0:
            exceeded = limit
    if tightest is None:
        raise ValueError("no limits to check")
    reset = _reset_in(now)
    # Pairs rather than a dict: every request sends them, and only a refusal needs the dict.
    headers = (("RateLimit-Limit", tightest.limit_text), ("RateLimit-Remaining", str(max(0, left))),
               ("RateLimit-Reset", str(reset)))
    if resp is not None:
        resp.set_headers(headers)
    if exceeded is not None:
        limit = exceeded
        raise ApiError(429, "rate_limited",
                       f"rate limit of {limit.limit} requests per minute exceeded ({limit.scope}); retry later",
                       {"scope": limit.scope, "limit": limit.limit, "retry_after": reset},
                       headers={**dict(headers), "Retry-After": str(reset)})


def _count(limits: Sequence[Limit], now: float) -> dict[str, int]:
    """Each limit's count in this window, this request included (see the module's docstring)."""
    store, start, moment = counters(), window_start(WINDOW, now), time.monotonic()
    counts: dict[str, int] = {}
    flush: dict[str, int] = {}
    with _tallies_lock:
        window = _tallies_window[0]
        if window is None or window[0] is not store or window[1] != start:
            _tallies.clear()  # hits not added yet were in a window that has ended
            _tallies_window[0] = (store, start)
        for limit in limits:
            tally = _tallies.get(limit.key)
            if tally is not None and limit.limit >= LOCAL_FLOOR and 2 * (tally[0] + tally[1] + 1) <= limit.limit:
                if moment - tally[2] < FLUSH_SECONDS:
                    tally[1] += 1
                    counts[limit.key] = tally[0] + tally[1]
                    continue
                # This thread adds the tally to the store; the process's other threads go on
                # counting here until its answer is in, rather than each making the same round
                # trip (on Redis under load, a dozen round trips where one does).
                tally[2] = moment
            flush[limit.key] = 1 + (tally[1] if tally is not None else 0)
            if tally is not None:
                tally[1] = 0
    if flush:
        totals = store.incr(list(flush), WINDOW, now, flush)
        with _tallies_lock:
            if _tallies_window[0] == (store, start):
                for key, total in totals.items():
                    tally = _tallies.setdefault(key, [0, 0, moment])
                    tally[0], tally[2] = max(tally[0], total), moment
        counts.update(totals)
    return counts


# The limits of a request, by everything they are made of: a key's requests share one tuple
# rather than building three limits and their key strings on every request.
_request_limits: dict[tuple, tuple[Limit, ...]] = {}
_REQUEST_LIMITS_KEPT = 10_000


def request_limits(key, method: str, route: str, endpoint_limit: int | None) -> tuple[Limit, ...]:
    settings = get_settings()
    if endpoint_limit is None:
        endpoint_limit = settings.read_rate_limit if method in {"GET", "HEAD"} else settings.write_rate_limit
    tenant_id = key.tenant_id
    made_of = (key.id, key.rate_limit, tenant_id, settings.tenant_rate_limit, method, route, endpoint_limit)
    limits = _request_limits.get(made_of)
    if limits is None:
        limits = (
            Limit(f"k:{key.id}", key.rate_limit, "api_key"),
            Limit(f"t:{tenant_id}", settings.tenant_rate_limit, "tenant"),
            Limit(f"e:{tenant_id}:{method}:{route}", endpoint_limit, "endpoint"),
        )
        if len(_request_limits) >= _REQUEST_LIMITS_KEPT:
            _request_limits.clear()
        _request_limits[made_of] = limits
    return limits
