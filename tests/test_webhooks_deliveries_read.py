"""GET /webhooks/deliveries, written as one statement put together per set of filters, answers
what the peewee query and `delivery_as_dict` answered, with every filter and cursor, on both
engines."""

from __future__ import annotations

import datetime as dt
import uuid

from models.clock import isoformat, utcnow
from models.events import webhooks
from models.events.tables import DELIVERY_STATUSES, KIND_API, Event, WebhookDelivery, WebhookEndpoint
from models.ids import new_id
from models.store.db import connection
from models.store.secrets import encrypt

URL = "/api/v1/webhooks/deliveries"
STATUSES = DELIVERY_STATUSES


def endpoint_of(persona, url: str) -> WebhookEndpoint:
    return WebhookEndpoint.create(public_id=new_id("whend_"), tenant=persona.id, kind=KIND_API, url=url,
                                  events=["message.sent", "campaign.completed"], secret_ciphertext=encrypt("whsec_t"),
                                  secret_preview="whsec_…", active_url_hash=uuid.uuid4().hex)


def deliveries_of(persona, endpoints: list[WebhookEndpoint], count: int, start: dt.datetime) -> None:
    for n in range(count):
        name = ("message.sent", "campaign.completed")[n % 2]
        event = Event.create(public_id=new_id("evt_"), tenant=persona.id, name=name, payload={"n": n})
        status = STATUSES[n % len(STATUSES)]
        WebhookDelivery.create(
            event=event.id, endpoint=endpoints[n % len(endpoints)].id, tenant=persona.id, event_name=name,
            sequence=n % 3 == 0 and 1 or 0, status=status, attempts=n % 4, max_attempts=5,
            next_attempt_at=start + dt.timedelta(minutes=n) if n % 3 else None,
            last_status_code=(None, 500, 200)[n % 3], last_error="HTTP 500" if n % 3 == 1 else None,
            created_at=start + dt.timedelta(seconds=n, microseconds=n * 7),
            delivered_at=start + dt.timedelta(seconds=n + 1) if status == "delivered" else None)


def older_deliveries(query, before_id: int | None, limit: int) -> tuple[list[WebhookDelivery], bool]:
    """A page of `webhooks.deliveries(...)` after the cursor, through peewee (the reference)."""
    if before_id is not None:
        query = query.where(WebhookDelivery.id < before_id)
    rows = list(query.order_by(WebhookDelivery.id.desc()).limit(limit + 1))
    return rows[:limit], len(rows) > limit


def old_page(tenant_id: int, cursor: int | None, per_page: int, **filters) -> tuple[list[dict], bool]:
    rows, has_more = older_deliveries(webhooks.deliveries(tenant_id, **filters), cursor, per_page)
    return [webhooks.delivery_as_dict(row) for row in rows], has_more


def test_every_filter_and_cursor_reads_as_before(client, alice, charlie):
    start = utcnow().replace(microsecond=0) - dt.timedelta(hours=1)
    with connection():
        first, second = endpoint_of(alice, "https://hooks.example.com/a"), endpoint_of(alice, "https://b.example/in")
        deliveries_of(alice, [first, second], 45, start)
        deliveries_of(charlie, [endpoint_of(charlie, "https://c.example/in")], 10, start)
    middle = start + dt.timedelta(seconds=20)
    cases = [({}, {}), ({"status": "failed"}, {"status": "failed"}),
             ({"event": "campaign.completed"}, {"event_name": "campaign.completed"}),
             ({"endpoint_id": second.public_id}, {"endpoint_public_id": second.public_id}),
             ({"since": isoformat(middle)}, {"since": middle}), ({"until": isoformat(middle)}, {"until": middle}),
             ({"status": "delivered", "endpoint_id": first.public_id, "since": isoformat(start),
               "until": isoformat(middle)},
              {"status": "delivered", "endpoint_public_id": first.public_id, "since": start, "until": middle}),
             ({"endpoint_id": "whend_nothing"}, {"endpoint_public_id": "whend_nothing"})]
    for params, filters in cases:
        cursor, pages = None, 0
        while True:
            query = {**params, "per_page": 7, **({"cursor": cursor} if cursor else {})}
            answered = client.simulate_get(URL, params=query, headers=alice.headers)
            assert answered.status_code == 200, answered.text
            with connection():
                expected, has_more = old_page(alice.id, cursor, 7, **filters)
                assert webhooks.delivery_log_page(alice.id, cursor, 7, **filters) == (expected, has_more)
            body = answered.json
            assert body["data"] == expected and body["meta"]["has_more"] is has_more, params
            pages += 1
            if not has_more:
                break
            cursor = body["meta"]["next_cursor"]
            assert cursor == expected[-1]["id"] and body["links"]["next"].endswith(f"cursor={cursor}")
        assert pages >= (7 if not params else 1)
    everything = client.simulate_get(URL, params={"per_page": 100}, headers=alice.headers).json["data"]
    assert len(everything) == 45 and {item["status"] for item in everything} == set(STATUSES)
    assert any(item["next_attempt_at"] for item in everything) and any(item["delivered_at"] for item in everything)
