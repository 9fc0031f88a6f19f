"""End to end, on the live service (gunicorn, a huey consumer and the platform simulator as
processes, everything over real HTTP): a template created through the API is pending, and not
sendable until it is approved; the simulator's review approves it and `template.status_changed`
reaches the company's endpoint, signed; a utility template that reads like marketing is rejected
with its reason; the platform pauses a template for quality, unpauses it and recategorises it,
each change an event."""

from __future__ import annotations

import json

import pytest
import requests

from models.numbers.tables import Template
from tests.conftest import Persona
from tests.live import LiveService, env_for, wait_until
from tests.test_templates_api import valid_template
from tests.test_webhooks_live import live_number
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)
from tests.webhooks_fixtures import verify

pytestmark = pytest.mark.parametrize("storage", ["sqlite", "postgres+redis"], indirect=True)

REVIEW_DELAY = 1.0
HELD = 600.0  # a review that cannot come during the test


@pytest.fixture
def live(storage, webhook_ca, webhook_settings, immediate_queue, tmp_path):
    immediate_queue.immediate = False
    env = {**env_for(storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1], "SVC_WEBHOOK_ALLOW_PRIVATE": "true"}
    service = LiveService(env, tmp_path).start()
    yield service
    service.stop()


@pytest.mark.timeout(120)
def test_templates_are_reviewed_and_every_change_reaches_the_company(live, make_receiver):
    receiver = make_receiver()
    company = Persona("Templates Co")
    account = live_number(live, company.id, mps=20)
    endpoint = requests.post(f"{live.api_url}/api/v1/webhooks/endpoints", headers=company.headers, timeout=10,
                             json={"url": receiver.url(), "events": ["template.status_changed"]})
    assert endpoint.status_code == 201, endpoint.text
    secret = endpoint.json()["data"]["signing_secret"]
    templates_url = f"{live.api_url}/api/v1/accounts/{account.public_id}/templates"

    def review_after(seconds: float) -> None:
        requests.post(f"{live.sim_url}/_sim/config", json={"review_delay": seconds}, timeout=5).raise_for_status()

    def events(name: str) -> list[dict]:
        for request in list(receiver.requests):
            assert verify(request, secret), request.headers
        found = [json.loads(request.body) for request in list(receiver.requests)]
        return [event for event in found if event["name"] == name]

    def saw(name: str, **expected) -> dict:
        return wait_until(lambda: next((e for e in events(name) if all(e[k] == v for k, v in expected.items())),
                                       None), timeout=30, message=f"{name} {expected}")

    def listed() -> list[str]:
        response = requests.get(templates_url, headers=company.headers, timeout=10)
        assert response.status_code == 200, response.text
        return [item["name"] for item in response.json()["data"]]

    # Pending, a template is not sendable: with its review held back, it is listed only once the
    # platform approves it (here through the simulator's control endpoint; its review, when it
    # comes, finds it decided and leaves it be).
    review_after(HELD)
    held = requests.post(templates_url, headers=company.headers, json=valid_template(name="order_held"), timeout=10)
    assert held.status_code == 201 and held.json()["data"]["status"] == "pending", held.text
    assert "order_held" not in listed()
    requests.post(f"{live.sim_url}/_sim/templates", json={"name": "order_held", "language": "es",
                                                          "status": "APPROVED"}, timeout=5).raise_for_status()
    saw("order_held", change="status", status="approved", previous_status="pending")
    assert "order_held" in listed()

    # Created: pending, then reviewed.
    review_after(REVIEW_DELAY)
    created = requests.post(templates_url, headers=company.headers, json=valid_template(), timeout=10)
    assert created.status_code == 201, created.text
    assert created.json()["data"]["status"] == "pending"
    saw("order_ready", change="submitted", status="pending")
    # The simulator's review approves it; the company hears of it and may send it.
    approved = saw("order_ready", change="status", status="approved")
    assert approved["previous_status"] == "pending" and approved["account_id"] == account.public_id
    assert "order_ready" in listed()

    # A utility template that reads like marketing is rejected with the platform's reason.
    promo = valid_template(name="promo_utility")
    promo["components"][1]["text"] = "Hola {{1}}, tu pedido {{2}} tiene 20% de descuento hoy."
    assert requests.post(templates_url, headers=company.headers, json=promo, timeout=10).status_code == 201
    rejected = saw("promo_utility", change="status", status="rejected")
    assert rejected["reason"] == "TAG_CONTENT_MISMATCH"
    assert Template.get(Template.name == "promo_utility").rejected_reason == "TAG_CONTENT_MISMATCH"

    # The platform pauses it for quality, then lifts the pause; then recategorises it.
    sim_templates = f"{live.sim_url}/_sim/templates"
    for action in ("pause", "unpause"):
        requests.post(f"{sim_templates}/{action}", json={"name": "order_ready", "language": "es"},
                      timeout=5).raise_for_status()
        if action == "pause":
            saw("order_ready", change="quality", quality_score="RED")
            paused = saw("order_ready", change="status", status="paused")
            assert paused["detail"].startswith("FIRST_PAUSE")
            wait_until(lambda: "order_ready" not in listed(), timeout=10, message="the paused template unlisted")
        else:
            saw("order_ready", change="status", status="approved", previous_status="paused")
            assert "order_ready" in listed()
    requests.post(f"{sim_templates}/category", json={"name": "order_ready", "language": "es",
                                                     "category": "MARKETING"}, timeout=5).raise_for_status()
    moved = saw("order_ready", change="category", category="MARKETING")
    assert moved["previous_category"] == "UTILITY"
