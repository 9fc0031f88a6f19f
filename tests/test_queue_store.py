"""What the queue keeps: a task that ran leaves nothing behind in the queue's store (no task's
return value is ever read), and on SQLite running one takes the file's write lock only to take
the task off the queue, not to clear a revoke flag nobody set. On Redis, an idle read waits long
for work, and answers the moment a task is queued."""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time

import pytest

from jobs.queue import REDIS_READ_TIMEOUT, build_huey
from tests.live import wait_until

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


@pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
def test_an_idle_read_of_the_redis_queue_waits_long_yet_takes_a_task_at_once(storage):
    queue = build_huey(storage)
    # Named, so that the test can see its read waiting on the Redis server.
    reader_name = f"test-reader-{secrets.token_hex(4)}"
    queue.storage.pool.connection_kwargs["client_name"] = reader_name

    @queue.task()
    def ping() -> None:
        pass

    started = time.monotonic()
    assert queue.dequeue() is None
    # At huey's own 1 s, each of a consumer's threads asked again every second with nothing to do.
    assert time.monotonic() - started >= REDIS_READ_TIMEOUT - 0.5

    taken: list = []
    reader = threading.Thread(target=lambda: taken.append((queue.dequeue(), time.monotonic())))
    reader.start()
    wait_until(lambda: any(client["name"] == reader_name and client["cmd"] == "brpop" and "b" in client["flags"]
                           for client in queue.storage.conn.client_list()),
               timeout=REDIS_READ_TIMEOUT, interval=0.02, message="the read waiting on the queue")
    queued = time.monotonic()
    ping()
    reader.join(REDIS_READ_TIMEOUT + 5)
    assert taken and taken[0][0] is not None, "the read did not take the task"
    assert taken[0][1] - queued < 1.0, "the task waited for the read's timeout"
