"""Threads that start each task at its time: the sending engine sends every message at the slot
pacing granted it (models/store/counters.py), not when it was claimed."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time

log = logging.getLogger(__name__)


class SlotExecutor:
    """`submit_at(at, fn, *args)` runs `fn` on one of the threads once `time.monotonic()` reaches `at`.

    The threads take the waiting tasks from one heap, earliest first, so tasks start in the order
    of their times whatever order they were submitted in. One idle thread at a time sleeps until
    the earliest task's time; the others sleep until it hands that watch on, as it takes its task.
    A task is a plain call: nothing is returned, and the caller learns of its end from the task
    itself (the engine counts a batch's sends down). An exception a task lets out is logged.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str = ""):
        self._due: list[tuple[float, int, object, tuple]] = []
        self._order = itertools.count()
        lock = threading.Lock()
        self._watch = threading.Condition(lock)  # the one thread waiting for the earliest task's time
        self._idle = threading.Condition(lock)  # the others
        self._watched = False
        self._closing = False
        self._threads = [threading.Thread(target=self._work, name=f"{thread_name_prefix}_{index}", daemon=True)
                         for index in range(max_workers)]
        for thread in self._threads:
            thread.start()

    def submit_at(self, at: float, fn, /, *args) -> None:
        with self._watch:
            if self._closing:
                raise RuntimeError("cannot schedule new tasks after shutdown")
            order = next(self._order)
            heapq.heappush(self._due, (at, order, fn, args))
            if self._due[0][1] == order:
                # A new earliest task: whoever watches the time must look again.
                (self._watch if self._watched else self._idle).notify()

    def _work(self) -> None:
        while True:
            with self._watch:
                while True:
                    if self._due:
                        left = self._due[0][0] - time.monotonic()
                        if left <= 0:
                            _at, _order, fn, args = heapq.heappop(self._due)
                            if self._due and not self._watched:
                                self._idle.notify()  # the next task needs a watch
                            break
                    elif self._closing:
                        self._idle.notify_all()
                        return
                    if self._watched:
                        self._idle.wait()
                    else:
                        self._watched = True
                        try:
                            self._watch.wait(left if self._due else None)
                        finally:
                            self._watched = False
            try:
                fn(*args)
            except Exception:
                log.exception("a timed task failed")

    def shutdown(self, wait: bool = True) -> None:
        """Waiting tasks still run at their time before the threads stop."""
        with self._watch:
            self._closing = True
            self._watch.notify_all()
            self._idle.notify_all()
        if wait:
            for thread in self._threads:
                thread.join()
