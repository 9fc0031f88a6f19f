"""Each process's copies of the wallets it has read, and what tells it that a copy no longer holds.

The balance read is the API's most frequent call, and its one database read cost a worker more
than the rest of the request (a round trip on PostgreSQL; on SQLite three hand-offs of the
interpreter's lock inside the driver). So a process keeps the wallet row it read, and answers
from it while the wallet has not changed since:

1. Every wallet has a version: an 8-byte slot in a table in shared memory beside the data
   (`wallet-versions` in the data directory), the tenant id modulo SLOTS. Tenants that share a
   slot only cost each other a read.
2. Every committed change to a wallet writes a new random value into its slot, after the commit
   (`Changed`, an after-commit hook of every change in models/tenancy/credits.py).
3. A process reads the slot *before* it reads the row, and keeps the row under that version.
   A change committed and marked before the slot was read is in the row; one marked after it
   leaves the slot holding another value, so the copy is never used again. A change committed
   but not yet marked is concurrent with the read: its writer has not answered anyone yet.
4. On PostgreSQL, hosts share the database but not the table: the hook also announces the change
   on CHANNEL, and a thread in each process LISTENs there and marks what it hears in its own
   host's table. While that thread is not listening (starting, or reconnecting after the
   database went away), the process answers from the database and keeps no copy; when it
   listens again it drops every copy, since what changed meanwhile went unheard.
5. A copy is used for at most `copy_seconds` (SVC_WALLET_COPY_SECONDS, 1 s; 0 keeps none)
   whatever the slot says, which bounds what a change that was never marked or heard can cost:
   a process killed between its commit and its mark, a notification lost with a connection that
   died silently, or SQL run by hand.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import random
import select
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SLOTS = 65536
COPIES_KEPT = 10_000  # tenants whose copies a process keeps before it starts afresh
CHANNEL = "wallet_changed"
LISTEN_WAKE_SECONDS = 1.0  # how soon the listening thread notices that it was told to stop
RELISTEN_SECONDS = (0.1, 5.0)  # the first and the longest wait before listening again
_VERSION = struct.Struct("<Q")


class WalletCopies:
    """The wallet versions of one data directory, and this process's copies under them.

    `announce(tenant_id)` tells other hosts of a change and `listen()` connects to hear theirs
    (PostgreSQL); both None for a database only one host uses (SQLite).
    """

    def __init__(self, path: Path, copy_seconds: float, announce: Callable[[int], None] | None = None,
                 listen: Callable[[], Any] | None = None):
        self.path = Path(path)
        self.copy_seconds = copy_seconds
        self._announce = announce
        self._listen = listen
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._map: mmap.mmap | None = None
        # tenant id -> (the slot's version before the read, monotonic time of the read, the row)
        self._copies: dict[int, tuple[int, float, tuple]] = {}
        self._hearing = listen is None  # every change made elsewhere reaches this process's table
        self._stopped = threading.Event()
        self._listener_pid: int | None = None
        self._listener_connection: Any = None

    def _table(self) -> mmap.mmap:
        table = self._map
        if table is not None and self._pid == os.getpid():
            return table
        with self._lock:
            # Mapped per process: the copies a parent made before a fork are not the child's, nor
            # is its listening thread, which does not survive the fork.
            if self._map is None or self._pid != os.getpid():
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    size = SLOTS * _VERSION.size
                    if os.fstat(fd).st_size < size:
                        os.ftruncate(fd, size)
                    self._map = mmap.mmap(fd, size)
                finally:
                    os.close(fd)  # the mapping keeps the file
                self._copies = {}
                self._pid = os.getpid()
                self._hearing = self._listen is None
            return self._map

    def _start_listening(self) -> None:
        # Only a process that answers from copies listens: one that only writes wallets (a
        # consumer, svcctl) has nothing to drop.
        with self._lock:
            if self._listener_pid != os.getpid():
                self._listener_pid = os.getpid()
                threading.Thread(target=self._follow_changes, name="wallet_changes", daemon=True).start()

    def row(self, tenant_id: int, read: Callable[[int], tuple]) -> tuple:
        """The wallet's row: this process's copy while it holds, else `read(tenant_id)`, kept."""
        if self.copy_seconds <= 0:
            return read(tenant_id)
        table = self._table()
        if not self._hearing:
            if self._listener_pid != os.getpid():
                self._start_listening()
            return read(tenant_id)
        (version,) = _VERSION.unpack_from(table, (tenant_id % SLOTS) * _VERSION.size)
        now = time.monotonic()
        copy = self._copies.get(tenant_id)
        if copy is not None and copy[0] == version and now - copy[1] < self.copy_seconds:
            return copy[2]
        row = read(tenant_id)
        if len(self._copies) >= COPIES_KEPT:
            self._copies = {}
        self._copies[tenant_id] = (version, now, row)
        return row

    def mark_changed(self, tenant_id: int) -> None:
        """A change to the wallet has committed: no copy on this host read before now is used again."""
        # A random value, not a count: two processes marking at once need no lock, since whichever
        # write lands last leaves a value no copy was kept under.
        _VERSION.pack_into(self._table(), (tenant_id % SLOTS) * _VERSION.size, random.getrandbits(64))

    def changed(self, tenant_id: int) -> None:
        """Mark the wallet changed on this host, then tell the others."""
        self.mark_changed(tenant_id)
        if self._announce is not None:
            self._announce(tenant_id)

    def _follow_changes(self) -> None:
        """The listening thread: hears the changes announced on CHANNEL and marks them here."""
        wait = RELISTEN_SECONDS[0]
        heard_before = False
        while not self._stopped.is_set():
            try:
                connection = self._listener_connection = self._listen()  # type: ignore[misc]
                connection.autocommit = True
                connection.cursor().execute(f"LISTEN {CHANNEL}")
                self._copies = {}  # what changed while nobody listened went unheard
                self._hearing = heard_before = True
                wait = RELISTEN_SECONDS[0]
                while not self._stopped.is_set():
                    if select.select([connection], [], [], LISTEN_WAKE_SECONDS)[0]:
                        connection.poll()
                        while connection.notifies:
                            payload = connection.notifies.pop(0).payload
                            if payload.isdigit() and payload.isascii():
                                self.mark_changed(int(payload))
                            else:  # not one of ours: forget every copy rather than guess
                                self._copies = {}
            except Exception as error:  # the database restarted or went out of reach: listen again
                if heard_before and not self._stopped.is_set():  # once an outage, not at every retry
                    log.warning("balance reads go to the database until wallet changes are heard again: %s",
                                type(error).__name__)
                heard_before = False
            finally:
                self._hearing = False
                self._close_listener()
            self._stopped.wait(wait)
            wait = min(RELISTEN_SECONDS[1], wait * 2)

    def _close_listener(self) -> None:
        connection, self._listener_connection = self._listener_connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # already broken: nothing to release
                connection.close()

    def close(self) -> None:
        self._stopped.set()
        if self._map is not None and self._pid == os.getpid():
            self._map.close()
        self._map = None


@dataclass(frozen=True)
class Changed:
    """The after-commit hook that marks a tenant's wallet changed; equal hooks run once a commit."""

    copies: WalletCopies
    tenant_id: int

    def __call__(self) -> None:
        self.copies.changed(self.tenant_id)


# The process's copies, for the database models/setup.py installed.
_installed: WalletCopies | None = None


def use(copies: WalletCopies) -> None:
    """Make `copies` the process's; the previous ones (another database's) are closed."""
    global _installed
    if _installed is not None:
        _installed.close()
    _installed = copies


def wallet_copies() -> WalletCopies:
    """The process's copies of wallet rows and the host's wallet versions."""
    if _installed is None:
        raise RuntimeError("init_db() has not been called")
    return _installed
