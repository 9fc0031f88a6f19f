"""A drain's lease on its endpoint: only the holder sends to it (models.events.webhooks.acquire_drain)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from models.events import webhooks
from models.store.db import atomic, outlast_outage, storage_unavailable

# A drain extends its lease every LEASE_SECONDS / 4; a worker that dies frees the endpoint (and,
# through release_claims, what it had claimed) within LEASE_SECONDS.
LEASE_SECONDS = 30.0


class LeaseKeeper:
    """Holds one endpoint's lease: extends it while the drain runs and gives it back at the end."""

    def __init__(self, endpoint_id: int, until: dt.datetime, clock: Callable[[], dt.datetime], freed: int = 0):
        self.endpoint_id = endpoint_id
        self.until = until  # the holder's token: extending and releasing match on it
        self.freed = freed  # deliveries an earlier holder claimed and never recorded
        self._clock = clock
        self._last_kept = time.monotonic()

    @classmethod
    def acquire(cls, endpoint_id: int, clock: Callable[[], dt.datetime]) -> LeaseKeeper | None:
        """The lease, or None when another drain holds it (or the endpoint is inactive).

        A drain turned away by a held lease only reads: the fan-out starts a drain for every
        endpoint that got deliveries, most often while one is running. Taking the lease frees
        what an earlier holder claimed and never recorded (most likely its worker died): those
        deliveries go out again now rather than when their claims expire. One transaction does
        both, so one write where a drain otherwise took two."""
        now = clock()
        if webhooks.drain_held(endpoint_id, now):
            return None
        with atomic():
            until = webhooks.acquire_drain(endpoint_id, now, LEASE_SECONDS)
            if until is None:
                return None
            freed = webhooks.release_claims(endpoint_id, now)
        return cls(endpoint_id, until, clock, freed)

    def keep(self, now: float) -> bool:
        """Extend the lease when it is time to; False when it lapsed and another drain took it over
        (or the storage did not answer): the drain then claims no more."""
        if now - self._last_kept < LEASE_SECONDS / 4:
            return True
        self._last_kept = now
        try:
            extended = webhooks.extend_drain(self.endpoint_id, self.until, self._clock(), LEASE_SECONDS)
        except Exception as error:
            if not storage_unavailable(error):
                raise
            extended = None
        if extended is None:
            return False
        self.until = extended
        return True

    def release(self) -> None:
        # Given back even across a storage restart: a lease left behind would hold the
        # endpoint's deliveries up for LEASE_SECONDS.
        outlast_outage(lambda: webhooks.release_drain(self.endpoint_id, self.until), what="a drain's lease")
