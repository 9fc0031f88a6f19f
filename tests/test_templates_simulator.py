"""The simulator reviews submitted templates like the platform, over HTTP: approved after the
review delay, rejected as INVALID_FORMAT or TAG_CONTENT_MISMATCH, recategorised, rated, paused
and unpaused through its control endpoints; every change posted as the platform's webhook and
read back by the service's parser."""

from __future__ import annotations

import pytest
import requests

from messaging.client import GraphClient
from messaging.errors import PermanentPlatformError
from messaging.simulator.records import DEFAULT_WABA_ID
from messaging.testing import WebhookReceiver
from messaging.webhooks import TemplateCategoryUpdate, TemplateQualityUpdate, TemplateStatusUpdate
from tests.test_messaging_simulator import SECRET, onboard, start_simulator
from tests.test_templates_api import valid_template


@pytest.fixture
def receiver():
    endpoint = WebhookReceiver().start()
    yield endpoint
    endpoint.stop()


@pytest.fixture
def sim(receiver):
    simulator = start_simulator(receiver)
    simulator.configure(review_delay=0.05)
    yield simulator
    simulator.stop()


@pytest.fixture
def graph(sim):
    with GraphClient(sim.base_url, app_id="app", app_secret=SECRET, timeout=(1, 2)) as client:
        yield client


def template_updates(receiver: WebhookReceiver, kind=TemplateStatusUpdate) -> list:
    return [update for update in receiver.updates() if isinstance(update, kind)]


def wait_status(receiver: WebhookReceiver, name: str, status: str) -> TemplateStatusUpdate:
    receiver.wait_for(lambda r: any(u.name == name and u.status == status for u in template_updates(r)))
    return next(u for u in template_updates(receiver) if u.name == name and u.status == status)


def submit(sim, graph, body: dict) -> dict:
    _, token = onboard(sim, graph)
    return graph.create_template(DEFAULT_WABA_ID, token, body)


def test_a_good_template_is_pending_then_approved(sim, graph, receiver):
    answer = submit(sim, graph, valid_template())
    assert answer["status"] == "PENDING" and answer["category"] == "UTILITY" and answer["id"]
    approved = wait_status(receiver, "order_ready", "APPROVED")
    assert approved.template_id == answer["id"] and approved.reason == "NONE"


@pytest.mark.parametrize("text", ["{{1}}, tu pedido {{2}} está listo.", "Hola {{1}}, tu pedido {{2}}",
                                  "Hola {{1}}, tu pedido {{3}} está listo."])
def test_a_template_out_of_format_is_rejected_as_invalid_format(sim, graph, receiver, text):
    body = valid_template()
    body["components"][1]["text"] = text
    submit(sim, graph, body)
    assert wait_status(receiver, "order_ready", "REJECTED").reason == "INVALID_FORMAT"


def test_marketing_words_in_a_utility_template_are_a_tag_content_mismatch(sim, graph, receiver):
    body = valid_template()
    body["components"][1]["text"] = "Hola {{1}}, aprovecha la oferta en tu pedido {{2}} hoy."
    submit(sim, graph, body)
    assert wait_status(receiver, "order_ready", "REJECTED").reason == "TAG_CONTENT_MISMATCH"
    # The same words in a marketing template are what marketing templates are for.
    submit(sim, graph, {**body, "name": "order_offer", "category": "MARKETING"})
    wait_status(receiver, "order_offer", "APPROVED")


def test_a_name_the_account_has_is_refused_and_delete_removes_it(sim, graph, receiver):
    _, token = onboard(sim, graph)
    graph.create_template(DEFAULT_WABA_ID, token, valid_template())
    with pytest.raises(PermanentPlatformError):
        graph.create_template(DEFAULT_WABA_ID, token, valid_template())
    graph.delete_template(DEFAULT_WABA_ID, token, "order_ready")
    wait_status(receiver, "order_ready", "DELETED")
    with pytest.raises(PermanentPlatformError):
        graph.delete_template(DEFAULT_WABA_ID, token, "order_ready")


def test_control_endpoints_rate_pause_unpause_and_recategorise(sim, graph, receiver):
    submit(sim, graph, valid_template())
    wait_status(receiver, "order_ready", "APPROVED")
    control = f"{sim.base_url}/_sim/templates"
    who = {"name": "order_ready", "language": "es"}
    assert requests.post(f"{control}/unpause", json=who, timeout=5).status_code == 409  # not paused
    requests.post(f"{control}/quality", json={**who, "quality": "YELLOW"}, timeout=5).raise_for_status()
    requests.post(f"{control}/pause", json=who, timeout=5).raise_for_status()
    paused = wait_status(receiver, "order_ready", "PAUSED")
    assert paused.detail.startswith("FIRST_PAUSE: ")
    requests.post(f"{control}/unpause", json=who, timeout=5).raise_for_status()
    receiver.wait_for(lambda r: len([u for u in template_updates(r) if u.status == "APPROVED"]) == 2)
    requests.post(f"{control}/category", json={**who, "category": "MARKETING"}, timeout=5).raise_for_status()
    receiver.wait_for(lambda r: template_updates(r, TemplateCategoryUpdate))
    (moved,) = template_updates(receiver, TemplateCategoryUpdate)
    assert (moved.previous_category, moved.category) == ("UTILITY", "MARKETING")
    scores = [(u.previous_quality_score, u.quality_score) for u in template_updates(receiver, TemplateQualityUpdate)]
    assert scores == [("UNKNOWN", "YELLOW"), ("YELLOW", "RED")]
    unknown = requests.post(f"{control}/pause", json={"name": "nope", "language": "es"}, timeout=5)
    assert unknown.status_code == 404
