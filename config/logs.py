"""Log lines for every process: human-readable by default, one JSON object a line with
`SVC_LOG_FORMAT=json`, each carrying the request id, tenant and task it was written under.

The ids travel in context variables: the API sets them for the request it runs
(api/operations.py), the queue for the task it runs (jobs/queue.py); a task enqueued while a
request runs carries the request's id on.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import logging
import random
import re
import sys
from collections.abc import Iterator

import orjson

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
# A value, or a function giving it when a line is written (the API learns the tenant mid-request).
tenant_id: contextvars.ContextVar = contextvars.ContextVar("tenant_id", default=None)
task_name: contextvars.ContextVar[str | None] = contextvars.ContextVar("task_name", default=None)

# A URL may carry a credential: the portal's invitation links and the debtor's page (`/d/…`, and
# a reminder's `/pay/dl_…`) have their token in the path, and the platform's verification request
# its verify token in the query. A logged path has the token replaced and no query, so a line
# still matches its request without holding the secret (the access log, errors of a request).
_SECRET_IN_PATH = re.compile(r"(/portal/invitations/|/d/|/pay/(?=dl_))[^/?#]+")


def loggable_path(path: str) -> str:
    return _SECRET_IN_PATH.sub(r"\1…", path.split("?", 1)[0])


# A client's own id is kept when it is short and plain enough to sit safely in a log line and a
# label-free header; anything else is replaced (and never echoed).
_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")
# Where the API leaves the request's tenant in the WSGI environ for gunicorn's access log line.
TENANT_ENVIRON_KEY = "svc.tenant_id"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s"


def new_request_id() -> str:
    # An id names a request, it guards nothing: the module's generator (reseeded in each forked
    # worker) is unique enough and spares a system call per request.
    return f"req_{random.getrandbits(96):024x}"


def sane_request_id(offered: str | None) -> str:
    """The client's X-Request-Id when it is sane, else a new one."""
    if offered and _SANE_REQUEST_ID.match(offered):
        return offered
    return new_request_id()


@contextlib.contextmanager
def bound(request: str | None = None, tenant: str | None = None, task: str | None = None) -> Iterator[None]:
    """Log lines written in this block carry these ids (None leaves one as it was)."""
    tokens = []
    for variable, value in ((request_id, request), (tenant_id, tenant), (task_name, task)):
        if value is not None:
            tokens.append((variable, variable.set(value)))
    try:
        yield
    finally:
        for variable, token in reversed(tokens):
            variable.reset(token)


class ContextFilter(logging.Filter):
    """Stamps each record with the ids of the context it was written in (unless given)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, variable in (("request_id", request_id), ("tenant_id", tenant_id), ("task", task_name)):
            if getattr(record, name, None) is None:
                value = variable.get()
                setattr(record, name, value() if callable(value) else value)
        parts = [f"{name}={getattr(record, name)}" for name in ("request_id", "tenant_id", "task")
                 if getattr(record, name)]
        record.context = f" [{' '.join(parts)}]" if parts else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the context ids, and any error."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
            "tenant_id": getattr(record, "tenant_id", None),
            "task": getattr(record, "task", None),
            "pid": record.process,
        }
        http = getattr(record, "http", None)
        if http:
            line["http"] = http
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


# Loggers whose DEBUG lines would carry secrets: every SQL statement with its parameters (a stored
# response holding a new key, say), every URL with its query (an OAuth code exchange's client
# secret). They stay at INFO whatever the level asked for.
_NEVER_DEBUG = ("peewee", "urllib3")


def configure_logging(log_format: str, level: str = "info") -> None:
    """Send every logger's lines at `level` and above (a name of config.settings.LOG_LEVELS) to
    stderr in the chosen format, with the context ids."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in _NEVER_DEBUG:
        logging.getLogger(name).setLevel(max(root.level, logging.INFO))
    # Python's warnings too, so that no line of the process escapes the format.
    logging.captureWarnings(True)
