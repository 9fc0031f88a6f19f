"""The limits of section 8, counted in the shared counter store (per-minute fixed windows)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import falcon

from api.errors import ApiError
from config import get_settings
from models.db import counters

WINDOW = 60


@dataclass(frozen=True)
class Limit:
    key: str
    limit: int
    scope: str


def _reset_in(now: float) -> int:
    return WINDOW - int(now % WINDOW)


def check(limits: list[Limit], resp: falcon.Response | None = None) -> None:
    """Count this request against every limit; 429 when any is exceeded.

    With `resp`, the RateLimit-* headers describe the limit closest to running out.
    """
    now = time.time()
    counts = counters().incr([limit.key for limit in limits], WINDOW, now)
    reset = _reset_in(now)
    tightest = min(limits, key=lambda limit: limit.limit - counts.get(limit.key, 0))
    remaining = max(0, tightest.limit - counts.get(tightest.key, 0))
    headers = {
        "RateLimit-Limit": str(tightest.limit),
        "RateLimit-Remaining": str(remaining),
        "RateLimit-Reset": str(reset),
    }
    if resp is not None:
        resp.set_headers(headers)
    exceeded = [limit for limit in limits if counts.get(limit.key, 0) > limit.limit]
    if exceeded:
        limit = exceeded[0]
        raise ApiError(429, "rate_limited",
                       f"rate limit of {limit.limit} requests per minute exceeded ({limit.scope}); retry later",
                       {"scope": limit.scope, "limit": limit.limit, "retry_after": reset},
                       headers={**headers, "Retry-After": str(reset)})


def request_limits(key, method: str, route: str, endpoint_limit: int | None) -> list[Limit]:
    settings = get_settings()
    tenant_id = key.tenant_id
    if endpoint_limit is None:
        endpoint_limit = settings.read_rate_limit if method in {"GET", "HEAD"} else settings.write_rate_limit
    return [
        Limit(f"k:{key.id}", key.rate_limit, "api_key"),
        Limit(f"t:{tenant_id}", settings.tenant_rate_limit, "tenant"),
        Limit(f"e:{tenant_id}:{method}:{route}", endpoint_limit, "endpoint"),
    ]
