"""Campaign recipients with button parameters (an extension of the contract): checked against
the template's buttons as the platform lists them, stored per recipient, and sent as the
template's `button` components by index; what does not fit is a 422, never a send the platform
refuses."""

from __future__ import annotations

import pytest

from models.numbers.templates import sync_templates
from models.sending.campaign_inputs import MAX_PAYLOAD_BYTES
from models.sending.tables import Campaign, CampaignRecipient
from tests.campaigns_fixtures import *  # noqa: F403  (sim, app, client)
from tests.campaigns_fixtures import make_number, wallet

pytestmark = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
URL = "/api/v1/campaigns"
BUTTONS = [{"type": "URL", "text": "Pay now", "url": "https://pay.example.com/pay/{{1}}"},
           {"type": "QUICK_REPLY", "text": "Already paid"},
           {"type": "URL", "text": "Terms", "url": "https://pay.example.com/terms"}]


@pytest.fixture
def buttons_number(sim, alice):
    """Alice's number whose business account has `pay_buttons`, synced from the platform."""
    sim.set_template("pay_buttons", "es", body="Hola {{1}}", buttons=BUTTONS)
    account = make_number(alice.id, sim, templates=[])
    sync_templates(account)
    return account


def body(account, recipients: list[dict], template: str = "pay_buttons") -> dict:
    return {"account_id": account.public_id, "template_name": template, "language": "es", "recipients": recipients}


def test_button_parameters_are_stored_and_sent_by_index(client, alice, buttons_number, sim):
    recipients = [
        {"wa_id": "5215550200001", "vars": ["Ana"], "buttons": [
            {"index": 1, "type": "quick_reply", "payload": "PAID-A"}, {"index": 0, "type": "url", "text": "plk_a"}]},
        {"wa_id": "5215550200002", "vars": ["Bea"], "buttons": [{"index": 0, "type": "url", "text": "plk_b"}]},
    ]
    response = client.simulate_post(URL, json=body(buttons_number, recipients), headers=alice.headers)

    assert response.status_code == 201, response.text
    stored = {r.wa_id: r.buttons for r in CampaignRecipient.select()}
    assert stored == {"5215550200001": [{"index": 0, "type": "url", "text": "plk_a"},
                                        {"index": 1, "type": "quick_reply", "payload": "PAID-A"}],
                      "5215550200002": [{"index": 0, "type": "url", "text": "plk_b"}]}
    listed = client.simulate_get(f"{URL}/{response.json['data']['id']}/recipients", headers=alice.headers).json
    assert {item["wa_id"]: item["buttons"] for item in listed["data"]} == stored
    sent = {item["to"]: [c for c in item["components"] if c["type"] == "button"] for item in sim.sent()}
    assert sent == {
        "5215550200001": [
            {"type": "button", "sub_type": "url", "index": "0", "parameters": [{"type": "text", "text": "plk_a"}]},
            {"type": "button", "sub_type": "quick_reply", "index": "1",
             "parameters": [{"type": "payload", "payload": "PAID-A"}]}],
        "5215550200002": [
            {"type": "button", "sub_type": "url", "index": "0", "parameters": [{"type": "text", "text": "plk_b"}]}],
    }
    assert Campaign.get().status == "completed"


@pytest.mark.parametrize(("buttons", "message"), [
    (None, "the URL button at index 0 needs its suffix"),
    ([{"index": 1, "type": "quick_reply", "payload": "X"}], "the URL button at index 0 needs its suffix"),
    ([{"index": 0, "type": "quick_reply", "payload": "X"}], "the button at index 0 (URL) takes no quick-reply payload"),
    ([{"index": 0, "type": "url", "text": "a"}, {"index": 1, "type": "url", "text": "b"}],
     "the button at index 1 (QUICK_REPLY) takes no URL suffix"),
    ([{"index": 0, "type": "url", "text": "a"}, {"index": 2, "type": "url", "text": "b"}],
     "the button at index 2 (URL) takes no URL suffix"),
    ([{"index": 0, "type": "url", "text": "a"}, {"index": 5, "type": "quick_reply", "payload": "b"}],
     "the template has 3 buttons: there is none at index 5"),
    ([{"index": 0, "type": "url", "text": "x" * 1990}], "its URL would be longer than 2000 characters"),
])
def test_button_parameters_that_do_not_fit_the_template_are_a_422(client, alice, buttons_number, sim, buttons,
                                                                   message):
    good = {"wa_id": "5215550200003", "vars": ["Ana"], "buttons": [{"index": 0, "type": "url", "text": "ok"}]}
    bad = {"wa_id": "5215550200004", "vars": ["Bea"], **({"buttons": buttons} if buttons is not None else {})}
    response = client.simulate_post(URL, json=body(buttons_number, [good, bad]), headers=alice.headers)

    assert response.status_code == 422, response.text
    error = response.json["error"]
    assert error["code"] == "validation_failed" and error["details"]["recipient_index"] == 1
    [text] = error["details"]["errors"]["recipients.1.buttons"]
    assert message in text
    assert Campaign.select().count() == 0 and CampaignRecipient.select().count() == 0
    assert wallet(alice.id).reserved == 0 and sim.sent() == []


def test_button_parameters_for_a_template_without_buttons_are_a_422(client, alice, buttons_number):
    recipient = {"wa_id": "5215550200005", "buttons": [{"index": 0, "type": "url", "text": "x"}]}
    response = client.simulate_post(URL, json=body(buttons_number, [recipient], "hello_world") | {
        "language": "en_US"}, headers=alice.headers)

    assert response.status_code == 422, response.text
    assert response.json["error"]["details"]["errors"]["recipients.0.buttons"] == [
        "the template has 0 buttons: there is none at index 0"]


@pytest.mark.parametrize(("button", "field"), [
    ({"index": 0, "type": "url"}, "recipients.0.buttons.0"),
    ({"index": 0, "type": "url", "text": "a", "payload": "b"}, "recipients.0.buttons.0"),
    ({"index": 0, "type": "quick_reply", "text": "a"}, "recipients.0.buttons.0"),
    ({"index": 0, "type": "copy_code", "text": "a"}, "recipients.0.buttons.0.type"),
    ({"index": 10, "type": "url", "text": "a"}, "recipients.0.buttons.0.index"),
    ({"index": "0", "type": "url", "text": "a"}, "recipients.0.buttons.0.index"),
    ({"index": 0, "type": "url", "text": ""}, "recipients.0.buttons.0.text"),
    ({"index": 0, "type": "url", "text": "x" * 2001}, "recipients.0.buttons.0.text"),
    ({"index": 1, "type": "quick_reply", "payload": "x" * 257}, "recipients.0.buttons.0.payload"),
    ({"index": 0, "type": "url", "text": "a", "color": "red"}, "recipients.0.buttons.0.color"),
])
def test_malformed_button_parameters_get_the_validation_envelope(client, alice, buttons_number, button, field):
    recipient = {"wa_id": "5215550200006", "vars": ["Ana"], "buttons": [button]}
    response = client.simulate_post(URL, json=body(buttons_number, [recipient]), headers=alice.headers)

    assert response.status_code == 422, response.text
    assert field in response.json["error"]["details"]["errors"]


def test_repeated_indexes_and_oversized_buttons_are_refused(client, alice, buttons_number):
    twice = [{"index": 0, "type": "url", "text": "a"}, {"index": 0, "type": "url", "text": "b"}]
    # Every one within its own bound, past 4 KiB together.
    big = [{"index": 0, "type": "url", "text": "x" * 2000}, {"index": 1, "type": "quick_reply", "payload": "y" * 256},
           {"index": 2, "type": "url", "text": "z" * 2000}]
    for buttons in (twice, big):
        recipient = {"wa_id": "5215550200007", "vars": ["Ana"], "buttons": buttons}
        response = client.simulate_post(URL, json=body(buttons_number, [recipient]), headers=alice.headers)
        assert response.status_code == 422, response.text
        [text] = response.json["error"]["details"]["errors"]["recipients.0.buttons"]
        assert "each button index at most once" in text or f"at most {MAX_PAYLOAD_BYTES} bytes" in text
    assert Campaign.select().count() == 0


def test_the_openapi_document_describes_the_buttons(client):
    document = client.simulate_get("/api/v1/openapi.json").json
    schemas = document["components"]["schemas"]
    recipient = schemas["RecipientInput"]["properties"]
    assert "buttons" in recipient and {"wa_id", "external_contact_id", "vars", "payload"} <= set(recipient)
    button = schemas["ButtonInput"]
    assert set(button["properties"]) == {"index", "type", "text", "payload"}
    assert button["properties"]["type"]["enum"] == ["url", "quick_reply"]
