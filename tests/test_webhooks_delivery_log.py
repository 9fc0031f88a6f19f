"""The delivery log skips nothing: a log of 5000 deliveries, most sharing their creation time with
hundreds of others, is paged through the API (GET /webhooks/deliveries, by cursor) and through the
portal's delivery log, both over real HTTP to a gunicorn of the service, with each filter (endpoint,
event, status, time) and combinations of them; every walk gives exactly the matching deliveries,
each once, newest first, and none of another company's."""

from __future__ import annotations

import datetime as dt
import html
import re
import uuid
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

import pytest
import requests

from models.events.tables import KIND_API, Event, WebhookDelivery, WebhookEndpoint
from models.ids import new_id
from models.store.db import atomic
from models.tenancy.keys import create_key
from tests.live import LiveService, env_for, wait_until
from tests.portal_fixtures import *  # noqa: F403
from tests.portal_fixtures import PASSWORD, signed_in

DELIVERIES = 5000
STATUSES = ("delivered", "failed", "pending", "exhausted")
EVENTS = ("message.sent", "message.delivered", "message.failed")
# Five creation times for 5000 deliveries: a thousand share each.
START = dt.datetime(2026, 11, 1, 12, 0, 0)
TIMES = [START + dt.timedelta(minutes=10 * n) for n in range(5)]

_DELIVERY = re.compile(r'<a href="/portal/webhooks/deliveries/(\d+)">#')
_OLDER = re.compile(r'<a href="([^"]+)" rel="next">')
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def _endpoint(tenant_id: int, n: int) -> WebhookEndpoint:
    return WebhookEndpoint.create(public_id=new_id("whend_"), tenant=tenant_id, kind=KIND_API,
                                  url=f"https://hooks{n}.example.com/in", events=list(EVENTS),
                                  secret_ciphertext="x", secret_preview="x", active_url_hash=uuid.uuid4().hex)


def _log(tenant_id: int, endpoints: list[WebhookEndpoint], count: int, salt: int = 0) -> None:
    """`count` deliveries of events fanned out to every endpoint, statuses, events and times
    cycling at different strides, so each filter and combination picks rows all over the log."""
    events = count // len(endpoints)
    event_rows = [{"public_id": new_id("evt_"), "tenant": tenant_id, "name": EVENTS[(n + salt) % 3], "payload": {},
                   "created_at": TIMES[n * len(TIMES) // events]} for n in range(events)]
    for start in range(0, len(event_rows), 500):
        Event.insert_many(event_rows[start:start + 500]).execute()
    stored = list(Event.select().where(Event.tenant == tenant_id).order_by(Event.id))
    rows = [{"event": event.id, "endpoint": endpoint.id, "tenant": tenant_id, "event_name": event.name,
             "status": STATUSES[(n + k) % 4], "max_attempts": 9, "created_at": event.created_at,
             "updated_at": event.created_at}
            for n, event in enumerate(stored) for k, endpoint in enumerate(endpoints)]
    for start in range(0, len(rows), 500):
        WebhookDelivery.insert_many(rows[start:start + 500]).execute()


@pytest.fixture
def delivery_log(alice, charlie):
    with atomic():
        mine = [_endpoint(alice.id, 1), _endpoint(alice.id, 2)]
        _log(charlie.id, [_endpoint(charlie.id, 3)], 500, salt=1)
        _log(alice.id, mine, DELIVERIES)
    return mine


@pytest.fixture
def service(storage, tmp_path):
    service = LiveService(env_for(storage), tmp_path, web_workers=2)
    service.start_api()
    wait_until(lambda: service._answers(f"{service.api_url}/api/v1/openapi.json"), message="the API")
    yield service
    service.stop()


def expected(tenant_id: int, endpoint=None, event=None, status=None, since=None, until=None) -> list[int]:
    """The matching deliveries, newest first, straight from the table."""
    query = (WebhookDelivery.select(WebhookDelivery.id).join(WebhookEndpoint)
             .where(WebhookDelivery.tenant == tenant_id).order_by(WebhookDelivery.id.desc()))
    for condition, given in ((WebhookEndpoint.public_id == endpoint, endpoint),
                             (WebhookDelivery.event_name == event, event),
                             (WebhookDelivery.status == status, status),
                             (WebhookDelivery.created_at >= since, since),
                             (WebhookDelivery.created_at < until, until)):
        if given is not None:
            query = query.where(condition)
    return [row.id for row in query]


def api_walk(service: LiveService, key: str, per_page: int, **filters) -> list[int]:
    """Every page from the first, following `links.next` until it is null."""
    url, params = f"{service.api_url}/api/v1/webhooks/deliveries", {**filters, "per_page": per_page}
    seen: list[int] = []
    while True:
        answer = requests.get(url, params=params, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert len(body["data"]) <= per_page
        seen.extend(item["id"] for item in body["data"])
        assert body["meta"]["has_more"] == (body["meta"]["next_cursor"] is not None)
        if body["links"]["next"] is None:
            return seen
        assert body["meta"]["has_more"] and len(body["data"]) == per_page
        # The link is on the configured public URL, which is this service's own.
        link = urlsplit(body["links"]["next"])
        assert f"{link.scheme}://{link.netloc}" == service.api_url
        url, params = f"{service.api_url}{link.path}?{link.query}", None


def portal_session(service: LiveService, email: str) -> requests.Session:
    session = requests.Session()
    login = session.get(f"{service.api_url}/portal/login", timeout=30)
    token = _CSRF.search(login.text).group(1)
    signed = session.post(f"{service.api_url}/portal/login", allow_redirects=False, timeout=30,
                          data={"email": email, "password": PASSWORD, "next": "/portal", "csrf_token": token})
    assert signed.status_code == 303, signed.text
    return session


def portal_walk(service: LiveService, session: requests.Session, **filters) -> list[int]:
    """Every page of the portal's log from the first, following Older."""
    answer = session.get(f"{service.api_url}/portal/webhooks/deliveries", params=filters, timeout=30)
    seen: list[int] = []
    while True:
        assert answer.status_code == 200, answer.text
        seen.extend(map(int, _DELIVERY.findall(answer.text)))
        older = _OLDER.search(answer.text)
        if older is None:
            return seen
        answer = session.get(service.api_url + html.unescape(older.group(1)), timeout=30)


def iso(moment: dt.datetime) -> str:
    return moment.replace(tzinfo=dt.UTC).isoformat()


def filter_sets(endpoint: str) -> list[dict]:
    return [{}, {"endpoint": endpoint}, {"event": "message.failed"}, {"status": "failed"},
            {"since": TIMES[2]}, {"until": TIMES[1]}, {"since": TIMES[1], "until": TIMES[3]},
            {"endpoint": endpoint, "status": "delivered"},
            {"event": "message.sent", "status": "pending", "since": TIMES[3]},
            {"endpoint": endpoint, "event": "message.delivered", "status": "exhausted", "since": TIMES[1],
             "until": TIMES[4]}]


def test_every_filter_of_the_api_pages_to_exactly_the_matching_deliveries(service, alice, delivery_log):
    endpoint = delivery_log[0].public_id
    # A key allowed the few hundred pages of these walks in a minute.
    _key, key_string = create_key(alice.tenant, ["webhooks:read"], rate_limit=10_000)
    for filters in filter_sets(endpoint):
        wanted = expected(alice.id, **filters)
        query = {("endpoint_id" if name == "endpoint" else name): iso(value) if isinstance(value, dt.datetime)
                 else value for name, value in filters.items()}
        seen = api_walk(service, key_string, 100, **query)
        assert len(seen) == len(set(seen)) and seen == wanted and wanted, filters
    # A page size that does not divide the matches, nor the thousands that share a time.
    assert api_walk(service, key_string, 37, status="failed") == expected(alice.id, status="failed")


def test_every_filter_of_the_portal_pages_to_exactly_the_matching_deliveries(service, alice, owner, delivery_log):
    session = portal_session(service, owner.email)
    endpoint = delivery_log[0].public_id
    for filters in filter_sets(endpoint):
        wanted = expected(alice.id, **filters)
        # The form's times are the company's, as the log shows them.
        zone = ZoneInfo(alice.tenant.timezone or "UTC")
        query = {name: value.replace(tzinfo=dt.UTC).astimezone(zone).strftime("%Y-%m-%dT%H:%M")
                 if isinstance(value, dt.datetime) else value for name, value in filters.items()}
        seen = portal_walk(service, session, **query)
        assert len(seen) == len(set(seen)) and seen == wanted and wanted, filters


def test_bad_filters_are_refused_with_the_parameter_named(client, alice, owner):
    answer = client.simulate_get("/api/v1/webhooks/deliveries", headers=alice.headers, params={
        "status": "lost", "event": "message.lost", "since": "yesterday", "until": "2026-11-01T12:00:00",
        "cursor": "0", "per_page": "101"})
    assert answer.status_code == 422, answer.text
    assert answer.json["error"]["code"] == "validation_failed"
    assert set(answer.json["error"]["details"]["errors"]) == {"status", "event", "since", "until", "cursor",
                                                               "per_page"}
    assert client.simulate_get("/api/v1/webhooks/deliveries", headers=alice.headers,
                               params={"cursor": "9" * 5000}).status_code == 422
    browser = signed_in(client, owner)
    page = browser.get("/portal/webhooks/deliveries", since="next tuesday")
    assert page.status_code == 422 and "year-month-day" in page.text


def test_a_company_sees_only_its_own_deliveries(client, alice, charlie, delivery_log):
    answer = client.simulate_get("/api/v1/webhooks/deliveries", headers=charlie.headers,
                                 params={"endpoint_id": delivery_log[0].public_id})
    assert answer.status_code == 200 and answer.json["data"] == [] and answer.json["links"]["next"] is None
    theirs = client.simulate_get("/api/v1/webhooks/deliveries", headers=charlie.headers, params={"per_page": 100})
    assert {item["id"] for item in theirs.json["data"]} <= set(expected(charlie.id))
