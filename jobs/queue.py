"""The task queue: SqliteHuey under the data dir by default, Redis when configured.

This module is the only place that knows which queue backend is in use. Tasks are declared with
`task` / `periodic_task`, which give each run its own database connection.
"""

from __future__ import annotations

import functools

from huey import RedisHuey, SqliteHuey, crontab  # noqa: F401  (crontab re-exported for tasks)

from config import Settings, get_settings
from config.settings import private_data_file
from models.db import connection


def build_huey(settings: Settings):
    if settings.redis_url:
        return RedisHuey(settings.queue_name, url=settings.redis_url, utc=True)
    private_data_file(settings.queue_path)
    # Its own file: SqliteHuey dequeues under BEGIN EXCLUSIVE, which must never block the app's writes.
    return SqliteHuey(settings.queue_name, filename=str(settings.queue_path), timeout=15, utc=True)


huey = build_huey(get_settings())


def _with_connection(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with connection():
            return fn(*args, **kwargs)

    return run


def task(**options):
    """A background task holding one database connection per run."""

    def decorate(fn):
        return huey.task(**options)(_with_connection(fn))

    return decorate


def periodic_task(schedule, **options):
    def decorate(fn):
        return huey.periodic_task(schedule, **options)(_with_connection(fn))

    return decorate


def load_tasks() -> None:
    """Import every module that declares tasks, so the consumer knows them all."""
    import importlib
    import pkgutil

    import jobs

    for module in pkgutil.iter_modules(jobs.__path__):
        if module.name != "queue":
            importlib.import_module(f"jobs.{module.name}")
