"""Claiming a drain's due deliveries, as many as keep its senders busy, to vetted addresses only."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import NamedTuple

from models.events import ssrf, webhooks
from models.events.delivery.client import ENDPOINT_CONCURRENCY, vetted_addresses
from models.events.tables import WebhookEndpoint
from models.events.webhooks import Outcome, Work
from models.store.db import storage_unavailable

log = logging.getLogger("webhooks")

# How much a drain keeps claimed ahead (queued or in flight): about BACKLOG_SECONDS of the
# endpoint's work at its observed latency, between 2 x ENDPOINT_CONCURRENCY and MAX_BACKLOG.
# Enough that the senders never run dry while the drain waits on the database (a commit on
# PostgreSQL waits for the disk); little enough for a slow endpoint that every claimed delivery
# is sent long before its claim expires (CLAIM_SECONDS).
BACKLOG_SECONDS = 2.0
MAX_BACKLOG = 256
# A drain resolves and vets its endpoint's host again after this long (a lookup per batch cost
# a blocking getaddrinfo every few dozen deliveries); shorter than the TTL most names carry.
VET_SECONDS = 10.0


class Claimed(NamedTuple):
    """One claim: the deliveries and where to send them, or, when the endpoint's host is no
    longer one we connect to, the deliveries refused."""

    works: list[Work]
    target: ssrf.Target | None = None
    addresses: list[ssrf.IPAddress] | None = None
    refused: list[Outcome] | None = None


def backlog(latency: float) -> int:
    """How many deliveries to keep claimed at `latency` seconds a request."""
    at_latency = ENDPOINT_CONCURRENCY * BACKLOG_SECONDS / max(latency, 0.001)
    return int(min(MAX_BACKLOG, max(2 * ENDPOINT_CONCURRENCY, at_latency)))


def _refused(work: Work, attempted_at: dt.datetime, reason: str) -> Outcome:
    return Outcome(work.delivery_id, work.attempt, work.max_attempts, attempted_at, False,
                   error=f"refused: {reason}")


class Claimer:
    """Claims for one drain until its slice is over, nothing is due, or it is told to stop."""

    def __init__(self, endpoint: WebhookEndpoint, clock: Callable[[], dt.datetime], slice_seconds: float,
                 started: float):
        self.endpoint = endpoint
        self._clock = clock
        self._ends = started + slice_seconds
        self.claiming = True
        # The last claim took everything that was due: the next one first asks whether anything
        # became due since, a read, rather than take the writers' turn for an empty claim.
        self._took_all = False
        self._vetted: tuple[float, ssrf.Target, list[ssrf.IPAddress]] | None = None  # (when, target, addresses)

    def stop(self) -> None:
        self.claiming = False

    def claim(self, inflight: int, latency: float) -> Claimed | None:
        """A claim when fewer than half the backlog is left; None when none is wanted or none
        was due (the claimer then stops)."""
        wanted = backlog(latency)
        if not self.claiming or inflight >= wanted // 2:
            return None
        if time.monotonic() >= self._ends:
            self.claiming = False
            return None
        works = self._claim_due(wanted - inflight)
        self._took_all = len(works) < wanted - inflight
        if not works:
            self.claiming = False
            return None
        try:
            target, addresses = self._vet()
        except ssrf.UnsafeTarget as error:
            self._vetted = None
            return Claimed(works, refused=[_refused(work, self._clock(), str(error)) for work in works])
        return Claimed(works, target, addresses)

    def _claim_due(self, count: int) -> list[Work]:
        try:
            if self._took_all and not webhooks.has_due(self.endpoint.id, self._clock()):
                return []
            return webhooks.claim_due(self.endpoint.id, count, self._clock())
        except Exception as error:
            if not storage_unavailable(error):
                raise
            # Finish and record what is on the wire; the next drain claims the rest.
            log.warning("drain of endpoint %s stops claiming: %s", self.endpoint.id, error)
            return []

    def _vet(self) -> tuple[ssrf.Target, list[ssrf.IPAddress]]:
        # Checked again every VET_SECONDS: a name that now resolves inward is refused. Between
        # checks the connections still go to the vetted addresses only, so a DNS change can delay
        # the refusal, never redirect a POST.
        if self._vetted is None or time.monotonic() - self._vetted[0] >= VET_SECONDS:
            target = ssrf.parse_target(self.endpoint.url)
            self._vetted = (time.monotonic(), target, vetted_addresses(target))
        _at, target, addresses = self._vetted
        return target, addresses
