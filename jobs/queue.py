"""The task queue: SqliteHuey under the data dir by default, Redis when configured.

This module is the only place that knows which queue backend is in use. Tasks are declared with
`task` / `periodic_task`, which give each run its own database connection. A task enqueued while
a request runs carries the request's id into its log lines (config/logs.py).
"""

from __future__ import annotations

import functools
import logging

from huey import RedisHuey, SqliteHuey, crontab  # noqa: F401  (crontab re-exported for tasks)
from huey.api import Task
from huey.storage import SqliteStorage

from config import Settings, get_settings, logs
from config.settings import private_data_file
from models.store.db import connection

# The id of the request (or task) that enqueued a task travels in its kwargs under this name;
# the task's wrapper takes it out before the function sees its arguments.
REQUEST_ID_KWARG = "_request_id"


class _CarriesRequestIds:
    """A task enqueued while a request (or another task) runs carries its id, at every enqueue site
    at once; the id is bound while the task executes, so huey's own lines about it carry it too."""

    def enqueue(self, task):
        request_id = logs.request_id.get()
        if request_id and isinstance(task, Task) and REQUEST_ID_KWARG not in (task.kwargs or {}):
            task.kwargs = {**(task.kwargs or {}), REQUEST_ID_KWARG: request_id}
        return super().enqueue(task)

    def execute(self, task, timestamp=None):
        with logs.bound(request=(task.kwargs or {}).get(REQUEST_ID_KWARG), task=task_name(task)):
            return super().execute(task, timestamp)


def task_name(task: Task) -> str:
    """The task's full name, as the consumer lists it: jobs.campaigns.dispatch."""
    return f"{type(task).__module__}.{task.name}"


class _QueueFile(SqliteStorage):
    """Huey clears a task's revoke flag after every run, under the file's exclusive lock even when
    there is none to clear. Nothing revokes tasks here: a read finds that out, and the write lock
    (which enqueues from the API wait for) is taken only when there is a flag."""

    def delete_data(self, key):
        return self.has_data_for_key(key) and super().delete_data(key)


class ServiceSqliteHuey(_CarriesRequestIds, SqliteHuey):
    storage_class = _QueueFile


class ServiceRedisHuey(_CarriesRequestIds, RedisHuey):
    pass


# An idle worker thread waits in a blocking read of the Redis queue, which answers the moment a
# task is queued: the timeout only sets how often an idle thread wakes to ask again. At huey's
# 1 s, a consumer's 16 threads made 16 round trips a second with nothing to do, a third of its CPU
# at rest. A graceful stop (SIGINT) waits up to this long for the reads to end; SIGTERM does not.
REDIS_READ_TIMEOUT = 5


def build_huey(settings: Settings):
    # No task's return value is ever read: stored, each would be one more write and a row kept for
    # ever (a single message's `mark_read` returns one).
    if settings.redis_url:
        return ServiceRedisHuey(settings.queue_name, url=settings.redis_url, results=False, utc=True,
                                read_timeout=REDIS_READ_TIMEOUT)
    private_data_file(settings.queue_path)
    # Its own file: SqliteHuey dequeues under BEGIN EXCLUSIVE, which must never block the app's writes.
    return ServiceSqliteHuey(settings.queue_name, filename=str(settings.queue_path), timeout=15, results=False,
                             utc=True)


huey = build_huey(get_settings())


# huey's lines about every task it schedules and runs, by their templates: the periodic tasks alone
# write a dozen a minute with nothing happening, burying the requests and what went wrong. They are
# DEBUG lines (SVC_LOG_LEVEL=debug shows them); a failure, a retry, an expiry or a timeout keeps its
# level, and the consumer's first lines (started, periodic tasks on or off) stay.
_ROUTINE_LINES = ("Executing %s", "%s executed in %0.3fs", "Enqueueing periodic task %s.",
                  "Added task %s to schedule, eta %s", "Scheduler runs every %s second(s).",
                  "The following commands are available:")


class _RoutineAtDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not str(record.msg).startswith(_ROUTINE_LINES):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


# The loggers those lines are written to: the queue's, the consumer's and its scheduler's (a filter
# sees only its own logger's lines, not its children's).
for _name in ("huey", "huey.consumer", "huey.consumer.Scheduler"):
    logging.getLogger(_name).addFilter(_RoutineAtDebug())


def _with_connection(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        kwargs.pop(REQUEST_ID_KWARG, None)  # bound by the queue's execute, not an argument of fn
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
