"""The service's health, and what the API tells an operator: a request id on every response and
log line, HTTP metrics, and the endpoints outside /api/v1 that a load balancer and Prometheus call.

- `GET /api/v1/health`: the service answers and the caller's key is good (the contract's check).
- `GET /healthz`: the process answers (no storage touched).
- `GET /readyz`: the database, the queue and Redis answer and every migration is applied; 503
  with the failing checks otherwise.
- `GET /metrics`: the Prometheus text format, every gunicorn worker counted (config/metrics.py),
  plus the state gauges read at scrape time; behind `SVC_METRICS_TOKEN` when it is set, and
  without it only on loopback (config/metrics_access.py).
"""

from __future__ import annotations

import glob
import logging
import os
import time

import falcon
import orjson
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from api import request_metrics
from api.errors import ApiError
from api.operation import Reply, ok, operation
from api.schemas import Output, Success
from config import get_settings, logs, metrics_access
from config.client_address import client_ip
from config.metrics import multiprocess_dir

log = logging.getLogger("api")

REQUEST_ID_HEADER = "X-Request-Id"
METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}


class RequestTelemetry:
    """Falcon middleware: the request id (the client's own when sane, else a new one) on the
    response and on every log line written while the request runs; counted and timed by route
    (api/request_metrics.py)."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        request_id = logs.sane_request_id(req.env.get("HTTP_X_REQUEST_ID"))
        context = req.context
        context.request_id = request_id
        context.started = time.perf_counter()
        # The tenant is known once the key is checked, later in the request: resolved per line.
        context.log_tokens = (logs.request_id.set(request_id),
                              logs.tenant_id.set(lambda: getattr(context, "tenant_id", None)))
        resp.set_header(REQUEST_ID_HEADER, request_id)

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource, req_succeeded: bool) -> None:
        context = req.context
        started = getattr(context, "started", None)
        if started is None:
            return
        method = req.method if req.method in METHODS else "OTHER"
        request_metrics.tallies.record(req.uri_template or "unmatched", method, resp.status,
                                       time.perf_counter() - started)
        # For the access log line, written by gunicorn once the response is sent.
        req.env[logs.TENANT_ENVIRON_KEY] = getattr(context, "tenant_id", None)
        request_token, tenant_token = context.log_tokens
        logs.tenant_id.reset(tenant_token)
        logs.request_id.reset(request_token)


class Health(Output):
    service: str
    version: str
    status: str


class HealthResource:
    @operation("Check the service and the key", scope="", responses={200: Success[Health]}, errors=(401,),
               tags=("health",))
    def on_get(self, req, resp) -> Reply:
        return ok({"service": "botyconnect_api", "version": "v1", "status": "ok"})


def _json(resp: falcon.Response, status: int, body: dict) -> None:
    resp.status = status
    resp.content_type = falcon.MEDIA_JSON
    resp.data = orjson.dumps(body)
    resp.cache_control = ["no-store"]


class Healthz:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        _json(resp, 200, {"status": "ok"})


def readiness() -> dict[str, str]:
    """Each dependency's state: "ok", or what is wrong (an error class, never a connection string)."""
    from jobs.queue import huey
    from models.store.counters import counters
    from models.store.db import connection, db, pending_migrations

    checks: dict[str, str] = {}
    # Twice: a pooled connection the server cut before it came back fails once, and the pool
    # then drops the others like it (models/store/db.py); the second try is the server's answer.
    for _attempt in range(2):
        try:
            with connection():
                db.execute_sql("SELECT 1")
                pending = pending_migrations()
                checks["migrations"] = "ok" if not pending else f"pending: {', '.join(pending)}"
            checks["database"] = "ok"
            break
        except Exception as error:
            checks["database"] = f"unreachable ({type(error).__name__})"
    try:
        huey.pending_count()
        checks["queue"] = "ok"
    except Exception as error:
        checks["queue"] = f"unreachable ({type(error).__name__})"
    if get_settings().redis_url:
        try:
            counters().client.ping()
            checks["redis"] = "ok"
        except Exception as error:
            checks["redis"] = f"unreachable ({type(error).__name__})"
    return checks


class Readyz:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        checks = readiness()
        ready = all(state == "ok" for state in checks.values())
        _json(resp, 200 if ready else 503, {"status": "ready" if ready else "not_ready", "checks": checks})


class _ThisProcess:
    """The default registry as one collector, for a process outside multiprocess mode."""

    def collect(self):
        return REGISTRY.collect()


class _EveryProcess(MultiProcessCollector):
    """Every process's values, from the files they share. A process that is starting creates its
    file empty and sizes it a moment later: such a file holds no value yet and is left out, where
    prometheus_client would fail reading it and the scrape would answer 500."""

    def collect(self):
        return self.merge([path for path in glob.glob(os.path.join(self._path, "*.db")) if _has_data(path)],
                          accumulate=True)


def _has_data(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:  # gone since the listing: its process has ended and its values with it
        return False


class Metrics:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        refused = metrics_access.refusal(get_settings().metrics_token, req.get_header("Authorization"),
                                         client_ip(req), metrics_access.listening())
        if refused is not None:
            raise ApiError(refused.status, refused.code, refused.message)
        from jobs.operations import StateCollector

        request_metrics.tallies.flush()  # this process's requests so far, the scrape's own included
        registry = CollectorRegistry(auto_describe=False)
        if multiprocess_dir():
            _EveryProcess(registry)
        else:
            registry.register(_ThisProcess())
        registry.register(StateCollector())
        resp.content_type = CONTENT_TYPE_LATEST
        resp.data = generate_latest(registry)


# Answered without a database connection from the pool: a stopped database must not stop them.
NO_DATABASE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
ROUTES = [("/health", HealthResource())]
ROOT_ROUTES = [("/healthz", Healthz()), ("/readyz", Readyz()), ("/metrics", Metrics())]
