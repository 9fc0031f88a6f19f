"""POST /campaigns: validation, the number's and template's checks, credits, and what is stored."""

from __future__ import annotations

import pytest

from models.events.tables import Event
from models.sending.tables import Campaign, CampaignRecipient
from models.tenancy import credits
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import campaign_body, ledger_types, make_number, wallet

sqlite_only = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
URL = "/api/v1/campaigns"


def post(client, persona, body, **kwargs):
    return client.simulate_post(URL, json=body, headers=persona.headers, **kwargs)


def error_of(response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.json["success"] is False
    return response.json["error"]


def test_it_creates_a_queued_campaign_and_dispatches_it(client, alice, number, sim):
    response = post(client, alice, campaign_body(number, ["5215550100001", "5215550100002"],
                                                 external_reference="order-42"))
    assert response.status_code == 201, response.text
    data = response.json["data"]
    assert set(response.json) == {"data"}
    assert data["id"].startswith("cmp_") and len(data["id"]) == 28
    assert {k: data[k] for k in ("status", "account_id", "template_name", "template_language", "external_reference",
                                 "total_recipients", "reserved_credits", "consumed_credits", "released_credits",
                                 "pending", "queued", "sent", "delivered", "read", "failed")} == {
        "status": "queued", "account_id": number.public_id, "template_name": "hello_world",
        "template_language": "en_US", "external_reference": "order-42", "total_recipients": 2,
        "reserved_credits": 2, "consumed_credits": 0, "released_credits": 0,
        "pending": 2, "queued": 0, "sent": 0, "delivered": 0, "read": 0, "failed": 0}
    assert data["created_at"].endswith("Z") and data["started_at"] is None and data["finished_at"] is None
    # The in-process queue dispatched it before the response returned.
    detail = client.simulate_get(f"{URL}/{data['id']}", headers=alice.headers).json["data"]
    assert (detail["status"], detail["sent"], detail["consumed_credits"]) == ("completed", 2, 2)
    assert detail["started_at"] is not None and detail["finished_at"] is not None
    entries = ledger_types(alice.id)
    assert entries[:2] == [("manual_grant", 1000), ("reserve", -2)]
    # A consume per batch the engine recorded: on a loaded machine the two sends may go in two.
    assert {kind for kind, _ in entries[2:]} == {"consume"} and sum(amount for _, amount in entries[2:]) == -2
    sent = [item for item in sim.sent() if item["phone_number_id"] == number.phone_id]
    assert sorted(item["to"] for item in sent) == ["5215550100001", "5215550100002"]
    assert all(item["template"] == "hello_world" and item["language"] == "en_US" for item in sent)


@sqlite_only
def test_campaign_created_carries_the_contract_fields(client, alice, number):
    data = post(client, alice, campaign_body(number, ["5215550100011"], external_reference="ref-1")).json["data"]
    event = Event.get((Event.tenant == alice.id) & (Event.name == "campaign.created"))
    payload = dict(event.payload)
    assert payload.pop("timestamp").endswith("Z")
    assert payload == {"event": "campaign.created", "account_id": number.public_id, "campaign_id": data["id"],
                       "external_reference": "ref-1", "status": "queued", "total_recipients": 1}
    completed = Event.get((Event.tenant == alice.id) & (Event.name == "campaign.completed")).payload
    assert (completed["campaign_id"], completed["status"], completed["total_recipients"]) == (
        data["id"], "completed", 1)


@sqlite_only
def test_wa_ids_are_normalized_to_digits_and_payload_is_kept(client, alice, number):
    body = campaign_body(number, [])
    body["recipients"] = [{"wa_id": "+52 1 (555) 010-0021", "external_contact_id": "c-1",
                           "payload": {"debt": "D-9", "tags": ["a", 1]}}]
    data = post(client, alice, body).json["data"]
    recipient = client.simulate_get(f"{URL}/{data['id']}/recipients", headers=alice.headers).json["data"][0]
    assert recipient["wa_id"] == "5215550100021"
    assert recipient["external_contact_id"] == "c-1"
    assert CampaignRecipient.get(CampaignRecipient.public_id == recipient["id"]).payload == {
        "debt": "D-9", "tags": ["a", 1]}


@sqlite_only
def test_dedupe_removes_repeated_wa_ids_and_reserves_only_for_the_rest(client, alice, number):
    numbers = ["5215550100031", "+5215550100031", "5215550100032"]
    kept = post(client, alice, campaign_body(number, numbers, dedupe=True)).json["data"]
    assert (kept["total_recipients"], kept["reserved_credits"]) == (2, 2)
    plain = post(client, alice, campaign_body(number, numbers)).json["data"]
    assert plain["total_recipients"] == 3


@sqlite_only
def test_vars_replace_the_default_placeholders_per_recipient(client, alice, number, sim):
    body = campaign_body(number, [], template="payment_reminder", language="es",
                         body_placeholders=["cliente", "$0"])
    body["recipients"] = [{"wa_id": "5215550100041", "vars": ["Ana", "$10"]},
                          {"wa_id": "5215550100042"},
                          {"wa_id": "5215550100043", "vars": [None, "$30"]}]
    data = post(client, alice, body).json["data"]
    stored = {r.wa_id: r.vars for r in CampaignRecipient.select()
              .join(Campaign).where(Campaign.public_id == data["id"])}
    assert stored == {"5215550100041": ["Ana", "$10"], "5215550100042": ["cliente", "$0"],
                      "5215550100043": ["cliente", "$30"]}
    detail = client.simulate_get(f"{URL}/{data['id']}", headers=alice.headers).json["data"]
    assert detail["sent"] == 3  # the simulator checks the parameter count too


@sqlite_only
def test_template_language_is_accepted_as_an_alias(client, alice, number):
    body = campaign_body(number, ["5215550100051"], template="payment_reminder", template_language="es",
                         body_placeholders=["a", "b"])
    response = post(client, alice, body)
    assert response.status_code == 201, response.text
    assert response.json["data"]["template_language"] == "es"


@sqlite_only
def test_a_variable_count_mismatch_names_the_recipient(client, alice, number):
    body = campaign_body(number, [], template="payment_reminder", language="es")
    body["recipients"] = [{"wa_id": "5215550100061", "vars": ["Ana", "$1"]},
                          {"wa_id": "5215550100062", "vars": ["only one"]}]
    error = error_of(post(client, alice, body), 422)
    assert error["code"] == "variable_count_mismatch"
    assert error["details"]["recipient_index"] == 1
    assert (error["details"]["expected"], error["details"]["given"]) == (2, 1)
    no_vars = campaign_body(number, ["5215550100063"], template="payment_reminder", language="es")
    assert error_of(post(client, alice, no_vars), 422)["details"]["recipient_index"] == 0
    extra = campaign_body(number, [], template="hello_world")
    extra["recipients"] = [{"wa_id": "5215550100064", "vars": ["unexpected"]}]
    assert error_of(post(client, alice, extra), 422)["code"] == "variable_count_mismatch"
    assert Campaign.select().count() == 0
    assert wallet(alice.id).reserved == 0


@sqlite_only
def test_a_media_header_template_needs_its_header_url(client, alice, number, sim):
    base = campaign_body(number, [], template="order_update", body_placeholders=["A-1"])
    base["recipients"] = [{"wa_id": "5215550100071"}]
    missing = error_of(post(client, alice, base), 422)
    assert missing["code"] == "validation_failed" and "header_url" in missing["details"]["errors"]
    wrong = error_of(post(client, alice, {**base, "header_type": "video",
                                          "header_url": "https://cdn.example.test/a.mp4"}), 422)
    assert "header_type" in wrong["details"]["errors"]
    response = post(client, alice, {**base, "header_type": "image", "header_url": "https://cdn.example.test/a.png"})
    assert response.status_code == 201, response.text
    assert client.simulate_get(f"{URL}/{response.json['data']['id']}", headers=alice.headers).json["data"]["sent"] == 1


@sqlite_only
def test_a_header_on_a_template_without_one_is_refused(client, alice, number):
    body = campaign_body(number, ["5215550100081"], header_type="image", header_url="https://cdn.example.test/a.png")
    assert "header_type" in error_of(post(client, alice, body), 422)["details"]["errors"]
    body = campaign_body(number, ["5215550100081"], header_url="https://cdn.example.test/a.png")
    assert "header_url" in error_of(post(client, alice, body), 422)["details"]["errors"]
    none = campaign_body(number, ["5215550100081"], header_type="none")
    assert post(client, alice, none).status_code == 201


@sqlite_only
@pytest.mark.parametrize(("change", "field"), [
    ({"recipients": []}, "recipients"),
    ({"template_name": "x" * 256}, "template_name"),
    ({"account_id": "a" * 65}, "account_id"),
    ({"external_reference": "r" * 161}, "external_reference"),
    ({"language": "l" * 21}, "language"),
    ({"header_type": "audio"}, "header_type"),
    ({"header_url": "ftp://files.example.test/a.png"}, "header_url"),
    ({"header_url": "https://cdn.example.test/" + "a" * 1000}, "header_url"),
    ({"body_placeholders": ["x" * 1001]}, "body_placeholders.0"),
    ({"dedupe": "yes"}, "dedupe"),
    ({"surprise": 1}, "surprise"),
    ({"recipients": [{"wa_id": "5" * 33}]}, "recipients.0.wa_id"),
    ({"recipients": [{"wa_id": "5215550100091", "external_contact_id": "c" * 161}]},
     "recipients.0.external_contact_id"),
    ({"recipients": [{"wa_id": "5215550100091", "vars": ["v" * 1001]}]}, "recipients.0.vars.0"),
    ({"recipients": [{"wa_id": "5215550100091", "payload": ["not", "an", "object"]}]}, "recipients.0.payload"),
    ({"recipients": [{"wa_id": "5215550100091", "extra": True}]}, "recipients.0.extra"),
    ({"recipients": [{"wa_id": "no digits"}]}, "recipients.0.wa_id"),
])
def test_invalid_bodies_get_the_validation_envelope(client, alice, number, change, field):
    error = error_of(post(client, alice, {**campaign_body(number, ["5215550100091"]), **change}), 422)
    assert error["code"] == "validation_failed"
    assert field in error["details"]["errors"], error


@sqlite_only
def test_it_takes_up_to_5000_recipients(client, alice, number):
    credits.grant(alice.id, 5000)
    numbers = [f"52155{n:08d}" for n in range(5001)]
    too_many = error_of(post(client, alice, campaign_body(number, numbers)), 422)
    assert "recipients" in too_many["details"]["errors"]
    # 5000 is accepted; pause the number's dispatch by the queue (not immediate) to keep it short.
    from jobs.queue import huey

    huey.immediate = False
    try:
        response = post(client, alice, campaign_body(number, numbers[:5000]))
    finally:
        huey.immediate = True
    assert response.status_code == 201, response.text
    assert response.json["data"]["total_recipients"] == 5000
    assert CampaignRecipient.select().count() == 5000
    assert len({r.public_id for r in CampaignRecipient.select(CampaignRecipient.public_id)}) == 5000


@sqlite_only
def test_a_body_that_is_not_a_json_object_is_refused(client, alice, number):
    response = client.simulate_post(URL, body=b"[1, 2", headers={**alice.headers, "Content-Type": "application/json"})
    assert error_of(response, 422)["code"] == "validation_failed"


@sqlite_only
def test_a_foreign_or_unknown_number_is_not_found(client, alice, charlie, sim):
    theirs = make_number(charlie.id, sim)
    for account_id in (theirs.public_id, "wacc_doesnotexist000000000000"):
        error = error_of(post(client, alice, {**campaign_body(theirs, ["5215550100101"]), "account_id": account_id}),
                         404)
        assert error["code"] == "account_not_found"
    assert wallet(alice.id).reserved == 0


@sqlite_only
def test_a_paused_or_unfinished_number_is_refused(client, alice, sim):
    paused = make_number(alice.id, sim, status="paused")
    assert error_of(post(client, alice, campaign_body(paused, ["5215550100111"])), 422)["code"] == "account_inactive"
    unready = make_number(alice.id, ready=False)
    assert error_of(post(client, alice, campaign_body(unready, ["5215550100111"])), 422)["code"] == \
        "account_not_ready"
    assert Campaign.select().count() == 0


@sqlite_only
@pytest.mark.parametrize(("template", "language"), [
    ("no_such_template", None), ("promo_pending", None), ("payment_reminder", "en_US")])
def test_a_template_that_is_absent_or_not_approved_is_refused(client, alice, number, template, language):
    body = campaign_body(number, ["5215550100121"], template=template, body_placeholders=["x", "y"])
    if language:
        body["language"] = language
    error = error_of(post(client, alice, body), 422)
    assert error["code"] == "template_not_approved"


def test_insufficient_credits_reserve_nothing(client, alice, number):
    credits.adjust(alice.id, -995)
    error = error_of(post(client, alice, campaign_body(number, [f"52155501001{n:02d}" for n in range(6)])), 422)
    assert error["code"] == "insufficient_credits"
    assert error["details"] == {"required": 6, "available": 5}
    assert Campaign.select().count() == 0 and CampaignRecipient.select().count() == 0
    assert (wallet(alice.id).balance, wallet(alice.id).reserved) == (5, 0)


@sqlite_only
def test_a_paused_wallet_is_refused(client, alice, number):
    credits.set_status(alice.id, "paused")
    assert error_of(post(client, alice, campaign_body(number, ["5215550100131"])), 422)["code"] == "wallet_paused"


@sqlite_only
def test_creating_needs_the_write_scope(client, alice, number):
    headers = alice.with_key(["campaigns:read"])
    response = client.simulate_post(URL, json=campaign_body(number, ["5215550100141"]), headers=headers)
    assert error_of(response, 403)["code"] == "missing_scope"
    response = client.simulate_post(URL, json=campaign_body(number, ["5215550100141"]))
    assert response.status_code == 401


@sqlite_only
def test_creation_is_limited_to_60_a_minute(client, alice, number):
    for _ in range(60):
        assert post(client, alice, {"bad": True}).status_code == 422
    response = post(client, alice, {"bad": True})
    assert response.status_code == 429
    assert response.json["error"]["code"] == "rate_limited" and "Retry-After" in response.headers


@sqlite_only
def test_an_idempotent_retry_creates_one_campaign(client, alice, number):
    headers = {**alice.headers, "Idempotency-Key": "create-1"}
    body = campaign_body(number, ["5215550100151"])
    first = client.simulate_post(URL, json=body, headers=headers)
    again = client.simulate_post(URL, json=body, headers=headers)
    assert first.status_code == again.status_code == 201
    assert first.json == again.json and again.headers["X-Service-Idempotent-Replay"] == "true"
    assert Campaign.select().count() == 1
