"""Signed deliveries to real HTTPS receivers on loopback: signatures, retries, deactivation, the
SSRF guard at delivery, TLS verification on the hostname, replays, the delivery log.

Retries are driven by calling the drain with a clock (`models.events.delivery.drain.drain(..., clock=...)`):
the schedule is computed from that clock, so no test waits for real minutes. The queue runs a
task as it is queued: `emit` returns once its deliveries are fanned out, POSTed and recorded, so
what did not arrive by then never will, and a test asserts it at once.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time

import orjson
import pytest

from jobs import webhooks as jobs
from jobs.queue import huey
from models.clock import utcnow
from models.errors import Invalid
from models.events import outbox, webhooks
from models.events.delivery.client import ENDPOINT_CONCURRENCY
from models.events.delivery.drain import drain
from models.events.delivery.ping import send_test
from models.events.delivery.senders import UNREACHABLE_THRESHOLD
from models.events.tables import (
    ALL_EVENTS,
    CORE_EVENTS,
    PAYMENT_EVENT,
    Event,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from models.store.db import atomic, connection
from tests.statements import ID_LIST, looked_up_by_index, statements_run
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)
from tests.webhooks_fixtures import Received, Reply, configure, set_allow_private, verify

SAMPLES = {
    "account.connected": {"account": {"id": "wacc_1", "label": "Sales", "external_reference": None,
                                      "phone_number": "+573001112233", "connection_mode": "coexistence",
                                      "status": "active"}},
    "account.paused": {"account": {"id": "wacc_1", "label": "Sales", "external_reference": None,
                                   "phone_number": "+573001112233", "status": "paused"},
                       "reason": "platform_blocked: (#368) Temporarily blocked for policy violations"},
    "campaign.created": {"account_id": "wacc_1", "campaign_id": "cmp_1", "external_reference": "promo-7",
                         "status": "queued", "total_recipients": 3, "timestamp": "2025-01-01T10:00:00Z"},
    "campaign.completed": {"account_id": "wacc_1", "campaign_id": "cmp_1", "external_reference": None,
                           "status": "completed", "total_recipients": 3, "timestamp": "2025-01-01T10:05:00Z"},
    "message.sent": {"account_id": "wacc_1", "campaign_id": "cmp_1", "recipient": "573001112233",
                     "external_contact_id": "c-1", "wam_id": "wamid.A", "status": "sent",
                     "timestamp": "2025-01-01T10:00:01Z"},
    "message.delivered": {"account_id": "wacc_1", "campaign_id": None, "recipient": "573001112233",
                          "external_contact_id": None, "wam_id": "wamid.A", "status": "delivered",
                          "timestamp": "2025-01-01T10:00:02Z"},
    "message.read": {"account_id": "wacc_1", "campaign_id": None, "recipient": "573001112233",
                     "external_contact_id": None, "wam_id": "wamid.A", "status": "read",
                     "timestamp": "2025-01-01T10:00:03Z"},
    "message.failed": {"account_id": "wacc_1", "campaign_id": "cmp_1", "recipient": "573001110000",
                       "external_contact_id": None, "wam_id": None, "status": "failed",
                       "timestamp": "2025-01-01T10:00:04Z",
                       "error": {"code": "131026", "message": "Message undeliverable"}},
    "message.inbound.created": {"account_id": "wacc_1", "from": "573001112233", "type": "text",
                                "body": "Hola, ¿cuánto debo? \u2713 \"quoted\" \\ slash", "wam_id": "wamid.B",
                                "timestamp": "2025-01-01T10:01:00Z"},
    "message.echo.created": {"account_id": "wacc_1", "direction": "outgoing_from_business_app",
                             "to": "573001112233", "type": "text", "body": "Ya te respondo",
                             "wam_id": "wamid.C", "timestamp": "2025-01-01T10:02:00Z"},
    PAYMENT_EVENT: {"deuda_external_id": "D-1", "pago": {
        "boty_payment_id": "bpay_1", "external_id": None, "transaction_id": "tx-9", "monto": 150000.5,
        "moneda": "COP", "metodo": "gateway", "pagado_en": "2025-01-01T09:59:00-05:00"},
        "saldo_pendiente": 49999.5, "status": "partial"},
    "template.status_changed": {"account_id": "wacc_1", "template_id": "1500", "name": "payment_reminder",
                                "language": "es", "change": "status", "status": "approved",
                                "previous_status": "pending", "reason": None, "detail": None, "category": "UTILITY",
                                "previous_category": None, "quality_score": None,
                                "timestamp": "2025-01-01T09:00:00Z"},
    "debt.promise_made": {"deuda_external_id": "D-1", "promised_date": "2025-01-15", "amount": 100.5,
                          "moneda": "USD", "origin": "page"},
    "debt.disputed": {"deuda_external_id": "D-1", "reason": "No reconozco", "origin": "whatsapp"},
    "debt.promise_broken": {"deuda_external_id": "D-1", "promised_date": "2025-01-15", "saldo_pendiente": 100.5,
                            "moneda": "USD"},
    "debt.escalated": {"deuda_external_id": "D-1", "plan_id": "dpl_1", "dias": 30,
                       "last_reminder_at": "2025-02-14T13:00:00Z", "saldo_pendiente": 100.5, "moneda": "USD"},
}


def emit(tenant_id: int, name: str = "message.sent", count: int = 1, notify: bool = True) -> list[Event]:
    with outbox.listening([jobs.fan_out_task] if notify else []), atomic():
        return [outbox.emit(tenant_id, name, SAMPLES[name]) for _ in range(count)]


def stored_bytes(event: Event) -> bytes:
    raw = Event.select(Event.payload.cast("TEXT")).where(Event.id == event.id).scalar()
    return raw.encode()


def after(start: dt.datetime, seconds: float):
    return lambda: start + dt.timedelta(seconds=seconds)


def only_delivery() -> WebhookDelivery:
    return WebhookDelivery.get()


def statuses(answers: list[int]):
    """A respond callable answering each status in turn, then 200."""
    queue = list(answers)
    lock = threading.Lock()

    def respond(request):
        with lock:
            return Reply(queue.pop(0) if queue else 200)

    return respond


def test_every_event_type_arrives_signed_over_its_raw_bytes(alice, receiver):
    endpoint, secret = webhooks.create_endpoint(alice.id, receiver.url(path="/hooks?source=svc"), CORE_EVENTS)
    _payment, payment_secret = webhooks.set_payment_endpoint(alice.id, receiver.url(path="/payments"))
    with atomic():
        emitted = [outbox.emit(alice.id, name, SAMPLES[name]) for name in ALL_EVENTS]
    jobs.notify_new_events()

    received = {request.headers["X-Service-Event-Id"]: request for request in receiver.wait_for(len(ALL_EVENTS))}
    assert len(received) == len(ALL_EVENTS)
    for event in emitted:
        request = received[event.public_id]
        key = payment_secret if event.name == PAYMENT_EVENT else secret
        assert verify(request, key), event.name
        assert not verify(request, payment_secret if key == secret else secret)
        assert request.body == stored_bytes(event)
        assert orjson.loads(request.body) == event.payload
        assert request.headers["X-Service-Event"] == event.name
        assert request.headers["Content-Type"] == "application/json"
        assert request.headers["User-Agent"].startswith("Service-Webhooks/")
        assert request.path == ("/payments" if event.name == PAYMENT_EVENT else "/hooks?source=svc")
        tampered = Received(request.path, request.headers, request.body.replace(b"}", b" }", 1))
        assert not verify(tampered, key)
    [paid] = [event for event in emitted if event.name == PAYMENT_EVENT]
    payment = orjson.loads(stored_bytes(paid))
    assert payment["id"] == paid.public_id and payment["event"] == PAYMENT_EVENT
    assert {d.status for d in WebhookDelivery.select()} == {"delivered"}


@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
def test_a_drain_finds_the_deliveries_it_records_by_key(alice, receiver):
    # Without statistics SQLite would walk every open delivery by the status index to record
    # each batch: a backlog of thousands would slow every endpoint's records.
    endpoint, _secret = webhooks.create_endpoint(alice.id, receiver.url(), ["message.sent"])
    emit(alice.id, count=12, notify=False)
    webhooks.fan_out()
    with statements_run() as ran:
        drain(endpoint.id)
    assert any(sql.startswith('UPDATE "webhook_delivery" SET "status"') and ID_LIST.search(sql) for sql in ran), ran
    assert looked_up_by_index(ran) == []
    assert {d.status for d in WebhookDelivery.select()} == {"delivered"}


def test_a_receiver_that_fails_twice_gets_the_event_on_the_third_attempt(alice, make_receiver):
    server = make_receiver(respond=statuses([500, 502]))
    endpoint, secret = webhooks.create_endpoint(alice.id, server.url(), ["message.sent"])
    start = utcnow()
    [event] = emit(alice.id)
    server.wait_for(1)
    delivery = only_delivery()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("failed", 1, 500)
    first_at = WebhookAttempt.get().attempted_at
    assert dt.timedelta(seconds=9.5) <= delivery.next_attempt_at - first_at <= dt.timedelta(seconds=10.5)

    drain(endpoint.id, clock=after(start, 5))  # not due yet
    assert len(server.requests) == 1
    drain(endpoint.id, clock=after(start, 12))
    assert len(server.requests) == 2
    assert WebhookEndpoint.get_by_id(endpoint.id).failure_count == 2
    drain(endpoint.id, clock=after(start, 70))

    requests = server.wait_for(3)
    assert len(requests) == 3
    assert {request.headers["X-Service-Event-Id"] for request in requests} == {event.public_id}
    assert {request.body for request in requests} == {stored_bytes(event)}
    assert all(verify(request, secret) for request in requests)
    delivery = only_delivery()
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == ("delivered", 3, None)
    log = list(webhooks.attempts_of(delivery.id))
    assert [(a.number, a.outcome, a.status_code) for a in log] == [
        (1, "failed", 500), (2, "failed", 502), (3, "delivered", 200)]
    assert all(a.latency_ms is not None and a.latency_ms >= 0 for a in log)
    endpoint = WebhookEndpoint.get_by_id(endpoint.id)
    assert endpoint.failure_count == 0
    assert endpoint.last_success_at == log[2].attempted_at and endpoint.last_failure_at == log[1].attempted_at


def test_a_deleted_endpoint_receives_nothing_more(client, alice, make_receiver):
    server = make_receiver(respond=lambda request: Reply(503))
    created = client.simulate_post("/api/v1/webhooks/endpoints", headers=alice.headers,
                                   json={"url": server.url(), "events": ["message.sent", "message.read"]}).json
    endpoint = WebhookEndpoint.get(WebhookEndpoint.public_id == created["data"]["id"])
    start = utcnow()
    emit(alice.id)
    server.wait_for(1)
    assert only_delivery().status == "failed"

    response = client.simulate_delete(f"/api/v1/webhooks/endpoints/{endpoint.public_id}", headers=alice.headers)
    assert response.status_code == 200
    assert only_delivery().status == "cancelled"
    for hours in (1, 30, 200):
        drain(endpoint.id, clock=after(start, hours * 3600))
    jobs.kick()
    emit(alice.id, "message.read")
    assert len(server.requests) == 1
    assert WebhookDelivery.select().count() == 1


def test_a_private_target_is_refused_at_creation_and_at_delivery(alice, receiver):
    set_allow_private(False)
    for url in (receiver.url(), receiver.url("localhost")):
        with pytest.raises(Invalid) as refused:
            webhooks.create_endpoint(alice.id, url, ["message.sent"])
        assert "non-public address" in refused.value.details["errors"]["url"][0]

    set_allow_private(True)
    by_ip, _ = webhooks.create_endpoint(alice.id, receiver.url(), ["message.sent"])
    by_name, _ = webhooks.create_endpoint(alice.id, receiver.url("localhost"), ["message.sent"])
    set_allow_private(False)  # e.g. the name now resolves inward, or the setting changed
    emit(alice.id)
    assert receiver.requests == []
    for endpoint in (by_ip, by_name):
        delivery = WebhookDelivery.get(WebhookDelivery.endpoint == endpoint.id)
        assert delivery.status == "failed"
        assert delivery.last_error.startswith("refused:") and "non-public address" in delivery.last_error
    assert WebhookAttempt.select().where(WebhookAttempt.status_code.is_null()).count() == 2


def test_the_connection_goes_to_the_vetted_address_and_tls_checks_the_hostname(alice, webhook_ca, make_receiver,
                                                                             webhook_settings):
    named = make_receiver(names=("localhost",))  # no IP in the certificate: only the name can match
    endpoint, secret = webhooks.create_endpoint(alice.id, named.url("localhost"), ["message.sent"])
    emit(alice.id)
    [request] = named.wait_for(1)
    assert verify(request, secret)
    assert request.sni == "localhost"
    assert request.headers["Host"] == f"localhost:{named.port}"
    assert only_delivery().status == "delivered"

    impostor = make_receiver(names=("hooks.example.com",))
    webhooks.deactivate_endpoint(alice.id, endpoint.public_id)
    webhooks.create_endpoint(alice.id, impostor.url("localhost"), ["message.sent"])
    emit(alice.id)
    assert impostor.requests == []
    failed = WebhookDelivery.select().where(WebhookDelivery.status == "failed").get()
    assert failed.last_error.startswith("TLS error")

    configure(webhook_settings, webhook_ca_bundle=None)  # the receivers' CA is no longer trusted
    untrusted = make_receiver()
    webhooks.create_endpoint(alice.id, untrusted.url(), ["message.read"])
    emit(alice.id, "message.read")
    assert untrusted.requests == []
    assert "certificate verify failed" in WebhookDelivery.get(WebhookDelivery.event_name == "message.read").last_error


def test_a_redirect_is_a_failure_and_is_not_followed(alice, make_receiver):
    elsewhere = make_receiver()
    redirecting = make_receiver(respond=lambda request: Reply(307, headers={"Location": elsewhere.url()}))
    webhooks.create_endpoint(alice.id, redirecting.url(), ["message.sent"])
    emit(alice.id)
    redirecting.wait_for(1)
    assert elsewhere.requests == []
    delivery = only_delivery()
    assert (delivery.status, delivery.last_status_code) == ("failed", 307)
    assert "redirects are not followed" in delivery.last_error


def test_retry_after_is_honoured_on_429_and_503(alice, make_receiver):
    cases = {"/429": (429, "120", 120), "/503": (503, "3600", 3600), "/500": (500, "3600", 9.5)}
    server = make_receiver(respond=lambda request: Reply(cases[request.path][0],
                                                         headers={"Retry-After": cases[request.path][1]}))
    endpoints = {path: webhooks.create_endpoint(alice.id, server.url(path=path), ["message.sent"])[0]
                 for path in cases}
    emit(alice.id)
    server.wait_for(3)
    for path, (_status, _retry_after, minimum_wait) in cases.items():
        delivery = WebhookDelivery.get(WebhookDelivery.endpoint == endpoints[path].id)
        attempt = WebhookAttempt.get(WebhookAttempt.delivery == delivery.id)
        wait = (delivery.next_attempt_at - attempt.attempted_at).total_seconds()
        assert minimum_wait <= wait <= max(minimum_wait, 11) + 1, path


def test_retries_end_in_exhausted_after_the_schedule(alice, make_receiver):
    server = make_receiver(respond=lambda request: Reply(500, body=b"x" * 5000))
    core, _ = webhooks.create_endpoint(alice.id, server.url(path="/core"), ["message.sent"])
    payment, _ = webhooks.set_payment_endpoint(alice.id, server.url(path="/payments"))
    start = utcnow()
    emit(alice.id, "message.sent")
    emit(alice.id, PAYMENT_EVENT)
    for day in range(1, 15):
        for endpoint in (core, payment):
            drain(endpoint.id, clock=after(start, day * 2 * 86400))
    core_delivery = WebhookDelivery.get(WebhookDelivery.endpoint == core.id)
    payment_delivery = WebhookDelivery.get(WebhookDelivery.endpoint == payment.id)
    assert (core_delivery.status, core_delivery.attempts) == ("exhausted", len(webhooks.RETRY_SCHEDULE))
    assert (payment_delivery.status, payment_delivery.attempts) == ("exhausted", 1 + 5)
    assert sum(1 for r in server.requests if r.path == "/core") == 9
    assert sum(1 for r in server.requests if r.path == "/payments") == 6
    excerpts = [a.response_excerpt for a in WebhookAttempt.select()]
    assert all(len(text.encode()) <= 1024 for text in excerpts) and excerpts[0].startswith("xxx")
    assert WebhookEndpoint.get_by_id(core.id).failure_count == 9


def test_a_replay_sends_the_same_event_again_to_the_endpoints_subscribed_now(alice, make_receiver):
    first = make_receiver()
    later = make_receiver()
    gone = make_receiver()
    webhooks.create_endpoint(alice.id, first.url(), ["message.sent"])
    removed, _ = webhooks.create_endpoint(alice.id, gone.url(), ["message.sent"])
    [event] = emit(alice.id)
    first.wait_for(1)
    gone.wait_for(1)
    webhooks.deactivate_endpoint(alice.id, removed.public_id)
    webhooks.create_endpoint(alice.id, later.url(), ["message.sent"])
    webhooks.create_endpoint(alice.id, later.url(path="/other"), ["message.read"])  # not subscribed

    created, endpoint_ids = webhooks.replay_event(event.public_id)
    assert created == 2
    jobs.start_drains(endpoint_ids)
    replayed = first.wait_for(2)[1]
    [fresh] = later.wait_for(1)
    assert len(gone.requests) == 1
    for request in (replayed, fresh):
        assert request.headers["X-Service-Event-Id"] == event.public_id
        assert request.body == stored_bytes(event)
    sequences = sorted((d.endpoint_id, d.sequence) for d in WebhookDelivery.select())
    assert [sequence for _endpoint, sequence in sequences] == [0, 1, 0, 0]


def test_replay_since_covers_every_event_from_that_time(alice, make_receiver):
    server = make_receiver()
    webhooks.create_endpoint(alice.id, server.url(), ["message.sent", "message.read"])
    emit(alice.id, count=2)
    cutoff = utcnow()
    newer = emit(alice.id, "message.read", count=3)
    server.wait_for(5)
    created, endpoint_ids = webhooks.replay_since(cutoff)
    assert created == 3
    jobs.start_drains(endpoint_ids)
    requests = server.wait_for(8)
    assert sorted(r.headers["X-Service-Event-Id"] for r in requests[5:]) == sorted(e.public_id for e in newer)


def test_an_endpoint_never_sees_more_than_its_concurrency(alice, make_receiver):
    active = 0
    peak = 0
    lock = threading.Lock()

    def slow(request):
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.03)
        with lock:
            active -= 1
        return Reply(200)

    server = make_receiver(respond=slow)
    webhooks.create_endpoint(alice.id, server.url(), ["message.sent"])
    emit(alice.id, count=80)
    server.wait_for(80)
    assert 1 < peak <= ENDPOINT_CONCURRENCY
    assert WebhookDelivery.select().where(WebhookDelivery.status == "delivered").count() == 80


def test_an_unreachable_endpoint_fails_fast_and_keeps_its_retries(alice, make_receiver):
    server = make_receiver()
    url = server.url()
    server.close()  # nothing listens on the port any more
    endpoint, _ = webhooks.create_endpoint(alice.id, url, ["message.sent"])
    started = time.monotonic()
    emit(alice.id, count=40)
    assert time.monotonic() - started < 5
    deliveries = list(WebhookDelivery.select())
    assert {(d.status, d.attempts) for d in deliveries} == {("failed", 1)}
    assert all(d.next_attempt_at > utcnow() for d in deliveries)
    assert WebhookEndpoint.get_by_id(endpoint.id).failure_count == 40
    # Each delivery is logged once: refused by the port, or failed without a try once the drain
    # gave up on the endpoint; none lost, none twice, none left in the senders' queue.
    attempts = list(WebhookAttempt.select())
    assert sorted(a.delivery_id for a in attempts) == sorted(d.id for d in deliveries)
    assert all(a.number == 1 and a.outcome == "failed" for a in attempts)
    for attempt in attempts:
        if attempt.error != "connection refused or unreachable":
            streak = re.fullmatch(r"not sent: the endpoint failed (\d+) connections in a row", attempt.error)
            assert streak and int(streak.group(1)) >= UNREACHABLE_THRESHOLD, attempt.error


def test_the_test_ping_is_signed_and_reports_the_answer(alice, make_receiver):
    server = make_receiver(respond=lambda request: Reply(202, body=b'{"ok":true}'))
    endpoint, secret = webhooks.create_endpoint(alice.id, server.url(), ["message.sent"])
    result = send_test(endpoint)
    assert (result.response.ok, result.response.status_code, result.response.excerpt) == (True, 202, '{"ok":true}')
    [request] = server.requests
    assert verify(request, secret)
    assert request.headers["X-Service-Event"] == "webhook.ping"
    assert request.headers["X-Service-Event-Id"] == result.event_id
    assert orjson.loads(request.body)["endpoint_id"] == endpoint.public_id
    assert WebhookDelivery.select().count() == 0


def test_events_without_a_notification_are_picked_up_by_the_sweep(alice, receiver):
    webhooks.create_endpoint(alice.id, receiver.url(), ["message.sent"])
    emit(alice.id, count=3, notify=False)
    assert receiver.requests == []
    assert jobs.kick() == (3, 0)
    assert len(receiver.wait_for(3)) == 3


def test_only_subscribed_active_endpoints_of_the_events_tenant_get_deliveries(alice, charlie, receiver):
    webhooks.create_endpoint(alice.id, receiver.url(path="/sent"), ["message.sent"])
    webhooks.create_endpoint(alice.id, receiver.url(path="/read"), ["message.read"])
    webhooks.create_endpoint(charlie.id, receiver.url(path="/charlie"), CORE_EVENTS)
    emit(alice.id, "message.sent")
    emit(alice.id, PAYMENT_EVENT)  # alice has no payment endpoint
    assert [request.path for request in receiver.requests] == ["/sent"]


def test_concurrent_fan_outs_create_each_delivery_once(alice, storage):
    endpoint, _ = webhooks.create_endpoint(alice.id, "https://hooks.example.com/a", ["message.sent"])
    emit(alice.id, count=600, notify=False)
    claimed: list[int] = []
    errors: list[BaseException] = []

    def fan_out_all():
        try:
            with connection():
                while (result := webhooks.fan_out(limit=40)).events:
                    claimed.append(result.events)
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=fan_out_all) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(claimed) == 600
    assert WebhookDelivery.select().where(WebhookDelivery.endpoint == endpoint.id).count() == 600
    assert Event.select().where(Event.fanned_out_at.is_null()).count() == 0


def test_a_new_payment_endpoint_takes_over_undelivered_payments(alice, make_receiver):
    down = make_receiver(respond=lambda request: Reply(500))
    up = make_receiver()
    old, _ = webhooks.set_payment_endpoint(alice.id, down.url())
    start = utcnow()
    [event] = emit(alice.id, PAYMENT_EVENT)
    down.wait_for(1)
    new, secret = webhooks.set_payment_endpoint(alice.id, up.url())
    assert webhooks.get_payment_endpoint(alice.id).id == new.id
    assert WebhookEndpoint.get_by_id(old.id).status == "inactive"
    drain(new.id, clock=after(start, 20))
    [request] = up.wait_for(1)
    assert request.headers["X-Service-Event-Id"] == event.public_id and verify(request, secret)
    assert len(down.requests) == 1


def test_set_payment_endpoint_checks_the_target(alice, storage):
    with pytest.raises(Invalid):
        webhooks.set_payment_endpoint(alice.id, "http://erp.example.com/payments")
    configure(storage, webhook_allow_private=False)
    with pytest.raises(Invalid):
        webhooks.set_payment_endpoint(alice.id, "https://10.0.0.8/payments")
    assert webhooks.get_payment_endpoint(alice.id) is None


def test_old_attempts_are_pruned_after_the_retention(alice, make_receiver):
    server = make_receiver()
    webhooks.create_endpoint(alice.id, server.url(), ["message.sent"])
    emit(alice.id, count=2)
    server.wait_for(2)
    old = WebhookDelivery.select().order_by(WebhookDelivery.id).first()
    WebhookAttempt.update(attempted_at=utcnow() - dt.timedelta(days=31)).where(
        WebhookAttempt.delivery == old.id).execute()
    WebhookDelivery.update(updated_at=utcnow() - dt.timedelta(days=31)).where(WebhookDelivery.id == old.id).execute()
    assert webhooks.prune(30) == (1, 1)
    assert WebhookAttempt.select().count() == 1 and WebhookDelivery.select().count() == 1


def test_notifications_are_coalesced_into_a_few_tasks(alice, storage):
    huey.immediate = False
    huey.flush()
    try:
        started = time.time()
        for _ in range(300):
            jobs.notify_new_events()
        windows = int(time.time()) - int(started) + 1
        queued = huey.pending_count() + huey.scheduled_count()
        assert 1 <= queued <= 2 * windows
    finally:
        huey.flush()
        huey.immediate = True


def test_a_drain_lease_that_lapsed_cannot_release_its_successors(alice):
    endpoint, _ = webhooks.create_endpoint(alice.id, "https://hooks.example.com/a", ["message.sent"])
    start = utcnow()
    assert not webhooks.drain_held(endpoint.id, start)
    first = webhooks.acquire_drain(endpoint.id, start, 60)
    assert first is not None and webhooks.acquire_drain(endpoint.id, start, 60) is None
    assert webhooks.drain_held(endpoint.id, start + dt.timedelta(seconds=60))
    later = start + dt.timedelta(seconds=61)
    assert not webhooks.drain_held(endpoint.id, later)
    second = webhooks.acquire_drain(endpoint.id, later, 60)  # the first holder stalled past its lease
    assert second is not None
    assert webhooks.extend_drain(endpoint.id, first, later, 60) is None
    webhooks.release_drain(endpoint.id, first)
    assert webhooks.acquire_drain(endpoint.id, later, 60) is None  # still the second holder's
    webhooks.release_drain(endpoint.id, second)
    assert webhooks.acquire_drain(endpoint.id, later, 60) is not None


def test_a_drain_taking_over_sends_at_once_what_the_holder_before_it_claimed_and_never_recorded(
        alice, make_receiver):
    server = make_receiver()
    endpoint, _ = webhooks.create_endpoint(alice.id, server.url(), ["message.sent"])
    emitted = emit(alice.id, count=3, notify=False)
    while webhooks.fan_out(limit=500).events:
        pass
    # A drain whose worker died after claiming: its claims would hold the deliveries for CLAIM_SECONDS.
    assert len(webhooks.claim_due(endpoint.id, 10, utcnow())) == 3

    stats = drain(endpoint.id)

    assert (stats.attempted, stats.delivered) == (3, 3)
    assert {request.headers["X-Service-Event-Id"] for request in server.wait_for(3)} == \
        {event.public_id for event in emitted}
    assert {d.status for d in WebhookDelivery.select()} == {"delivered"}
    assert webhooks.acquire_drain(endpoint.id, utcnow(), 60) is not None  # the lease was given back


def _backlog(tenant_id: int, count: int) -> tuple[WebhookEndpoint, list[int]]:
    """An endpoint with `count` deliveries fanned out to it; returns it and their ids in order."""
    endpoint, _ = webhooks.create_endpoint(tenant_id, "https://hooks.example.com/a", ["message.sent"])
    emit(tenant_id, count=count, notify=False)
    while webhooks.fan_out(limit=500).events:
        pass
    ids = [row[0] for row in WebhookDelivery.select(WebhookDelivery.id)
           .where(WebhookDelivery.endpoint == endpoint.id).order_by(WebhookDelivery.id).tuples()]
    return endpoint, ids


def test_a_claim_takes_the_oldest_due_of_both_open_statuses_first(alice, storage):
    endpoint, ids = _backlog(alice.id, 30)
    now = utcnow()
    # Due times run against the ids (the newest delivery is the oldest due), and every third one is
    # a failed delivery due again: the claim order is by due time across both statuses.
    for n, delivery_id in enumerate(ids):
        WebhookDelivery.update(status="failed" if n % 3 == 0 else "pending",
                               next_attempt_at=now - dt.timedelta(seconds=n + 1)).where(
            WebhookDelivery.id == delivery_id).execute()
    WebhookDelivery.update(next_attempt_at=now + dt.timedelta(seconds=5)).where(WebhookDelivery.id == ids[-1]).execute()
    due_order = list(reversed(ids[:-1]))
    assert [work.delivery_id for work in webhooks.claim_due(endpoint.id, 10, now)] == due_order[:10]
    assert [work.delivery_id for work in webhooks.claim_due(endpoint.id, 100, now)] == due_order[10:]
    assert webhooks.claim_due(endpoint.id, 100, now) == []  # claimed, or not due yet



def test_a_batch_of_outcomes_moves_each_delivery_its_own_way(alice, storage):
    endpoint, ids = _backlog(alice.id, 6)
    delivered, retried, exhausted, cancelled, throttled, twice = ids
    WebhookDelivery.update(status="cancelled").where(WebhookDelivery.id == cancelled).execute()
    at = utcnow().replace(microsecond=0)
    last = len(webhooks.RETRY_SCHEDULE)
    outcomes = [
        webhooks.Outcome(delivered, 1, 9, at, ok=True, status_code=200, latency_ms=12),
        webhooks.Outcome(retried, 2, 9, at + dt.timedelta(seconds=1), ok=False, status_code=500, error="HTTP 500"),
        webhooks.Outcome(exhausted, last, 9, at + dt.timedelta(seconds=2), ok=False, error="timed out"),
        webhooks.Outcome(cancelled, 1, 9, at + dt.timedelta(seconds=3), ok=True, status_code=200),
        webhooks.Outcome(throttled, 1, 9, at + dt.timedelta(seconds=4), ok=False, status_code=429, error="HTTP 429",
                         retry_after=120),
        webhooks.Outcome(twice, 1, 9, at + dt.timedelta(seconds=5), ok=False, status_code=503, error="HTTP 503"),
        webhooks.Outcome(twice, 2, 9, at + dt.timedelta(seconds=6), ok=True, status_code=204),
    ]
    with connection():
        webhooks.record(endpoint.id, outcomes)
    rows = {row.id: row for row in WebhookDelivery.select().where(WebhookDelivery.id.in_(ids))}

    def seen(delivery_id):
        row = rows[delivery_id]
        return row.status, row.attempts, row.last_status_code, row.last_error, row.delivered_at, row.claimed_until

    assert seen(delivered) == ("delivered", 1, 200, None, at, None)
    assert seen(retried) == ("failed", 2, 500, "HTTP 500", None, None)
    gap = webhooks.RETRY_SCHEDULE[2] - webhooks.RETRY_SCHEDULE[1]
    waited = (rows[retried].next_attempt_at - (at + dt.timedelta(seconds=1))).total_seconds()
    assert gap * (1 - webhooks.JITTER) <= waited <= gap * (1 + webhooks.JITTER)
    assert seen(exhausted) == ("exhausted", last, None, "timed out", None, None)
    assert rows[exhausted].next_attempt_at is None
    assert rows[cancelled].status == "cancelled" and rows[cancelled].attempts == 0
    assert seen(throttled) == ("failed", 1, 429, "HTTP 429", None, None)
    assert (rows[throttled].next_attempt_at - (at + dt.timedelta(seconds=4))).total_seconds() == 120
    assert seen(twice) == ("delivered", 2, 204, None, at + dt.timedelta(seconds=6), None)
    assert WebhookAttempt.select().where(WebhookAttempt.delivery.in_(ids)).count() == len(outcomes)


def test_the_endpoints_with_due_work_leave_out_claimed_future_and_inactive_deliveries(alice, charlie, storage):
    endpoint, ids = _backlog(alice.id, 3)
    other, _ = _backlog(charlie.id, 1)
    now = utcnow()
    assert set(webhooks.endpoints_with_due_work(now)) == {endpoint.id, other.id}
    assert webhooks.has_due(endpoint.id, now)

    assert len(webhooks.claim_due(endpoint.id, 2, now)) == 2  # claimed: not due while the claim lives
    WebhookDelivery.update(next_attempt_at=now + dt.timedelta(seconds=30)).where(WebhookDelivery.id == ids[2]).execute()
    assert set(webhooks.endpoints_with_due_work(now)) == {other.id}
    assert not webhooks.has_due(endpoint.id, now)
    later = now + dt.timedelta(seconds=webhooks.CLAIM_SECONDS + 31)  # the claims lapsed, the retry came
    assert set(webhooks.endpoints_with_due_work(later)) == {endpoint.id, other.id}

    WebhookEndpoint.update(status="inactive").where(WebhookEndpoint.id == other.id).execute()
    assert set(webhooks.endpoints_with_due_work(later)) == {endpoint.id}
