"""Gunicorn settings for the API (`gunicorn -c api/gunicorn_settings.py api.wsgi:app`).

The app is built by each worker, never by the master (no preload), so no database connection
is ever shared across a fork. The master only imports the app's modules, once, once it listens and
before it forks (`when_ready`).
"""

import os

from config import metrics, metrics_access
from config.access_log import TEXT_ACCESS_FORMAT
from config.settings import get_settings

_settings = get_settings()

bind = os.environ.get("SVC_BIND", "127.0.0.1:8080")
workers = _settings.web_concurrency
# Each request is read whole by the worker's main loop before a thread runs it, so clients that
# send slowly hold a buffer, never a thread (config/http_worker.py).
worker_class = "config.http_worker.BufferingThreadWorker"
threads = _settings.web_threads
preload_app = False
keepalive = 5
timeout = 30
graceful_timeout = 20
# Big enough for a 5000-recipient campaign body, which is what the 8 MiB cap is for.
limit_request_line = 8190
accesslog = "-" if _settings.access_log else None
access_log_format = TEXT_ACCESS_FORMAT
logger_class = "config.access_log.ServiceLogger"
errorlog = "-"
loglevel = "info"


def on_starting(server):
    # Before anything imports prometheus_client (config/metrics.py).
    metrics.prepare_multiprocess_dir()


def when_ready(server):
    level, line = metrics_access.startup_line("/metrics", _settings.metrics_token,
                                              [metrics_access.host_of(listener.getsockname())
                                               for listener in server.LISTENERS])
    server.log.log(level, line)
    # The app's modules, imported here once, are inherited by every worker: a worker (at start, and
    # each one gunicorn starts again) then only builds the app, instead of spending a second of CPU
    # importing them. Importing connects to nothing and starts no thread; `api.wsgi` builds the app
    # in the worker, after the fork. Here, not in `on_starting`: the sockets are already listening,
    # so a client that connects meanwhile waits for a worker rather than being refused.
    from api.app import load_modules

    load_modules()


def post_fork(server, worker):
    # What this worker is bound to, every --bind included, decides who may read /metrics.
    metrics_access.listening_on(listener.getsockname() for listener in worker.sockets)


def child_exit(server, worker):
    metrics.forget_process(worker.pid)


def on_exit(server):
    metrics.remove_multiprocess_dir()
