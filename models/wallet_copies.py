"""Each process's copies of the wallets it has read, and the shared-memory versions that say
whether a copy still holds.

The balance read is the API's most frequent call, and its one database read cost a worker more
than the rest of the request (a round trip on PostgreSQL; on SQLite three hand-offs of the
interpreter's lock inside the driver). So a process keeps the wallet row it read, and answers
from it while the wallet has not changed since:

1. Every wallet has a version: an 8-byte slot in a table in shared memory beside the data
   (`wallet-versions` in the data directory), the tenant id modulo SLOTS. Tenants that share a
   slot only cost each other a read.
2. Every committed change to a wallet writes a new random value into its slot, after the commit
   (`changed`, as an after-commit hook, in models/credits.py).
3. A process reads the slot *before* it reads the row, and keeps the row under that version.
   A change committed and marked before the slot was read is in the row; one marked after it
   leaves the slot holding another value, so the copy is never used again. A change committed
   but not yet marked is concurrent with the read: its writer has not answered anyone yet.
4. A copy is used for at most COPY_SECONDS whatever the slot says, which bounds what a change
   that was never marked can cost: a process killed between its commit and its mark, a change
   made on another host that shares the PostgreSQL database but not this table (README,
   "Scaling out"), or SQL run by hand.

Every process of one host that writes wallets (API workers, consumers, `svcctl`) marks the same
table when they share the data directory, as the service's own processes do.
"""

from __future__ import annotations

import mmap
import os
import random
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SLOTS = 65536
COPY_SECONDS = 1.0
COPIES_KEPT = 10_000  # tenants whose copies a process keeps before it starts afresh
_VERSION = struct.Struct("<Q")


class WalletCopies:
    """The wallet versions of one data directory, and this process's copies under them."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._map: mmap.mmap | None = None
        # tenant id -> (the slot's version before the read, monotonic time of the read, the row)
        self._copies: dict[int, tuple[int, float, tuple]] = {}

    def _table(self) -> mmap.mmap:
        table = self._map
        if table is not None and self._pid == os.getpid():
            return table
        with self._lock:
            # Mapped per process: the copies a parent made before a fork are not the child's either.
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
            return self._map

    def row(self, tenant_id: int, read: Callable[[int], tuple]) -> tuple:
        """The wallet's row: this process's copy while it holds, else `read(tenant_id)`, kept."""
        offset = (tenant_id % SLOTS) * _VERSION.size
        (version,) = _VERSION.unpack_from(self._table(), offset)
        now = time.monotonic()
        copy = self._copies.get(tenant_id)
        if copy is not None and copy[0] == version and now - copy[1] < COPY_SECONDS:
            return copy[2]
        row = read(tenant_id)
        if len(self._copies) >= COPIES_KEPT:
            self._copies = {}
        self._copies[tenant_id] = (version, now, row)
        return row

    def mark_changed(self, tenant_id: int) -> None:
        """A change to the wallet has committed: no copy read before now is used again."""
        # A random value, not a count: two processes marking at once need no lock, since whichever
        # write lands last leaves a value no copy was kept under.
        _VERSION.pack_into(self._table(), (tenant_id % SLOTS) * _VERSION.size, random.getrandbits(64))

    def close(self) -> None:
        if self._map is not None and self._pid == os.getpid():
            self._map.close()
        self._map = None


@dataclass(frozen=True)
class Changed:
    """The after-commit hook that marks a tenant's wallet changed; equal hooks run once a commit."""

    copies: WalletCopies
    tenant_id: int

    def __call__(self) -> None:
        self.copies.mark_changed(self.tenant_id)
