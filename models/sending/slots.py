"""A thread pool that starts each task at its time: the sending engine sends every message at
the slot pacing granted it (models/counters.py), not when it was claimed."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor


class SlotExecutor(ThreadPoolExecutor):
    """`submit_at(at, fn, *args)` runs `fn` on the pool once `time.monotonic()` reaches `at`.

    One timer thread holds the waiting tasks in time order and hands each to the pool when it is
    due, so tasks start in the order of their times whatever order they were submitted in (a pool
    thread sleeping until its task's time would hold a later task ahead of an earlier one).
    """

    def __init__(self, max_workers: int, thread_name_prefix: str = ""):
        super().__init__(max_workers, thread_name_prefix=thread_name_prefix)
        self._due: list[tuple[float, int, Future, tuple]] = []
        self._order = itertools.count()
        self._wakeup = threading.Condition()
        self._closing = False
        self._timer = threading.Thread(target=self._run_timer, name=f"{thread_name_prefix}-timer", daemon=True)
        self._timer.start()

    def submit_at(self, at: float, fn, /, *args) -> Future:
        future: Future = Future()
        with self._wakeup:
            if self._closing:
                raise RuntimeError("cannot schedule new tasks after shutdown")
            heapq.heappush(self._due, (at, next(self._order), future, (fn, *args)))
            if self._due[0][2] is future:
                self._wakeup.notify()
        return future

    def _run_timer(self) -> None:
        while True:
            with self._wakeup:
                while True:
                    if self._due and self._due[0][0] <= time.monotonic():
                        _at, _order, future, call = heapq.heappop(self._due)
                        break
                    if self._closing and not self._due:
                        return
                    self._wakeup.wait(self._due[0][0] - time.monotonic() if self._due else None)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                started = self.submit(*call)
            except RuntimeError as error:  # the pool was shut down without waiting for the timer
                future.set_exception(error)
            else:
                started.add_done_callback(lambda done, future=future: _settle(future, done))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Waiting tasks still run at their time (unless cancelled) before the pool stops."""
        with self._wakeup:
            self._closing = True
            if cancel_futures:
                for _at, _order, future, _call in self._due:
                    future.cancel()
                self._due.clear()
            self._wakeup.notify()
        if wait:
            self._timer.join()
        super().shutdown(wait=wait, cancel_futures=cancel_futures)


def _settle(future: Future, done: Future) -> None:
    try:
        future.set_result(done.result())
    except BaseException as error:  # the task's exception, or the pool cancelled it
        future.set_exception(error)
