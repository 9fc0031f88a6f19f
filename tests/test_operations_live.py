"""End to end, what an operator sees: the live service (gunicorn with several workers, a consumer
with its own metrics port, the simulator) runs a campaign whose events reach a webhook receiver;
both `/metrics` are scraped and parsed with prometheus_client's parser, and the counters moved by
exactly what happened. The request id of the campaign's creation is in its response, its access
log line and the log lines of the tasks it enqueued; every log line is JSON.

On SQLite (the embedded default) and PostgreSQL + Redis (the scale-out profile).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import requests

from models.events.tables import WebhookDelivery
from tests.campaigns_fixtures import make_number, sim_signup
from tests.conftest import Persona
from tests.live import ROOT, LiveService, env_for, free_port, wait_until
from tests.operations_fixtures import Samples, parse, total
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)

RECIPIENTS = 25
READS = 30


def scrape(url: str, **kwargs) -> Samples:
    response = requests.get(url, timeout=10, **kwargs)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain")
    return parse(response.text)


@pytest.fixture
def service(storage, webhook_ca, webhook_settings, immediate_queue, tmp_path):
    immediate_queue.immediate = False
    metrics_port = free_port()
    env = {**env_for(storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1], "SVC_METRICS_PORT": str(metrics_port),
           "SVC_LOG_FORMAT": "json", "SVC_METRICS_TOKEN": "scrape-token",
           "SVC_LOG_LEVEL": "debug"}  # huey's own lines about each task, which carry the request id
    live = LiveService(env, tmp_path, web_workers=3, worker_threads=8).start()
    live.consumer_metrics = f"http://127.0.0.1:{metrics_port}/metrics"
    wait_until(lambda: LiveService._answers(live.consumer_metrics), message="the consumer's metrics port")
    yield live
    live.stop()


def json_lines(text: str) -> list[dict]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines
    return [json.loads(line) for line in lines]  # every line parses, or this fails


def test_metrics_count_a_campaign_across_workers_and_the_consumer(service, storage, receiver):
    token = {"Authorization": "Bearer scrape-token"}
    assert requests.get(f"{service.api_url}/metrics", timeout=5).status_code == 401
    api_before = scrape(f"{service.api_url}/metrics", headers=token)
    assert requests.get(service.consumer_metrics, timeout=5).status_code == 401  # the same token, both places
    consumer_before = scrape(service.consumer_metrics, headers=token)

    alice = Persona("Alice Metrics", credits=1000)
    phone_id, access_token = sim_signup(service.sim_url, service.env["SVC_APP_SECRET"], 1000)
    account = make_number(alice.id, mps=1000, connection_mode="internal", phone_id=phone_id, token=access_token)
    created = requests.post(f"{service.api_url}/api/v1/webhooks/endpoints", headers=alice.headers, timeout=10,
                            json={"url": receiver.url(), "events": ["message.sent"]})
    assert created.status_code == 201, created.text
    # Enough reads that the three workers all answer some: the scrape must count them all.
    for _ in range(READS):
        assert requests.get(f"{service.api_url}/api/v1/credits/balance", headers=alice.headers,
                            timeout=10).status_code == 200
    response = requests.post(f"{service.api_url}/api/v1/campaigns", headers={**alice.headers,
                                                                             "X-Request-Id": "complaint-4711"},
                             timeout=30, json={"account_id": account.public_id, "template_name": "hello_world",
                                               "recipients": [{"wa_id": f"5215577{n:05d}7"}
                                                              for n in range(RECIPIENTS)]})
    assert response.status_code == 201, response.text
    assert response.headers["X-Request-Id"] == "complaint-4711"
    campaign_id = response.json()["data"]["id"]

    def finished() -> bool:
        data = requests.get(f"{service.api_url}/api/v1/campaigns/{campaign_id}", headers=alice.headers,
                            timeout=10).json()["data"]
        return data["status"] == "completed"

    wait_until(finished, timeout=60, interval=0.3, message="the campaign to complete")
    receiver.wait_for(RECIPIENTS, timeout=30)
    wait_until(lambda: WebhookDelivery.select().where(WebhookDelivery.status == "delivered").count() == RECIPIENTS,
               timeout=30, message="every delivery recorded")

    consumer_after = scrape(service.consumer_metrics, headers=token)

    def moved(before, after, name, **labels) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    def http_counts(after: Samples) -> tuple[float, ...]:
        return (moved(api_before, after, "svc_http_requests_total", route="/api/v1/credits/balance", method="GET",
                      status="200"),
                moved(api_before, after, "svc_http_requests_total", route="/api/v1/campaigns", method="POST",
                      status="201"),
                moved(api_before, after, "svc_http_request_duration_seconds_count", route="/api/v1/credits/balance",
                      method="GET"),
                moved(api_before, after, "svc_http_request_duration_seconds_bucket", route="/api/v1/credits/balance",
                      method="GET", le="+Inf"))

    # Every gunicorn worker counted: the reads, the creation, by route template and status. A
    # worker adds its requests to the shared files within a second (api/request_metrics.py).
    def scraped_once_counted() -> Samples | None:
        after = scrape(f"{service.api_url}/metrics", headers=token)
        return after if http_counts(after) == (READS, 1, READS, READS) else None

    api_after = wait_until(scraped_once_counted, timeout=5, interval=0.2,
                           message="every worker's requests in the API's metrics")
    # Sends = recipients; deliveries = events; the tasks that did it finished well.
    assert moved(consumer_before, consumer_after, "svc_graph_requests_total", operation="messages",
                 outcome="ok") == RECIPIENTS
    assert moved(consumer_before, consumer_after, "svc_graph_requests_total", outcome="error") == 0
    assert moved(consumer_before, consumer_after, "svc_number_sends_total", number=phone_id) == RECIPIENTS
    assert moved(consumer_before, consumer_after, "svc_webhook_deliveries_total", outcome="delivered",
                 attempt="1") == RECIPIENTS
    assert moved(consumer_before, consumer_after, "svc_webhook_delivery_duration_seconds_count",
                 outcome="delivered") == RECIPIENTS
    assert moved(consumer_before, consumer_after, "svc_tasks_total", outcome="ok") > 0
    assert moved(consumer_before, consumer_after, "svc_tasks_total", outcome="error") == 0
    # The state gauges, read at scrape time.
    assert total(api_after, "svc_state_up") == 1
    assert total(api_after, "svc_campaigns", status="completed") == 1
    assert total(api_after, "svc_credits_reserved") == 0
    assert total(api_after, "svc_processes", kind="worker", state="alive") == 1
    assert total(api_after, "svc_processes", kind="api", state="alive") == 3  # every gunicorn worker beats
    assert total(api_after, "svc_webhook_deliveries_pending") == 0
    assert total(api_after, "svc_number_send_cap", number=phone_id) == 1000
    # No label carries a recipient, an event id or a secret.
    labels = {value for samples in (api_after, consumer_after) for _name, pairs in samples for _, value in pairs}
    assert not any("5215577" in value or value.startswith("evt_") or "scrape-token" in value for value in labels)

    # The request id: in the access log line and in the log lines of the tasks the request enqueued.
    api_lines = json_lines(service.log("api"))
    access = [line for line in api_lines if line["logger"] == "gunicorn.access"
              and line["message"].startswith("POST /api/v1/campaigns")]
    assert [(line["request_id"], line["tenant_id"]) for line in access] == [("complaint-4711", alice.id)]
    worker_lines = json_lines(service.log("worker"))
    carried = [line for line in worker_lines if line["request_id"] == "complaint-4711"]
    assert carried and all(line["task"] for line in carried)
    assert {"jobs.sending.dispatch", "jobs.webhooks.fan_out_task"} <= {line["task"] for line in carried}
    assert {"time", "level", "logger", "message", "request_id", "tenant_id", "task"} <= set(worker_lines[0])


def status_json(service: LiveService) -> dict:
    result = subprocess.run([sys.executable, "-m", "svcctl.main", "status", "--json"], cwd=ROOT, env=service.env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_status_shows_the_processes_and_the_work(service, storage):
    every_one = [("worker", "alive")] + [("api", "alive")] * 3

    def processes():
        data = status_json(service)
        return data if [(item["kind"], item["state"]) for item in data["processes"]] == every_one else None

    data = wait_until(processes, timeout=30, interval=0.5, message="every process's first heartbeat")
    assert data["queue"]["pending"] >= 0 and data["outbox"]["deliveries_pending"] == 0
    # The live view, once, in a pipe: every table is there.
    shown = subprocess.run([sys.executable, "-m", "svcctl.main", "status", "--once"], cwd=ROOT, env=service.env,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    for title in ("processes", "queue", "outbox and platform webhooks", "campaigns running", "per-number pace",
                  "webhook backlog by endpoint", "credits reserved by company"):
        assert title in shown.stdout
    assert all(item["name"] in shown.stdout for item in data["processes"])
