"""prometheus_client's multiprocess mode, for the API's gunicorn workers.

Each worker writes its counters to files in one directory, which any worker reads whole to answer
a scrape, so every worker counts. The directory must be named before prometheus_client is first
imported in a worker, and start empty: gunicorn's master prepares it (api/gunicorn_settings.py) and
the forked workers inherit it. A consumer is one process and keeps its metrics in memory.
"""

from __future__ import annotations

import os
import shutil
import tempfile

VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    return os.environ.get(VARIABLE) or None


def prepare_multiprocess_dir() -> str:
    """A fresh, empty directory for this server's workers, named in the environment they inherit."""
    path = tempfile.mkdtemp(prefix="svc-metrics-")
    os.environ[VARIABLE] = path
    return path


def remove_multiprocess_dir() -> None:
    if path := multiprocess_dir():
        shutil.rmtree(path, ignore_errors=True)


def forget_process(pid: int) -> None:
    """A worker is gone: its live gauges no longer count (its counters still do)."""
    if multiprocess_dir():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
