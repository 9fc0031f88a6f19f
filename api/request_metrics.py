"""The API's HTTP metrics: every request counted and timed in this process's memory, and added to
prometheus_client's values in batches.

Under gunicorn the values live in files every worker shares (config/metrics.py), and each
increment takes a process-wide lock, asks the kernel for the process id and writes the file:
three times a request for its count and its duration. Here a request costs one dictionary update
under a lock of its own. A thread adds what was counted FLUSH_SECONDS after the first request of
a batch, a scrape adds its own process's batch before it reads, and a worker that stops adds its
last one on its way out: a scrape sees another worker's requests at most FLUSH_SECONDS late, and
only a worker that is killed loses any (its last FLUSH_SECONDS).
"""

from __future__ import annotations

import atexit
import bisect
import os
import threading
import time

import falcon
from prometheus_client import Counter, Histogram

FLUSH_SECONDS = 1.0
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

HTTP_REQUESTS = Counter("svc_http_requests_total", "HTTP requests answered, by route template, method and status",
                        ["route", "method", "status"])
HTTP_SECONDS = Histogram("svc_http_request_duration_seconds", "Time to answer an HTTP request",
                         ["route", "method"], buckets=BUCKETS)
RATE_LIMITED = Counter("svc_http_rate_limited_total", "Requests refused by a rate limit (429)", ["route"])

# Each bucket's upper bound, +Inf last, as the histogram counts them: a duration falls in the
# first bucket whose bound is at least the duration.
_BOUNDS = (*BUCKETS, float("inf"))


class RequestTallies:
    """This process's requests not yet added to the metrics, by route template, method and status."""

    def __init__(self) -> None:
        self._start_afresh()
        # A forked worker starts with none of its parent's requests, and a flusher of its own.
        os.register_at_fork(after_in_child=self._start_afresh)

    def _start_afresh(self) -> None:
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._pending: dict[tuple, list] = {}  # (route, method, status) -> [count, seconds, count by bucket]
        self._due = threading.Event()
        self._flusher: threading.Thread | None = None

    def record(self, route: str, method: str, status, seconds: float) -> None:
        """One request answered in `seconds`; `status` as Falcon's response holds it."""
        bucket = bisect.bisect_left(_BOUNDS, seconds)
        key = (route, method, status)
        with self._lock:
            tally = self._pending.get(key)
            if tally is None:
                first = not self._pending
                tally = self._pending[key] = [0, 0.0, [0] * len(_BOUNDS)]
                if first:
                    self._wake_flusher()
            tally[0] += 1
            tally[1] += seconds
            tally[2][bucket] += 1

    def _wake_flusher(self) -> None:
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_every_batch, name="http_metrics", daemon=True)
            self._flusher.start()
            atexit.register(self.flush)
        self._due.set()

    def _flush_every_batch(self) -> None:
        while True:
            self._due.wait()
            time.sleep(FLUSH_SECONDS)
            # Cleared before the batch is taken: a request counted after the take wakes the next one.
            self._due.clear()
            self.flush()

    def flush(self) -> None:
        """Add every request counted so far to the metrics; done when it returns, whichever
        thread had begun a flush first."""
        with self._flushing:
            with self._lock:
                pending, self._pending = self._pending, {}
            for (route, method, status), (count, seconds, by_bucket) in pending.items():
                code = falcon.http_status_to_code(status)
                HTTP_REQUESTS.labels(route, method, str(code)).inc(count)
                histogram = HTTP_SECONDS.labels(route, method)
                # A histogram's public `observe` takes one duration at a time; a batch adds to
                # its sum and buckets the values `observe` itself adds to (prometheus_client is pinned).
                histogram._sum.inc(seconds)
                for bucket, in_bucket in enumerate(by_bucket):
                    if in_bucket:
                        histogram._buckets[bucket].inc(in_bucket)
                if code == 429:
                    RATE_LIMITED.labels(route).inc(count)


tallies = RequestTallies()
