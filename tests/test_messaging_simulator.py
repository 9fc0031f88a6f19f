"""The platform simulator over real HTTP: recipient behaviours, the per-number cap, signed
webhooks (batched, duplicated, retried), control endpoints and the `svcctl sim` commands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import fields
from datetime import datetime

import pytest
import requests
from typer.testing import CliRunner

from config.settings import Settings
from messaging.client import GRAPH_VERSION, GraphClient
from messaging.errors import PermanentPlatformError, ThrottledError
from messaging.payloads import template_message, text_message
from messaging.simulator.graph import SERVED_GRAPH_VERSIONS
from messaging.simulator.records import DEFAULT_WABA_ID
from messaging.simulator.server import Simulator
from messaging.testing import WebhookReceiver
from messaging.webhooks import (
    EchoMessage,
    InboundMessage,
    PhoneQualityUpdate,
    StatusUpdate,
    TemplateStatusUpdate,
    verify_signature,
)
from svcctl.sim import app as sim_cli
from tests.live import ROOT, free_port, wait_until

SECRET = "sim-app-secret"


@pytest.fixture
def receiver():
    endpoint = WebhookReceiver().start()
    yield endpoint
    endpoint.stop()


def start_simulator(receiver: WebhookReceiver | None = None, **options) -> Simulator:
    options = {"duplicate_rate": 0.0, "delivered_delay": 0.02, "read_delay": 0.04, "flush_interval": 0.02,
               **options}
    sim = Simulator(webhook_url=receiver.url if receiver else None, app_secret=SECRET, **options)
    sim.start()
    return sim


@pytest.fixture
def sim(receiver):
    simulator = start_simulator(receiver)
    yield simulator
    simulator.stop()


@pytest.fixture
def graph(sim):
    with GraphClient(sim.base_url, app_id="app", app_secret=SECRET, timeout=(1, 2)) as client:
        yield client


def onboard(sim: Simulator, graph: GraphClient) -> tuple[str, str]:
    signup = sim.signup()
    return signup["phone_number_id"], graph.exchange_code(signup["code"])


def recipient(n: int) -> dict:
    """A text message to the n-th ordinary recipient (no special suffix)."""
    return text_message(f"5215551{n:04d}1", "hi")


def statuses(receiver: WebhookReceiver) -> list[StatusUpdate]:
    return [update for update in receiver.updates() if isinstance(update, StatusUpdate)]


# Recipient behaviours


def test_an_ordinary_recipient_gets_delivered_then_read_webhooks(sim, graph, receiver):
    number_id, token = onboard(sim, graph)

    wamid = graph.send_message(number_id, token, text_message("5215551234567", "hi", callback_data="rcp_1"))

    receiver.wait_for(lambda r: len(statuses(r)) == 2)
    updates = statuses(receiver)
    assert {u.status for u in updates} == {"delivered", "read"}
    assert all(u.wamid == wamid and u.callback_data == "rcp_1" for u in updates)
    assert all(u.phone_number_id == number_id and u.recipient_id == "5215551234567" for u in updates)
    assert all(verify_signature(post.signature, post.body, SECRET) for post in receiver.posts)


def test_the_delivered_status_carries_conversation_and_pricing(sim, graph, receiver):
    number_id, token = onboard(sim, graph)
    graph.send_message(number_id, token, template_message("5215551234567", "hello_world", "en_US"))

    receiver.wait_for(lambda r: len(statuses(r)) == 2)
    raw = [status for post in receiver.posts
           for change in post.json()["entry"][0]["changes"] for status in change["value"]["statuses"]]
    delivered = next(item for item in raw if item["status"] == "delivered")
    assert delivered["pricing"] == {"billable": True, "pricing_model": "PMP", "type": "regular",
                                    "category": "utility"}
    assert delivered["conversation"]["origin"] == {"type": "utility"}


def test_a_recipient_ending_in_0000_is_rejected_at_send(sim, graph):
    number_id, token = onboard(sim, graph)

    with pytest.raises(PermanentPlatformError) as raised:
        graph.send_message(number_id, token, text_message("5215550000", "hi"))

    assert raised.value.code == 131026
    assert sim.sent() == []


def test_a_recipient_ending_in_0429_is_throttled_on_the_first_attempt_only(sim, graph):
    number_id, token = onboard(sim, graph)

    with pytest.raises(ThrottledError) as raised:
        graph.send_message(number_id, token, text_message("5215550429", "hi"))
    assert raised.value.code == 130429
    assert raised.value.http_status == 400

    assert graph.send_message(number_id, token, text_message("5215550429", "hi"))
    assert graph.send_message(number_id, token, text_message("5215550429", "hi"))
    assert len(sim.sent()) == 2


def test_a_recipient_ending_in_9999_is_accepted_then_fails(sim, graph, receiver):
    number_id, token = onboard(sim, graph)

    wamid = graph.send_message(number_id, token, text_message("5215559999", "hi", callback_data="cb9"))

    receiver.wait_for(lambda r: len(statuses(r)) >= 1)
    [failed] = statuses(receiver)
    assert (failed.wamid, failed.status, failed.callback_data) == (wamid, "failed", "cb9")
    assert failed.errors[0]["code"] == 131026
    assert [item["wamid"] for item in sim.sent()] == [wamid]


# The per-number cap


def burst(graph: GraphClient, number_id: str, token: str, count: int) -> tuple[int, int]:
    accepted = throttled = 0
    for n in range(count):
        try:
            graph.send_message(number_id, token, recipient(n))
            accepted += 1
        except ThrottledError as error:
            assert error.code == 130429
            throttled += 1
    return accepted, throttled


def sent_times(sim: Simulator, number_id: str) -> list[float]:
    return sorted(datetime.fromisoformat(item["at"]).timestamp() for item in sim.sent()
                  if item["phone_number_id"] == number_id)


def most_in_one_second(times: list[float]) -> int:
    most, start = 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def test_a_burst_beyond_20_per_second_is_throttled(sim, graph):
    number_id, token = onboard(sim, graph)

    accepted, throttled = burst(graph, number_id, token, 40)

    # The cap is held in every one-second window: no second's worth banked on top of the rate.
    assert accepted >= 20 and throttled == 40 - accepted
    assert most_in_one_second(sent_times(sim, number_id)) == 20
    assert requests.get(f"{sim.base_url}/_sim/health", timeout=2).json()["throttled"] == throttled


def test_the_cap_holds_in_a_sliding_window_not_per_calendar_second(sim, graph):
    number_id, token = onboard(sim, graph)
    sim.set_number(number_id, mps=5)
    assert burst(graph, number_id, token, 5) == (5, 0)

    # The sixth goes through only once the first send is a full second old.
    refused = 0
    while True:
        try:
            graph.send_message(number_id, token, recipient(99))
            break
        except ThrottledError:
            refused += 1
            time.sleep(0.02)
    times = sent_times(sim, number_id)
    assert refused > 0 and len(times) == 6
    assert times[5] - times[0] >= 0.99


def test_the_cap_is_per_number_and_can_be_changed(sim, graph):
    slow_id, slow_token = onboard(sim, graph)
    other_id, other_token = onboard(sim, graph)
    response = requests.post(f"{sim.base_url}/_sim/numbers/{slow_id}", json={"mps": 5}, timeout=2)
    assert response.status_code == 200 and response.json()["mps"] == 5

    slow_accepted, _ = burst(graph, slow_id, slow_token, 10)
    other_accepted, _ = burst(graph, other_id, other_token, 10)

    assert 5 <= slow_accepted <= 6
    assert other_accepted == 10


def test_the_default_cap_comes_from_mps():
    sim = start_simulator(mps=3)
    try:
        graph = GraphClient(sim.base_url, app_id="app", app_secret=SECRET)
        accepted, throttled = burst(graph, *onboard(sim, graph), 6)
    finally:
        sim.stop()
    assert accepted == 3 and throttled == 3


# Webhook delivery


def test_status_webhooks_are_batched(sim, graph, receiver):
    number_id, token = onboard(sim, graph)
    sim.set_number(number_id, mps=1000)

    wamids = {graph.send_message(number_id, token, recipient(n)) for n in range(30)}

    receiver.wait_for(lambda r: len(statuses(r)) == 60)
    assert {u.wamid for u in statuses(receiver)} == wamids
    assert len(receiver.posts) < 60


def test_every_batch_can_arrive_twice(receiver):
    sim = start_simulator(receiver, duplicate_rate=1.0)
    try:
        graph = GraphClient(sim.base_url, app_id="app", app_secret=SECRET)
        number_id, token = onboard(sim, graph)
        for n in range(5):
            graph.send_message(number_id, token, recipient(n))
        receiver.wait_for(lambda r: len(statuses(r)) == 20)
    finally:
        sim.stop()

    bodies = Counter(post.body for post in receiver.posts)
    assert set(bodies.values()) == {2}
    assert Counter((u.wamid, u.status) for u in statuses(receiver)).most_common(1)[0][1] == 2


def test_shuffled_delivery_still_delivers_everything(receiver):
    sim = start_simulator(receiver, shuffle=True, seed=7)
    try:
        graph = GraphClient(sim.base_url, app_id="app", app_secret=SECRET)
        number_id, token = onboard(sim, graph)
        wamids = {graph.send_message(number_id, token, recipient(n)) for n in range(10)}
        receiver.wait_for(lambda r: len(statuses(r)) == 20)
    finally:
        sim.stop()

    assert {(u.wamid, u.status) for u in statuses(receiver)} == {(w, s) for w in wamids for s in ("delivered", "read")}


def test_a_failed_webhook_post_is_retried():
    receiver = WebhookReceiver(statuses=[500, 503]).start()
    sim = start_simulator(receiver)
    try:
        graph = GraphClient(sim.base_url, app_id="app", app_secret=SECRET)
        number_id, token = onboard(sim, graph)
        sim.configure(read_delay=0.02)  # one batch holding both statuses
        graph.send_message(number_id, token, text_message("5215551234567", "hi"))
        receiver.wait_for(lambda r: len(statuses(r)) == 2, timeout=5)
    finally:
        sim.stop()
        receiver.stop()
    assert receiver.attempts == 3
    assert len(receiver.posts) == 1


def test_without_a_webhook_url_nothing_is_posted(receiver):
    sim = start_simulator(None)
    try:
        graph = GraphClient(sim.base_url, app_id="app", app_secret=SECRET)
        number_id, token = onboard(sim, graph)
        graph.send_message(number_id, token, text_message("5215551234567", "hi"))
        response = requests.post(f"{sim.base_url}/_sim/inbound",
                                 json={"from": "5215551234567", "to": number_id, "text": "hola"}, timeout=2)
    finally:
        sim.stop()

    assert response.status_code == 409
    assert receiver.posts == []


def test_inbound_and_echo_webhooks(sim, graph, receiver):
    number_id, _ = onboard(sim, graph)

    inbound = requests.post(f"{sim.base_url}/_sim/inbound",
                            json={"from": "5215551234567", "to": number_id, "text": "hola"}, timeout=2).json()
    echo = requests.post(f"{sim.base_url}/_sim/echo",
                         json={"from": number_id, "to": "5215551234567", "text": "buenas"}, timeout=2).json()

    assert inbound["webhook_status"] == echo["webhook_status"] == 200
    [message, reply] = receiver.updates()
    assert isinstance(message, InboundMessage)
    assert (message.phone_number_id, message.from_wa_id, message.type, message.body, message.wamid) == (
        number_id, "5215551234567", "text", "hola", inbound["wamid"])
    assert isinstance(reply, EchoMessage)
    assert (reply.phone_number_id, reply.to_wa_id, reply.body, reply.wamid) == (
        number_id, "5215551234567", "buenas", echo["wamid"])
    assert receiver.posts[0].json()["entry"][0]["changes"][0]["value"]["contacts"][0]["wa_id"] == "5215551234567"
    assert all(verify_signature(post.signature, post.body, SECRET) for post in receiver.posts)


def test_inbound_to_an_unknown_number_is_404(sim):
    response = requests.post(f"{sim.base_url}/_sim/inbound", json={"from": "1", "to": "404", "text": "x"}, timeout=2)

    assert response.status_code == 404
    assert "unknown phone number" in response.json()["error"]["message"]


def test_quality_and_tier_changes_are_notified(sim, graph, receiver):
    number_id, _ = onboard(sim, graph)

    sim.set_number(number_id, quality_rating="RED")
    sim.set_number(number_id, messaging_limit_tier="TIER_10K")

    receiver.wait_for(lambda r: len(r.updates()) == 2)
    flagged, upgraded = receiver.updates()
    assert isinstance(flagged, PhoneQualityUpdate) and flagged.event == "FLAGGED"
    assert flagged.waba_id == DEFAULT_WABA_ID
    assert isinstance(upgraded, PhoneQualityUpdate) and upgraded.event == "UPGRADE"
    assert upgraded.current_limit == "TIER_10K"


def test_a_template_status_change_is_notified_and_listed(sim, graph, receiver):
    _, token = onboard(sim, graph)

    response = requests.post(f"{sim.base_url}/_sim/templates",
                             json={"name": "promo_pending", "language": "en_US", "status": "APPROVED"}, timeout=2)

    assert response.status_code == 200
    receiver.wait_for(lambda r: len(r.updates()) == 1)
    [update] = receiver.updates()
    assert isinstance(update, TemplateStatusUpdate)
    assert (update.name, update.language, update.status) == ("promo_pending", "en_US", "APPROVED")
    listed = {t["name"]: t["status"] for t in graph.list_templates(DEFAULT_WABA_ID, token)}
    assert listed["promo_pending"] == "APPROVED"



# Template buttons

PAY_BUTTONS = [{"type": "URL", "text": "Pay now", "url": "https://pay.example.com/pay/{{1}}"},
               {"type": "QUICK_REPLY", "text": "Already paid"},
               {"type": "URL", "text": "Terms", "url": "https://pay.example.com/terms"}]


def buttons_template(sim: Simulator) -> None:
    response = requests.post(f"{sim.base_url}/_sim/templates", timeout=2, json={
        "name": "pay_buttons", "language": "es", "body": "Hola {{1}}", "buttons": PAY_BUTTONS})
    assert response.status_code == 200, response.text


def test_a_template_declares_buttons_and_lists_them_in_the_graph_shape(sim, graph):
    _, token = onboard(sim, graph)
    buttons_template(sim)

    [listed] = [t for t in graph.list_templates(DEFAULT_WABA_ID, token) if t["name"] == "pay_buttons"]
    [buttons] = [c["buttons"] for c in listed["components"] if c["type"] == "BUTTONS"]
    assert [(b["type"], b["text"], b.get("url")) for b in buttons] == [
        ("URL", "Pay now", "https://pay.example.com/pay/{{1}}"), ("QUICK_REPLY", "Already paid", None),
        ("URL", "Terms", "https://pay.example.com/terms")]
    assert buttons[0]["example"] == ["https://pay.example.com/pay/example"]


def test_a_send_with_the_button_parameters_is_accepted_and_kept_with_them(sim, graph):
    number_id, token = onboard(sim, graph)
    buttons_template(sim)

    graph.send_message(number_id, token, template_message(
        "5215551234567", "pay_buttons", "es", ["Ana"],
        buttons=[{"index": 0, "type": "url", "text": "plk_abc"}, {"index": 1, "type": "quick_reply",
                                                                  "payload": "PAID"}]))
    graph.send_message(number_id, token, template_message(  # a quick-reply payload is optional
        "5215551234568", "pay_buttons", "es", ["Bea"], buttons=[{"index": 0, "type": "url", "text": "plk_def"}]))

    first, second = sim.sent()
    assert [c for c in first["components"] if c["type"] == "button"] == [
        {"type": "button", "sub_type": "url", "index": "0", "parameters": [{"type": "text", "text": "plk_abc"}]},
        {"type": "button", "sub_type": "quick_reply", "index": "1",
         "parameters": [{"type": "payload", "payload": "PAID"}]}]
    over_http = requests.get(f"{sim.base_url}/_sim/sent", timeout=2).json()["data"]
    assert over_http[1]["components"][-1]["parameters"] == [{"type": "text", "text": "plk_def"}] == \
        second["components"][-1]["parameters"]


@pytest.mark.parametrize(("buttons", "code", "detail"), [
    ([], 132000, "button at index 0: number of localizable_params (0) does not match the expected number of "
                 "params (1)"),
    ([{"index": 0, "type": "quick_reply", "payload": "X"}], 132018, "a URL button takes a text parameter"),
    ([{"index": 0, "type": "url", "text": "a"}, {"index": 1, "type": "url", "text": "b"}], 132018,
     "a quick-reply button takes a payload parameter"),
    ([{"index": 0, "type": "url", "text": "a"}, {"index": 2, "type": "url", "text": "b"}], 132000,
     "button at index 2: number of localizable_params (1) does not match the expected number of params (0)"),
    ([{"index": 0, "type": "url", "text": "a"}, {"index": 3, "type": "url", "text": "b"}], 132018,
     "the template has no such button"),
    ([{"index": 0, "type": "url", "text": "x" * 2000}], 132018, "the URL is longer than 2000"),
])
def test_button_parameters_that_do_not_match_are_refused_with_the_platforms_error(sim, graph, buttons, code,
                                                                                  detail):
    number_id, token = onboard(sim, graph)
    buttons_template(sim)

    with pytest.raises(PermanentPlatformError) as raised:
        graph.send_message(number_id, token, template_message("5215551234567", "pay_buttons", "es", ["Ana"],
                                                              buttons=buttons))

    assert raised.value.code == code
    assert detail in raised.value.details["error_data"]["details"]
    assert sim.sent() == []


def test_button_parameters_for_a_template_without_buttons_are_refused(sim, graph):
    number_id, token = onboard(sim, graph)

    with pytest.raises(PermanentPlatformError) as raised:
        graph.send_message(number_id, token, template_message(
            "5215551234567", "payment_reminder", "es", ["A", "B"], buttons=[{"index": 0, "type": "url",
                                                                              "text": "x"}]))

    assert raised.value.code == 132018


def test_an_existing_template_is_edited_with_new_components(sim, graph):
    number_id, token = onboard(sim, graph)
    requests.post(f"{sim.base_url}/_sim/templates", timeout=2, json={
        "name": "pay_buttons", "language": "es", "body": "Hola {{1}}, paga: {{2}}"}).raise_for_status()
    buttons_template(sim)  # the same name again: body and buttons replaced

    graph.send_message(number_id, token, template_message("5215551234567", "pay_buttons", "es", ["Ana"],
                                                          buttons=[{"index": 0, "type": "url", "text": "p"}]))
    assert len(sim.sent()) == 1


def test_a_quick_reply_press_answers_the_template_message_with_its_payload(sim, graph, receiver):
    number_id, token = onboard(sim, graph)
    buttons_template(sim)
    given = graph.send_message(number_id, token, template_message(
        "5215551234567", "pay_buttons", "es", ["Ana"],
        buttons=[{"index": 0, "type": "url", "text": "a"}, {"index": 1, "type": "quick_reply", "payload": "PAID"}]))
    bare = graph.send_message(number_id, token, template_message(
        "5215551234568", "pay_buttons", "es", ["Bea"], buttons=[{"index": 0, "type": "url", "text": "b"}]))

    for wamid in (given, bare):
        response = requests.post(f"{sim.base_url}/_sim/press", json={"wamid": wamid, "index": 1}, timeout=2)
        assert response.status_code == 200, response.text

    receiver.wait_for(lambda r: len([u for u in r.updates() if isinstance(u, InboundMessage)]) == 2)
    first, second = [u for u in receiver.updates() if isinstance(u, InboundMessage)]
    assert (first.type, first.payload, first.body, first.context_wamid, first.from_wa_id) == (
        "button", "PAID", "Already paid", given, "5215551234567")
    assert (second.payload, second.context_wamid) == ("Already paid", bare)


@pytest.mark.parametrize(("body", "status"), [
    ({"wamid": "wamid.nobody", "index": 1}, 404),  # no such send
    ({"index": 0}, 400),  # a URL button
    ({"index": 3}, 400),  # no such button
    ({"index": "1"}, 400),
])
def test_a_press_of_something_not_pressable_is_refused(sim, graph, body, status):
    number_id, token = onboard(sim, graph)
    buttons_template(sim)
    sent = graph.send_message(number_id, token, template_message("5215551234567", "pay_buttons", "es", ["Ana"],
                                                                 buttons=[{"index": 0, "type": "url", "text": "a"}]))
    body = {"wamid": sent, **body}

    response = requests.post(f"{sim.base_url}/_sim/press", json=body, timeout=2)

    assert response.status_code == status and response.json()["error"]["message"]


@pytest.mark.parametrize("buttons", [
    [], [{"type": "PHONE_NUMBER", "text": "Call"}], [{"type": "URL", "text": "Go", "url": "ftp://x/{{1}}"}],
    [{"type": "URL", "text": "Go", "url": "https://x/{{1}}/more"}], [{"type": "QUICK_REPLY", "text": "x" * 26}],
    [{"type": "QUICK_REPLY", "text": "ok"}] * 11, "URL",
])
def test_bad_template_buttons_are_400(sim, buttons):
    response = requests.post(f"{sim.base_url}/_sim/templates", timeout=2, json={
        "name": "bad_buttons", "language": "es", "body": "Hola", "buttons": buttons})

    assert response.status_code == 400 and response.json()["error"]["message"]


# Control endpoints


def test_sent_lists_accepted_sends_and_can_be_cleared(sim, graph):
    number_id, token = onboard(sim, graph)
    graph.send_message(number_id, token, template_message("5215551234567", "payment_reminder", "es", ["A", "B"],
                                                          callback_data="rcp_9"))

    [item] = requests.get(f"{sim.base_url}/_sim/sent", timeout=2).json()["data"]
    assert {"to", "type", "template", "biz_opaque_callback_data", "wamid", "phone_number_id", "at"} <= set(item)
    assert (item["to"], item["type"], item["template"], item["biz_opaque_callback_data"]) == (
        "5215551234567", "template", "payment_reminder", "rcp_9")

    assert requests.delete(f"{sim.base_url}/_sim/sent", timeout=2).status_code == 200
    assert sim.sent() == []


def test_reset_forgets_numbers_sends_and_template_changes(sim, graph):
    number_id, token = onboard(sim, graph)
    graph.send_message(number_id, token, recipient(1))
    sim.set_template("promo_pending", "en_US", status="APPROVED")

    assert requests.post(f"{sim.base_url}/_sim/reset", timeout=2).json() == {"reset": True}

    assert sim.numbers() == [] and sim.sent() == []
    with pytest.raises(PermanentPlatformError) as raised:
        graph.send_message(number_id, token, recipient(2))
    assert raised.value.code == 190
    fresh_id, fresh_token = onboard(sim, graph)
    assert fresh_id != number_id  # ids never come back
    listed = {t["name"]: t["status"] for t in graph.list_templates(DEFAULT_WABA_ID, fresh_token)}
    assert listed["promo_pending"] == "PENDING"


def test_signup_over_http_and_health(sim):
    signup = requests.post(f"{sim.base_url}/_sim/signup", json={}, timeout=2).json()

    assert set(signup) == {"code", "waba_id", "phone_number_id", "display_phone_number"}
    assert signup["waba_id"] == DEFAULT_WABA_ID
    health = requests.get(f"{sim.base_url}/_sim/health", timeout=2).json()
    assert health["status"] == "ok" and health["numbers"] == 1


def template_page(sim: Simulator, version: str, token: str) -> requests.Response:
    return requests.get(f"{sim.base_url}/{version}/{DEFAULT_WABA_ID}/message_templates", params={"limit": 1},
                        headers={"Authorization": f"Bearer {token}"}, timeout=2)


def test_the_graph_versions_the_platform_serves_answer_as_themselves(sim):
    signup = sim.signup()
    token = GraphClient(sim.base_url, app_id="app", app_secret=SECRET).exchange_code(signup["code"])
    for version in ("v21.0", "v23.0", "v26.0"):
        client = GraphClient(sim.base_url, version=version, app_id="app", app_secret=SECRET)
        assert client.get_phone_number(signup["phone_number_id"], token)["id"] == signup["phone_number_id"]
        # The cursor's next page names the version that answered.
        assert template_page(sim, version, token).json()["paging"]["next"].startswith(f"{sim.base_url}/{version}/")


def test_a_retired_graph_version_is_answered_by_the_oldest_served_one(sim):
    signup = sim.signup()
    token = GraphClient(sim.base_url, app_id="app", app_secret=SECRET).exchange_code(signup["code"])
    # v19.0 was served until 2026-05-21 and v20.0 until 2026-09-24: Graph answers them as v21.0.
    for retired in ("v19.0", "v20.0"):
        page = template_page(sim, retired, token)
        assert page.status_code == 200
        assert page.json()["paging"]["next"].startswith(f"{sim.base_url}/{SERVED_GRAPH_VERSIONS[0]}/")
    assert SERVED_GRAPH_VERSIONS[0] == "v21.0"


@pytest.mark.parametrize("version", ["v27.0", "v2.80", "v99.0", "v26.1"])
def test_a_graph_version_never_released_is_an_unknown_path(sim, version):
    signup = sim.signup()
    token = GraphClient(sim.base_url, app_id="app", app_secret=SECRET).exchange_code(signup["code"])

    response = template_page(sim, version, token)

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("OAuthException", 2500)
    assert error["message"] == f"Unknown path components: /{version}/{DEFAULT_WABA_ID}/message_templates"
    with pytest.raises(PermanentPlatformError):
        GraphClient(sim.base_url, version=version).get_phone_number(signup["phone_number_id"], token)


def test_the_service_speaks_a_version_the_platform_serves():
    assert GRAPH_VERSION in SERVED_GRAPH_VERSIONS
    assert {field.name: field.default for field in fields(Settings)}["graph_version"] == GRAPH_VERSION


def test_unknown_paths_answer_a_graph_error(sim):
    response = requests.get(f"{sim.base_url}/nope", timeout=2)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == 2500


@pytest.mark.parametrize("body", [{"mode": "sideways"}, {"mode": "500", "seconds": "soon"}, {}])
def test_bad_control_requests_are_400(sim, body):
    response = requests.post(f"{sim.base_url}/_sim/fail", json=body, timeout=2)

    assert response.status_code == 400
    assert response.json()["error"]["message"]


def test_keep_alive_and_chunked_bodies(sim):
    session = requests.Session()
    signup = session.post(f"{sim.base_url}/_sim/signup", data=iter([b"{", b"}"]), timeout=2)  # chunked
    assert signup.status_code == 200
    for _ in range(3):
        assert session.get(f"{sim.base_url}/_sim/health", timeout=2).status_code == 200


# svcctl sim


def test_cli_inbound_posts_the_webhook(sim, graph, receiver):
    number_id, _ = onboard(sim, graph)

    result = CliRunner().invoke(sim_cli, ["inbound", "--from", "5215551234567", "--to", number_id,
                                          "--text", "hola", "--sim-url", sim.base_url, "--json"])

    assert result.exit_code == 0, result.output
    assert '"webhook_status": 200' in result.stdout
    [message] = receiver.updates()
    assert isinstance(message, InboundMessage) and message.body == "hola"


def test_cli_echo_posts_the_webhook(sim, graph, receiver):
    number_id, _ = onboard(sim, graph)

    result = CliRunner().invoke(sim_cli, ["echo", "--from", number_id, "--to", "5215551234567",
                                          "--text", "ok", "--sim-url", sim.base_url])

    assert result.exit_code == 0, result.output
    assert "echo from" in result.stdout
    [reply] = receiver.updates()
    assert isinstance(reply, EchoMessage) and reply.body == "ok"


def test_cli_errors_are_one_line_on_stderr(sim):
    result = CliRunner().invoke(sim_cli, ["inbound", "--from", "1", "--to", "404", "--text", "x",
                                          "--sim-url", sim.base_url])

    assert result.exit_code == 1
    assert result.stderr.strip().count("\n") == 0
    assert "404" in result.stderr and "unknown phone number" in result.stderr


def test_cli_reports_an_unreachable_simulator():
    result = CliRunner().invoke(sim_cli, ["echo", "--from", "1", "--to", "2", "--text", "x",
                                          "--sim-url", "http://127.0.0.1:9"])

    assert result.exit_code == 1
    assert "not reachable" in result.stderr


# State across restarts


def sim_process(data_dir, port: int) -> subprocess.Popen:
    env = {**os.environ, "SVC_DATA_DIR": str(data_dir), "SVC_APP_SECRET": SECRET}
    process = subprocess.Popen([sys.executable, "-m", "svcctl.main", "sim", "--bind", f"127.0.0.1:{port}"],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    wait_until(lambda: answers(f"http://127.0.0.1:{port}/_sim/health"), timeout=20, message="the simulator")
    return process


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0


def test_a_restarted_simulator_keeps_its_numbers_tokens_templates_and_sends(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = sim_process(tmp_path, port)
    try:
        graph = GraphClient(url, app_id="app", app_secret=SECRET)
        signup = requests.post(f"{url}/_sim/signup", json={"mps": 80}, timeout=5).json()
        number_id, token = signup["phone_number_id"], graph.exchange_code(signup["code"])
        before = [graph.send_message(number_id, token, recipient(n)) for n in range(3)]
        requests.post(f"{url}/_sim/templates", json={"name": "kept", "language": "es", "body": "Hola"}, timeout=5)
    finally:
        stop(process)

    process = sim_process(tmp_path, port)
    try:
        # The same token still sends: to the service, the restart was an outage, not a disconnect.
        after = graph.send_message(number_id, token, recipient(3))
        sent = requests.get(f"{url}/_sim/sent", timeout=5).json()["data"]
        assert [item["wamid"] for item in sent] == [*before, after]
        [number] = requests.get(f"{url}/_sim/numbers", timeout=5).json()["data"]
        assert (number["id"], number["mps"]) == (number_id, 80) and "token" not in number  # never shown over HTTP
        assert "kept" in {t["name"] for t in graph.list_templates(DEFAULT_WABA_ID, token)}
        with pytest.raises(PermanentPlatformError):
            graph.exchange_code(signup["code"])  # still used up
        assert requests.post(f"{url}/_sim/signup", json={}, timeout=5).json()["phone_number_id"] != number_id
    finally:
        stop(process)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["simulator-sent.jsonl", "simulator.json"]


def test_a_restarted_simulator_keeps_a_number_blocked_until_lifted(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    graph = GraphClient(url, app_id="app", app_secret=SECRET)
    process = sim_process(tmp_path, port)
    try:
        signup = requests.post(f"{url}/_sim/signup", json={}, timeout=5).json()
        number_id, token = signup["phone_number_id"], graph.exchange_code(signup["code"])
        blocked = requests.post(f"{url}/_sim/numbers/{number_id}", json={"blocked": 131042}, timeout=5)
        assert blocked.status_code == 200
    finally:
        stop(process)

    process = sim_process(tmp_path, port)
    try:
        with pytest.raises(PermanentPlatformError) as refused:
            graph.send_message(number_id, token, recipient(1))
        assert refused.value.code == 131042
        assert requests.post(f"{url}/_sim/numbers/{number_id}", json={"blocked": None}, timeout=5).status_code == 200
    finally:
        stop(process)

    process = sim_process(tmp_path, port)
    try:
        assert graph.send_message(number_id, token, recipient(2))
        assert [item["to"] for item in requests.get(f"{url}/_sim/sent", timeout=5).json()["data"]] == [
            recipient(2)["to"]]
    finally:
        stop(process)


def test_a_send_record_cut_short_by_a_crash_is_skipped_on_load(tmp_path):
    first = Simulator(data_dir=tmp_path, duplicate_rate=0.0)
    first.start()
    try:
        graph = GraphClient(first.base_url, app_id="app", app_secret=SECRET)
        number_id, token = onboard(first, graph)
        wamids = [graph.send_message(number_id, token, recipient(n)) for n in range(2)]
    finally:
        first.stop()
    with (tmp_path / "simulator-sent.jsonl").open("a") as sent:
        sent.write('{"to": "52155')  # the process died in the middle of a write

    second = Simulator(data_dir=tmp_path)
    assert [item["wamid"] for item in second.sent()] == wamids
    assert [number["id"] for number in second.numbers()] == [number_id]
