"""What the queue side tells an operator: task outcomes and durations (huey's signals), webhook
deliveries, the consumer's metrics port, and the scrape-time state collector.

Labels are bounded by construction: task names, outcomes, status classes, endpoint-free error
classes. No recipient, event id, URL or secret is ever a label value.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from http import HTTPStatus
from wsgiref.simple_server import WSGIRequestHandler, make_server

import orjson
from huey import signals
from prometheus_client import Counter, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer

from config import metrics_access
from jobs.queue import huey, task_name
from models.operations import heartbeats
from models.operations import state as service_state
from models.operations.tables import API, WORKER
from models.store.db import connection, storage_unavailable

log = logging.getLogger("operations")

TASK_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
TASKS = Counter("svc_tasks_total", "Queue tasks finished, by task and outcome", ["task", "outcome"])
TASK_SECONDS = Histogram("svc_task_duration_seconds", "Time a queue task ran", ["task"], buckets=TASK_BUCKETS)
WEBHOOK_DELIVERIES = Counter("svc_webhook_deliveries_total",
                             "Webhook delivery attempts, by outcome and attempt number (1, 2, 3, 4+)",
                             ["outcome", "attempt"])
WEBHOOK_SECONDS = Histogram("svc_webhook_delivery_duration_seconds", "Time a webhook delivery attempt took",
                            ["outcome"], buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))

# Huey's signals name what became of a run; "executing" starts the clock.
_OUTCOMES = {signals.SIGNAL_COMPLETE: "ok", signals.SIGNAL_ERROR: "error", signals.SIGNAL_RETRYING: "retrying",
             signals.SIGNAL_CANCELED: "canceled", signals.SIGNAL_REVOKED: "revoked",
             signals.SIGNAL_EXPIRED: "expired", signals.SIGNAL_LOCKED: "locked",
             signals.SIGNAL_TIMEOUT: "timeout", signals.SIGNAL_INTERRUPTED: "interrupted",
             signals.SIGNAL_RATE_LIMITED: "rate_limited"}
_started: dict[str, float] = {}


@huey.signal(signals.SIGNAL_EXECUTING)
def _task_started(signal, task, *args, **kwargs) -> None:
    _started[task.id] = time.perf_counter()


@huey.signal(*_OUTCOMES)
def _task_finished(signal, task, *args, **kwargs) -> None:
    started = _started.pop(task.id, None)
    name = task_name(task)
    TASKS.labels(name, _OUTCOMES[signal]).inc()
    if started is not None and signal != signals.SIGNAL_RETRYING:
        TASK_SECONDS.labels(name).observe(time.perf_counter() - started)


# The labelled series of each (outcome, attempt label), looked up once: `labels()` validates and
# locks on every call, which cost a delivery as much as counting it.
_webhook_series: dict[tuple[str, str], tuple] = {}


def observe_webhook_delivery(ok: bool, status_code: int | None, unreachable: bool, latency_ms: int | None,
                             attempt: int) -> None:
    if ok:
        outcome = "delivered"
    elif unreachable or status_code is None:
        outcome = "unreachable"
    else:
        outcome = f"http_{status_code // 100}xx"
    key = (outcome, str(attempt) if attempt < 4 else "4+")
    series = _webhook_series.get(key)
    if series is None:
        # Two threads may both get here: labels() hands both the same series.
        series = _webhook_series[key] = (WEBHOOK_DELIVERIES.labels(*key), WEBHOOK_SECONDS.labels(outcome))
    series[0].inc()
    if latency_ms is not None:
        series[1].observe(latency_ms / 1000)


# --- the state collector: counted when scraped ----------------------------------------------


def _gauge(name: str, documentation: str, value: float | None = None, labels: list[str] | None = None,
           samples: dict | None = None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, value=value, labels=labels)
    for key, sample in (samples or {}).items():
        family.add_metric(list(key) if isinstance(key, tuple) else [key], sample)
    return family


class StateCollector:
    """Gauges read from the database and the queue at scrape time (prometheus_client custom
    collector). A store that cannot be read makes `svc_state_up` 0 and the rest absent."""

    def describe(self):
        return []

    def collect(self):
        try:
            with connection():
                families = list(self._families())
        except Exception as error:
            if not storage_unavailable(error):
                log.exception("reading the service's state for metrics failed")
            yield _gauge("svc_state_up", "1 when the state gauges could be read", 0)
            return
        yield _gauge("svc_state_up", "1 when the state gauges could be read", 1)
        yield from families

    @staticmethod
    def _families():
        yield _gauge("svc_queue_depth", "Tasks waiting in the queue", huey.pending_count())
        yield _gauge("svc_queue_scheduled", "Tasks scheduled for later (retries, delays)", huey.scheduled_count())
        states = {(kind, state): 0 for kind in (API, WORKER)
                  for state in ("alive", "dead", "stopped")}
        for process in heartbeats.processes():
            states[(process.kind, process.state)] += 1
        yield _gauge("svc_processes", "API workers and queue consumers (worker) by heartbeat state "
                     "(dead: none for 15 s)", labels=["kind", "state"], samples=states)
        yield _gauge("svc_campaigns", "Campaigns by status", labels=["status"],
                     samples=service_state.campaigns_by_status())
        yield _gauge("svc_campaign_recipients", "Recipients of running campaigns, by status", labels=["status"],
                     samples=service_state.active_recipients_by_status())
        yield _gauge("svc_messages_in_flight", "Single messages not handed to the platform yet (waiting, sending)",
                     labels=["state"], samples=service_state.messages_in_flight())
        reserved = service_state.credits_reserved_by_tenant()
        yield _gauge("svc_credits_reserved", "Credits reserved by campaigns and messages in flight",
                     sum(reserved.values()))
        outbox = service_state.outbox()
        yield _gauge("svc_outbox_events_pending", "Events not fanned out to webhook endpoints yet",
                     outbox["events_pending"])
        yield _gauge("svc_outbox_oldest_event_age_seconds", "Age of the oldest event not fanned out",
                     outbox["oldest_event_age_seconds"])
        yield _gauge("svc_webhook_deliveries_pending", "Webhook deliveries not delivered yet (pending or retrying)",
                     outbox["deliveries_pending"])
        yield _gauge("svc_webhook_oldest_undelivered_age_seconds", "Age of the oldest undelivered webhook delivery",
                     outbox["oldest_delivery_age_seconds"])
        yield _gauge("svc_number_send_cap", "A connected number's send cap, messages per second, by its phone "
                     "number id (compare with rate(svc_number_sends_total))", labels=["number"],
                     samples=service_state.number_caps())
        platform = service_state.platform_webhooks()
        yield _gauge("svc_platform_batches_pending", "Platform webhook batches received and not processed yet "
                     "(parked ones apart)",
                     platform["batches_pending"])
        yield _gauge("svc_platform_oldest_batch_age_seconds", "Age of the oldest unprocessed platform batch "
                     "(parked ones apart)",
                     platform["oldest_batch_age_seconds"])
        yield _gauge("svc_platform_batches_parked", "Platform webhook batches parked after using their attempts "
                     "(svcctl inbox parked)", platform["batches_parked"])
        yield _gauge("svc_debts", "Receivable debts by status", labels=["status"],
                     samples=service_state.debts_by_status())


# --- the consumer's metrics port ----------------------------------------------------------


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:
        pass  # a line per scrape would drown the consumer's log


def _guarded(app, token: str, hosts: tuple[str, ...]):
    """The metrics app behind config/metrics_access.py's rule, refusals in the error envelope."""

    def guarded(environ: dict, start_response):
        refused = metrics_access.refusal(token, environ.get("HTTP_AUTHORIZATION"), environ.get("REMOTE_ADDR", ""),
                                         hosts)
        if refused is None:
            return app(environ, start_response)
        start_response(f"{refused.status} {HTTPStatus(refused.status).phrase}",
                       [("Content-Type", "application/json")])
        return [orjson.dumps({"success": False,
                              "error": {"message": refused.message, "code": refused.code, "details": {}}})]

    return guarded


def serve_metrics(host: str, port: int, token: str) -> ThreadingWSGIServer:
    """This consumer's own metrics: its tasks, sends and deliveries, served the way the API's are
    (`token`: SVC_METRICS_TOKEN). (The state gauges come from the API's /metrics: read once per API
    node rather than once per process.)"""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("MetricsServer", (ThreadingWSGIServer,), {"address_family": family})
    server = make_server(host, port, None, server_class=server_class, handler_class=_Quiet)
    hosts = (metrics_access.host_of(server.socket.getsockname()),)
    server.set_app(_guarded(make_wsgi_app(), token, hosts))
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    level, line = metrics_access.startup_line(f"metrics on http://{host}:{port}/metrics", token, hosts)
    log.log(level, line)
    return server
