"""SQLite's writers take turns on a lock the kernel hands on (models/store/db.py, `_SqlitePool`):
a write transaction holds it from BEGIN to its end, and a writer that finds it taken, in another
thread or another process, waits in the kernel rather than in SQLite's sleeping busy handler.
A process's writers queue on a lock of the process first, so one thread of each process at a
time waits on the file.

Waiting is shown by the kernel itself: /proc/locks lists each process blocked on a `flock`, and
a thread blocked on the process's lock sleeps in a futex (/proc/self/task/ID/wchan)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from models.store.db import atomic, connection, execute
from models.tenancy.tenants import create_tenant
from tests.conftest import base_env
from tests.live import wait_until

pytestmark = pytest.mark.skipif(not Path("/proc/locks").exists(), reason="the kernel's lock table is Linux's")

WAIT = 20.0


def writers_lock(settings) -> Path:
    return Path(f"{settings.sqlite_path}-writer")


def is_free(lock: Path) -> bool:
    """Whether nobody holds the writers' lock: asked on a file of our own, which holds nothing."""
    with open(lock, "rb") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(probe, fcntl.LOCK_UN)
        return True


def flock_waiters(lock: Path, pid: int) -> int:
    """How many of `pid`'s open files the kernel lists as blocked on the writers' lock."""
    inode = os.stat(lock).st_ino
    count = 0
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and fields[fields.index("->") + 1] == "FLOCK" \
                and fields[-4] == str(pid) and fields[-3].endswith(f":{inode}"):
            count += 1
    return count


def wait_until_waiting(lock: Path, pid: int) -> None:
    """Until the kernel lists `pid` as blocked on the writers' lock."""
    wait_until(lambda: flock_waiters(lock, pid), timeout=WAIT, interval=0.01,
               message=f"process {pid} to wait on the writers' lock")


def parked(thread_ids: list[int]) -> int:
    """How many of these threads of this process sleep on a lock (a futex)."""
    count = 0
    for thread_id in thread_ids:
        with contextlib.suppress(FileNotFoundError):
            count += "futex" in Path(f"/proc/self/task/{thread_id}/wchan").read_text()
    return count


def tenant_names() -> list[str]:
    return [row[0] for row in execute('SELECT "name" FROM "tenant" ORDER BY "id"').fetchall()]


def test_a_write_transaction_holds_the_writers_lock_until_it_ends_however_it_ends(sqlite_storage):
    lock = writers_lock(sqlite_storage)
    with atomic():
        create_tenant("Held")
        with atomic():  # a savepoint ends, the transaction goes on
            create_tenant("Nested")
        assert not is_free(lock)
    assert is_free(lock)

    with pytest.raises(RuntimeError), atomic():
        create_tenant("Undone")
        raise RuntimeError("undo")
    assert is_free(lock)
    assert "Undone" not in tenant_names()


def write_in_another_thread_while_holding_a_write(write: Callable[[], None]) -> None:
    """Run `write` in another thread while this one holds a write transaction: the other thread
    waits for the process's turn in the kernel, and its write ends only after the transaction has
    committed."""
    done = threading.Event()
    thread_ids: list[int] = []

    def run() -> None:
        thread_ids.append(threading.get_native_id())
        with connection():
            write()
        done.set()

    with atomic():
        create_tenant("Holder")
        writer = threading.Thread(target=run)
        writer.start()
        wait_until(lambda: parked(thread_ids) >= 1, timeout=WAIT, interval=0.01, message="the writer to wait")
        assert not done.is_set()
    writer.join(WAIT)
    assert done.is_set()


def test_a_writer_in_another_thread_waits_in_the_kernel_and_writes_once_the_holder_commits(sqlite_storage):
    def second_writer() -> None:
        with atomic():
            create_tenant("Second")

    write_in_another_thread_while_holding_a_write(second_writer)
    assert tenant_names()[-2:] == ["Holder", "Second"]


def test_a_statement_that_writes_outside_a_transaction_waits_its_turn_too(sqlite_storage):
    lock = writers_lock(sqlite_storage)
    tenant = create_tenant("Renamed later")
    write_in_another_thread_while_holding_a_write(
        lambda: execute('UPDATE "tenant" SET "name" = ? WHERE "id" = ?', ("Renamed", tenant.id)))
    assert "Renamed" in tenant_names() and is_free(lock)


def test_a_writer_in_another_process_waits_in_the_kernel_and_writes_once_the_holder_commits(sqlite_storage):
    lock = writers_lock(sqlite_storage)
    script = textwrap.dedent("""
        import sys
        from config import get_settings
        from models.store.db import atomic, connection, install_engine
        from models.tenancy.tenants import create_tenant

        install_engine(get_settings())
        print("ready", flush=True)
        with connection(), atomic():
            create_tenant("Other process")
        print("written", flush=True)
    """)
    env = {**os.environ, **base_env(sqlite_storage.data_dir)}
    with atomic():
        create_tenant("Holder")
        child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True,
                                 cwd=Path(__file__).resolve().parent.parent)
        try:
            assert child.stdout.readline().strip() == "ready"
            wait_until_waiting(lock, child.pid)
        except BaseException:
            child.kill()
            raise
    out, _ = child.communicate(timeout=WAIT)
    assert child.returncode == 0 and out.strip() == "written"
    assert tenant_names()[-2:] == ["Holder", "Other process"]


def test_of_a_process_writers_one_at_a_time_waits_on_the_file(sqlite_storage):
    """Another process holds a write; four threads here want to write: one of them is blocked on
    the file, the other three on the process's lock, and all write once the holder commits."""
    lock = writers_lock(sqlite_storage)
    script = textwrap.dedent("""
        import sys
        from config import get_settings
        from models.store.db import atomic, connection, install_engine
        from models.tenancy.tenants import create_tenant

        install_engine(get_settings())
        with connection(), atomic():
            create_tenant("Holder elsewhere")
            print("holding", flush=True)
            sys.stdin.readline()
    """)
    env = {**os.environ, **base_env(sqlite_storage.data_dir)}
    holder = subprocess.Popen([sys.executable, "-c", script], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).resolve().parent.parent)
    thread_ids: list[int] = []

    def write(index: int) -> None:
        thread_ids.append(threading.get_native_id())
        with connection(), atomic():
            create_tenant(f"Thread {index}")

    writers = [threading.Thread(target=write, args=(index,)) for index in range(4)]
    try:
        assert holder.stdout.readline().strip() == "holding"
        for writer in writers:
            writer.start()
        wait_until(lambda: len(thread_ids) == 4, timeout=WAIT, interval=0.01, message="the four writers")
        wait_until_waiting(lock, os.getpid())
        wait_until(lambda: parked(thread_ids) >= 3, timeout=WAIT, interval=0.01, message="three writers to wait")
        assert flock_waiters(lock, os.getpid()) == 1
    finally:
        holder.communicate("go\n", timeout=WAIT)
    for writer in writers:
        writer.join(WAIT)
    assert holder.returncode == 0
    assert sorted(tenant_names()[-4:]) == [f"Thread {index}" for index in range(4)]
