"""What the queue keeps: a task that ran leaves nothing behind in the queue's store (no task's
return value is ever read), and on SQLite running one takes the file's write lock only to take
the task off the queue, not to clear a revoke flag nobody set."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from jobs.queue import build_huey

WAIT = 5.0


def test_a_task_that_ran_leaves_nothing_in_the_store(storage):
    queue = build_huey(storage)

    @queue.task()
    def answer(value: int) -> bool:
        return value > 0

    answer(1)
    task = queue.dequeue()
    assert task is not None
    assert queue.execute(task) is True
    assert queue.pending_count() == 0
    assert queue.result_count() == 0


@pytest.fixture
def queue_file(sqlite_storage):
    return build_huey(sqlite_storage)


def test_clearing_an_absent_revoke_flag_does_not_wait_for_the_write_lock(queue_file, sqlite_storage):
    holder = sqlite3.connect(sqlite_storage.queue_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    outcome: list[bool] = []
    try:
        clearing = threading.Thread(target=lambda: outcome.append(queue_file.storage.delete_data("r:absent")))
        clearing.start()
        clearing.join(WAIT)
        assert outcome == [False], "clearing a flag that is not there waited for the queue's write lock"
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_revoke_flag_that_is_there_is_still_cleared(queue_file):
    queue_file.storage.put_data("r:set", b"flag")
    assert queue_file.storage.delete_data("r:set") is True
    assert not queue_file.storage.has_data_for_key("r:set")
