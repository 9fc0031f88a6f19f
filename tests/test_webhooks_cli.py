"""svcctl webhooks: the delivery log, replays, test pings, endpoints and the sweep."""

from __future__ import annotations

import json

import orjson
from typer.testing import CliRunner

from jobs import webhooks as jobs
from models.events import outbox, webhooks
from models.events.tables import WebhookDelivery
from models.store.db import atomic
from svcctl.main import app
from svcctl.webhooks import parse_since
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)
from tests.webhooks_fixtures import Reply, verify

runner = CliRunner()


def run(*args: str, ok: bool = True):
    result = runner.invoke(app, ["webhooks", *args])
    if ok:
        assert result.exit_code == 0, result.stderr or result.stdout
    return result


def run_json(*args: str):
    return json.loads(run(*args, "--json").stdout)


def emit(tenant_id: int, name: str, count: int = 1):
    with atomic():
        emitted = [outbox.emit(tenant_id, name, {"n": index}) for index in range(count)]
    jobs.notify_new_events()
    return emitted


def test_the_delivery_log_filters_by_status_event_and_endpoint(alice, charlie, make_receiver):
    good = make_receiver()
    bad = make_receiver(respond=lambda request: Reply(500, body=b"database down"))
    ok_endpoint, _ = webhooks.create_endpoint(alice.id, good.url(), ["message.sent", "message.read"])
    bad_endpoint, _ = webhooks.create_endpoint(alice.id, bad.url(), ["message.sent"])
    webhooks.create_endpoint(charlie.id, good.url(path="/charlie"), ["message.sent"])
    emit(alice.id, "message.sent", 2)
    emit(alice.id, "message.read")
    emit(charlie.id, "message.sent")
    tenant = alice.tenant.public_id

    everything = run_json("deliveries", "--tenant", tenant)
    assert len(everything) == 5
    assert everything[0]["id"] > everything[-1]["id"]
    failed = run_json("deliveries", "--tenant", tenant, "--status", "failed")
    assert {(d["endpoint_id"], d["attempts"], d["last_status_code"]) for d in failed} == {
        (bad_endpoint.public_id, 1, 500)}
    assert len(failed) == 2 and failed[0]["next_attempt_at"]
    read = run_json("deliveries", "--tenant", tenant, "--event", "message.read")
    assert [(d["event"], d["status"], d["endpoint_id"]) for d in read] == [
        ("message.read", "delivered", ok_endpoint.public_id)]
    by_endpoint = run_json("deliveries", "--tenant", tenant, "--endpoint", ok_endpoint.public_id,
                           "--status", "delivered")
    assert len(by_endpoint) == 3
    assert run_json("deliveries", "--tenant", tenant, "--status", "exhausted") == []
    assert len(run_json("deliveries", "--tenant", tenant, "--since", "1h")) == 5
    assert run_json("deliveries", "--tenant", tenant, "--until", "1h") == []
    assert run_json("deliveries", "--tenant", tenant, "--since", "2999-01-01T00:00:00Z") == []

    attempts = run_json("attempts", str(failed[0]["id"]))
    assert [(a["number"], a["outcome"], a["status_code"], a["response_excerpt"]) for a in attempts] == [
        (1, "failed", 500, "database down")]
    table = run("deliveries", "--tenant", tenant).stdout
    assert "failed" in table and "delivered" in table


def test_bad_filters_fail_with_one_line(alice):
    result = run("deliveries", "--tenant", alice.tenant.public_id, "--status", "lost", ok=False)
    assert result.exit_code == 1 and "unknown delivery status" in result.stderr
    result = run("deliveries", "--tenant", alice.tenant.public_id, "--until", "last week", ok=False)
    assert result.exit_code == 1 and "--until: expected an ISO 8601 date-time" in result.stderr
    assert run("deliveries", "--tenant", "ten_nobody", ok=False).exit_code == 1
    assert "no delivery" in run("attempts", "999999", ok=False).stderr


def test_replay_an_event_by_id(alice, make_receiver):
    server = make_receiver()
    _endpoint, secret = webhooks.create_endpoint(alice.id, server.url(), ["message.sent"])
    [event] = emit(alice.id, "message.sent")
    server.wait_for(1)
    result = run_json("replay", event.public_id)
    assert result == {"event_id": event.public_id, "deliveries": 1, "endpoints": 1}
    first, second = server.wait_for(2)
    assert first.body == second.body
    assert second.headers["X-Service-Event-Id"] == event.public_id and verify(second, secret)
    assert "no event" in run("replay", "evt_unknown", ok=False).stderr


def test_replay_since_a_time(alice, charlie, make_receiver):
    server = make_receiver()
    webhooks.create_endpoint(alice.id, server.url(), ["message.sent"])
    webhooks.create_endpoint(charlie.id, server.url(path="/charlie"), ["message.sent"])
    emit(alice.id, "message.sent", 3)
    emit(charlie.id, "message.sent")
    server.wait_for(4)
    result = run_json("replay", "--since", "1h", "--tenant", alice.tenant.public_id)
    assert result["deliveries"] == 3
    assert len(server.wait_for(7)) == 7
    assert sum(1 for request in server.requests if request.path == "/charlie") == 1
    assert run_json("replay", "--since", "2999-01-01T00:00:00Z")["deliveries"] == 0


def test_replay_needs_an_event_or_a_time(alice):
    assert "either an EVENT_ID or --since" in run("replay", ok=False).stderr
    assert "either" in run("replay", "evt_x", "--since", "1h", ok=False).stderr
    assert "--since" in run("replay", "--since", "yesterday", ok=False).stderr


def test_parse_since_reads_durations_and_dates():
    import datetime as dt

    now = dt.datetime(2025, 5, 1, 12, 0, 0)
    assert parse_since("90s", now) == now - dt.timedelta(seconds=90)
    assert parse_since("15m", now) == now - dt.timedelta(minutes=15)
    assert parse_since("3d", now) == now - dt.timedelta(days=3)
    assert parse_since("2025-05-01T07:00:00-05:00") == now
    assert parse_since("2025-05-01 12:00") == now


def test_the_test_ping_prints_the_outcome(alice, make_receiver):
    server = make_receiver(respond=lambda request: Reply(200, body=b"pong"))
    endpoint, secret = webhooks.create_endpoint(alice.id, server.url(), ["message.sent"])
    result = run_json("test", endpoint.public_id)
    assert (result["delivered"], result["status_code"], result["response_excerpt"]) == (True, 200, "pong")
    [request] = server.requests
    assert verify(request, secret) and request.headers["X-Service-Event-Id"] == result["event_id"]
    assert orjson.loads(request.body)["event"] == "webhook.ping"
    assert WebhookDelivery.select().count() == 0


def test_a_failed_test_ping_exits_non_zero(alice, make_receiver):
    server = make_receiver(respond=lambda request: Reply(401, body=b"bad signature"))
    endpoint, _ = webhooks.create_endpoint(alice.id, server.url(), ["message.sent"])
    result = run("test", endpoint.public_id, ok=False)
    assert result.exit_code == 1
    assert "HTTP 401" in result.stderr and "401" in result.stdout
    assert "no webhook endpoint" in run("test", "whend_missing", ok=False).stderr


def test_endpoints_lists_the_payment_endpoint_without_secrets(alice, webhook_settings):
    endpoint, secret = webhooks.create_endpoint(alice.id, "https://hooks.example.com/a", ["message.sent"])
    payment, payment_secret = webhooks.set_payment_endpoint(alice.id, "https://erp.example.com/payments")
    result = run("endpoints", "--tenant", alice.tenant.public_id, "--json")
    listed = json.loads(result.stdout)
    assert [(e["id"], e["kind"]) for e in listed] == [(payment.public_id, "payment"), (endpoint.public_id, "api")]
    assert secret not in result.stdout and payment_secret not in result.stdout


def test_the_sweep_fans_out_and_queues_drains(alice, receiver):
    webhooks.create_endpoint(alice.id, receiver.url(), ["message.sent"])
    # Their fan-out nudge was lost: the sweep is what picks them up.
    with outbox.listening([]), atomic():
        for index in range(4):
            outbox.emit(alice.id, "message.sent", {"n": index})
    assert run_json("sweep") == {"events_fanned_out": 4, "drains_queued": 0}
    assert len(receiver.wait_for(4)) == 4
