"""Each process's heartbeat: every API worker and queue consumer writes its own row every
HEARTBEAT_SECONDS and at a clean stop, so `svcctl status` and `svc_processes` can list who is
alive, dead or stopped, and since when.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

from models.clock import isoformat
from models.operations.tables import ProcessHeartbeat
from models.store.db import connection

log = logging.getLogger("operations")

HEARTBEAT_SECONDS = 5.0
# A process that has not beaten for this long is dead (three beats missed).
DEAD_AFTER_SECONDS = 3 * HEARTBEAT_SECONDS
# A process stopped or dead for this long is forgotten: long enough to be noticed (and alerted
# on), short enough that one crash does not read as a lasting fault.
FORGET_AFTER_SECONDS = 3600


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def beat(name: str, kind: str, threads: int, periodic: bool, started: float) -> None:
    """The process is alive now (the row is written whole, so a first beat that failed, during a
    storage restart say, costs nothing)."""
    now = time.time()
    host, _, pid = name.rpartition(":")
    (ProcessHeartbeat.insert(name=name, kind=kind, host=host, pid=int(pid), threads=threads,
                             periodic=int(periodic), started=started, last_beat=now, stopped=None)
     .on_conflict(conflict_target=[ProcessHeartbeat.name],
                  update={ProcessHeartbeat.kind: kind, ProcessHeartbeat.started: started,
                          ProcessHeartbeat.last_beat: now, ProcessHeartbeat.stopped: None,
                          ProcessHeartbeat.threads: threads, ProcessHeartbeat.periodic: int(periodic)})
     .execute())


def stopped(name: str) -> None:
    ProcessHeartbeat.update(stopped=time.time()).where(ProcessHeartbeat.name == name).execute()


def forget_old_processes() -> int:
    return ProcessHeartbeat.delete().where(ProcessHeartbeat.last_beat < time.time() - FORGET_AFTER_SECONDS).execute()


@dataclass
class Process:
    name: str
    kind: str
    state: str  # alive, dead, stopped
    threads: int
    periodic: bool
    started: float
    last_beat: float
    stopped: float | None  # when it stopped cleanly

    def as_dict(self, now: float) -> dict:
        return {"name": self.name, "kind": self.kind, "state": self.state, "threads": self.threads,
                "periodic": self.periodic, "started_at": _iso(self.started), "last_beat_at": _iso(self.last_beat),
                "seconds_since_beat": round(now - self.last_beat, 1),
                "stopped_at": None if self.stopped is None else _iso(self.stopped),
                "seconds_since_stop": None if self.stopped is None else round(now - self.stopped, 1)}


def _iso(unix: float) -> str:
    return isoformat(dt.datetime.fromtimestamp(unix, dt.UTC))


def processes(now: float | None = None) -> list[Process]:
    """The processes heard from in the last FORGET_AFTER_SECONDS: consumers first, then API workers."""
    now = time.time() if now is None else now
    found = []
    recent = ProcessHeartbeat.last_beat > now - FORGET_AFTER_SECONDS
    rows = ProcessHeartbeat.select().where(recent).order_by(ProcessHeartbeat.kind.desc(), ProcessHeartbeat.started)
    for row in rows:
        if row.stopped is not None:
            state = "stopped"
        elif now - row.last_beat > DEAD_AFTER_SECONDS:
            state = "dead"
        else:
            state = "alive"
        found.append(Process(row.name, row.kind, state, row.threads, bool(row.periodic), row.started, row.last_beat,
                             row.stopped))
    return found


class Heartbeat:
    """Writes this process's heartbeat every HEARTBEAT_SECONDS from a thread of its own, so a dead
    or wedged API worker or consumer shows in `svcctl status` and `svc_processes{state="dead"}`."""

    def __init__(self, kind: str, threads: int, periodic: bool = False):
        self.name = process_name()
        self.kind = kind
        self.threads = threads
        self.periodic = periodic
        self.started = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._beat()
        try:
            with connection():
                forget_old_processes()
        except Exception as error:
            log.warning("old heartbeats not pruned: %s", str(error).strip()[:200])
        self._thread.start()
        return self

    def _beat(self) -> None:
        try:
            with connection():
                beat(self.name, self.kind, self.threads, self.periodic, self.started)
        except Exception as error:  # a storage restart: the next beat tries again
            log.warning("heartbeat not written: %s", str(error).strip()[:200])

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            self._beat()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            with connection():
                stopped(self.name)
        except Exception as error:
            log.warning("clean stop not recorded: %s", str(error).strip()[:200])
