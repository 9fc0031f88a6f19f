"""Outcomes written in batches: the attempt log, each delivery's status and its next retry."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from dataclasses import dataclass

from models.events import webhooks
from models.events.webhooks import Outcome
from models.store.db import outlast_outage

# Outcomes are written in batches of this size (or every RECORD_INTERVAL seconds). SQLite writes
# every page a commit touched (the attempt log, the delivery and its indexes): 128 outcomes a
# commit cost about a fifth less CPU each than 64. The price: a worker that dies may leave up to
# 128 POSTs unrecorded (plus those on the wire), sent again after a crash (at least once).
RECORD_BATCH = 128
RECORD_INTERVAL = 0.5


@dataclass
class DrainStats:
    attempted: int = 0
    delivered: int = 0
    failed: int = 0
    ran: bool = False


class Recorder:
    """Gathers a drain's outcomes and writes them when a batch is full, the senders are idle, or
    RECORD_INTERVAL has passed."""

    def __init__(self, endpoint_id: int, stats: DrainStats):
        self.endpoint_id = endpoint_id
        self.stats = stats
        self.outcomes: list[Outcome] = []
        self._last_record = time.monotonic()

    def add(self, outcomes: Iterable[Outcome]) -> None:
        self.outcomes.extend(outcomes)

    def record_if_due(self, now: float, inflight: int) -> None:
        if self.outcomes and (len(self.outcomes) >= RECORD_BATCH or not inflight
                              or now - self._last_record >= RECORD_INTERVAL):
            self._record(now)

    def _record(self, now: float) -> None:
        outcomes, self.outcomes = self.outcomes, []
        # The POSTs were made: their record waits out a storage restart rather than be lost,
        # which would leave the deliveries claimed (and resent) CLAIM_SECONDS later.
        outlast_outage(functools.partial(webhooks.record, self.endpoint_id, outcomes), what="webhook attempts")
        self.stats.attempted += len(outcomes)
        self.stats.delivered += sum(1 for outcome in outcomes if outcome.ok)
        self.stats.failed += sum(1 for outcome in outcomes if not outcome.ok)
        self._last_record = now
