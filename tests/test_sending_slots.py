"""The send threads: each task starts at its time, in the order of the times."""

from __future__ import annotations

import threading
import time

import pytest

from models.sending.slots import SlotExecutor

pytestmark = pytest.mark.timing  # start times a few hundredths of a second apart


def test_tasks_start_in_the_order_of_their_times_and_never_before_them():
    executor = SlotExecutor(4, thread_name_prefix="test-slots")
    started: list[tuple[int, float]] = []
    lock = threading.Lock()

    def task(index: int) -> None:
        with lock:
            started.append((index, time.monotonic()))

    base = time.monotonic() + 0.1
    times = {index: base + index * 0.02 for index in range(10)}
    for index in reversed(range(10)):  # the latest first
        executor.submit_at(times[index], task, index)
    executor.shutdown(wait=True)

    assert [index for index, _ in started] == list(range(10))
    assert all(at >= times[index] for index, at in started)


def test_an_earlier_task_submitted_later_is_not_held_behind_a_later_one():
    executor = SlotExecutor(2, thread_name_prefix="test-slots")
    done: dict[str, float] = {}
    submitted = time.monotonic()
    executor.submit_at(submitted + 1.0, lambda: done.__setitem__("late", time.monotonic()))
    early = threading.Event()
    executor.submit_at(submitted + 0.05, lambda: (done.__setitem__("early", time.monotonic()), early.set()))

    assert early.wait(2.0)
    assert "late" not in done
    assert done["early"] - submitted < 0.9
    executor.shutdown(wait=True)
    assert done["late"] >= submitted + 1.0


def test_shutting_down_runs_every_waiting_task_at_its_time_and_refuses_new_ones():
    executor = SlotExecutor(1, thread_name_prefix="test-slots")
    ran: list[str] = []
    at = time.monotonic() + 0.2

    def fail() -> None:
        ran.append("failed")
        raise RuntimeError("a task's own failure")

    executor.submit_at(at, fail)
    executor.submit_at(at + 0.01, ran.append, "after")  # the one thread outlives the failure
    executor.shutdown(wait=True)

    assert ran == ["failed", "after"]
    assert time.monotonic() >= at
    with pytest.raises(RuntimeError):
        executor.submit_at(time.monotonic(), ran.append, "too late")
