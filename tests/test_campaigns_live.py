"""End to end over HTTP: gunicorn, a huey consumer and the simulator as real processes.

A 10-recipient campaign runs through every simulator behaviour; a 2000-recipient campaign
survives its worker being killed with SIGKILL mid-dispatch without sending anyone twice.
"""

from __future__ import annotations

import collections
import time

import pytest
import requests

from models.events.tables import Event
from models.sending.tables import Campaign, CampaignRecipient
from models.tenancy import credits
from tests.campaigns_fixtures import TEMPLATES, campaign_body, make_number, sim_signup, template_row
from tests.conftest import Persona
from tests.live import LiveService, wait_until
from tests.live_fixtures import *  # noqa: F403
from tests.openapi_fixtures import assert_documented_event
from tests.test_credits import replay_ledger

pytestmark = pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
MESSAGE_FIELDS = {"event", "account_id", "campaign_id", "recipient", "external_contact_id", "wam_id", "status",
                  "timestamp"}


def live_number(service: LiveService, persona: Persona, mps: int = 20, mode: str = "coexistence",
                templates=TEMPLATES):
    """A number onboarded on the live simulator, stored as onboarding stores it."""
    phone_id, token = sim_signup(service.sim_url, service.env["SVC_APP_SECRET"], mps)
    return make_number(persona.id, mps=mps, connection_mode=mode, phone_id=phone_id, token=token,
                       templates=templates)


def api(service: LiveService, persona: Persona, method: str, path: str, **kwargs):
    return requests.request(method, f"{service.api_url}/api/v1{path}", headers=persona.headers, timeout=30,
                            **kwargs)


def recipients_of(service, persona, campaign_id) -> list[dict]:
    body = api(service, persona, "GET", f"/campaigns/{campaign_id}/recipients", params={"per_page": 200}).json()
    items = body["data"]
    for page in range(2, body["meta"]["last_page"] + 1):
        items += api(service, persona, "GET", f"/campaigns/{campaign_id}/recipients",
                     params={"per_page": 200, "page": page}).json()["data"]
    return items


def test_a_campaign_runs_every_recipient_behaviour_end_to_end(live_service, storage):
    alice = Persona("Alice Live", credits=1000)
    account = live_number(live_service, alice)
    wa_ids = [f"52155512{n:05d}" for n in range(1, 8)] + ["5215551230000", "5215551230429", "5215551239999"]
    response = api(live_service, alice, "POST", "/campaigns", json=campaign_body(account, wa_ids))
    assert response.status_code == 201, response.text
    campaign_id = response.json()["data"]["id"]

    def settled():
        data = api(live_service, alice, "GET", f"/campaigns/{campaign_id}").json()["data"]
        return data if data["status"] == "completed" and data["read"] == 8 and data["failed"] == 2 else None

    data = wait_until(settled, timeout=45, interval=0.3, message="the campaign to settle")
    statuses = {item["wa_id"]: item for item in recipients_of(live_service, alice, campaign_id)}
    assert {wa_id: item["status"] for wa_id, item in statuses.items()} == {
        **{wa_id: "read" for wa_id in wa_ids[:7]}, "5215551230000": "failed", "5215551230429": "read",
        "5215551239999": "failed"}
    assert statuses["5215551230429"]["attempts"] == 2  # throttled once, not counted as a failure
    counted = collections.Counter(item["status"] for item in statuses.values())
    assert {name: data[name] for name in ("pending", "queued", "sent", "delivered", "read", "failed")} == {
        name: counted.get(name, 0) for name in ("pending", "queued", "sent", "delivered", "read", "failed")}
    # 9 reached the platform (consumed), 0000 never did (released), 9999 failed later (refunded).
    assert (data["reserved_credits"], data["consumed_credits"], data["released_credits"],
            data["refunded_credits"]) == (10, 9, 1, 1)
    assert data["reserved_credits"] == data["consumed_credits"] + data["released_credits"]
    wallet = credits.wallet_of(alice.id)
    assert (wallet.balance, wallet.reserved) == (1000 - 9 + 1, 0)
    assert replay_ledger(alice.id) == (wallet.balance, wallet.reserved)
    assert [e.type for e in credits.ledger(alice.id) if e.type == "refund"] == ["refund"]

    sent = requests.get(f"{live_service.sim_url}/_sim/sent", timeout=5).json()["data"]
    mine = [item for item in sent if item["phone_number_id"] == account.phone_id]
    assert sorted(item["to"] for item in mine) == sorted(wa_ids[:7] + ["5215551230429", "5215551239999"])
    assert {item["biz_opaque_callback_data"] for item in mine} == {
        statuses[item["to"]]["id"] for item in mine}

    events = collections.defaultdict(list)
    for event in Event.select().where(Event.tenant == alice.id):
        events[event.name].append(event.payload)
    assert len(events["campaign.created"]) == len(events["campaign.completed"]) == 1
    assert events["campaign.completed"][0]["status"] == "completed"
    assert len(events["message.sent"]) == 9
    assert len(events["message.read"]) == 8
    failed = {payload["recipient"]: payload for payload in events["message.failed"]}
    assert set(failed) == {"5215551230000", "5215551239999"}
    assert failed["5215551230000"]["error"]["code"] == "131026"
    for name in ("message.sent", "message.delivered", "message.read", "message.failed"):
        for payload in events[name]:
            assert set(payload) >= MESSAGE_FIELDS, payload
            assert payload["campaign_id"] == campaign_id and payload["account_id"] == account.public_id


def test_a_worker_killed_mid_campaign_never_sends_anyone_twice(live_service, storage):
    alice = Persona("Alice Crash", credits=5000)
    account = live_number(live_service, alice, mps=250, mode="internal")
    wa_ids = [f"521557{n:06d}7" for n in range(2000)]  # none of the simulator's special endings
    response = api(live_service, alice, "POST", "/campaigns", json=campaign_body(account, wa_ids))
    assert response.status_code == 201, response.text
    campaign_id = response.json()["data"]["id"]
    campaign = Campaign.get(Campaign.public_id == campaign_id)

    def accepted() -> int:
        return CampaignRecipient.select().where((CampaignRecipient.campaign == campaign.id)
                                               & CampaignRecipient.wam_id.is_null(False)).count()

    wait_until(lambda: accepted() >= 400, timeout=30, message="dispatch to be under way")
    live_service.kill("worker")
    killed_at = accepted()
    assert killed_at < 2000, "the kill came too late to test anything"
    time.sleep(0.5)
    live_service.start_worker()

    def finished():
        data = api(live_service, alice, "GET", f"/campaigns/{campaign_id}").json()["data"]
        return data if data["status"] == "completed" and data["sent"] == 0 else None

    data = wait_until(finished, timeout=60, interval=0.5, message="the campaign to complete after the restart")
    sent = requests.get(f"{live_service.sim_url}/_sim/sent", timeout=5).json()["data"]
    mine = [item for item in sent if item["phone_number_id"] == account.phone_id]
    callbacks = collections.Counter(item["biz_opaque_callback_data"] for item in mine)
    assert callbacks and max(callbacks.values()) == 1, "a recipient was sent twice"
    assert len(collections.Counter(item["to"] for item in mine)) == len(mine)

    rows = {row.public_id: row for row in CampaignRecipient.select().where(CampaignRecipient.campaign == campaign.id)}
    reached = {public_id for public_id, row in rows.items() if row.status in ("sent", "delivered", "read")}
    # Everything counted as sent was accepted by the platform. The only accepted sends not counted
    # are those whose status webhook the killed worker was holding: recovery failed them without
    # charging (the intake re-applies that batch later, and the late evidence then charges them).
    assert reached <= set(callbacks)
    for public_id in set(callbacks) - reached:
        assert (rows[public_id].status, rows[public_id].error_code) == ("failed", "send_unconfirmed")
    failed = [row for row in rows.values() if row.status == "failed"]
    assert all(row.error_code == "send_unconfirmed" and row.wam_id is None for row in failed)
    assert len(reached) + len(failed) == 2000
    # The wallet adds up: one credit per recipient counted as sent, the rest released. A recipient
    # recovery failed and late evidence then showed accepted was released, then reserved and
    # consumed again (models/sending/statuses.py, `_affordable_late`): once in each column above 2000.
    assert data["consumed_credits"] == len(reached)
    late = data["reserved_credits"] - 2000
    assert late >= 0
    assert data["reserved_credits"] == data["consumed_credits"] + data["released_credits"]
    assert data["released_credits"] == len(failed) + late
    wallet = credits.wallet_of(alice.id)
    assert (wallet.balance, wallet.reserved) == (5000 - len(reached), 0)
    assert replay_ledger(alice.id) == (wallet.balance, wallet.reserved)


def test_a_campaign_with_button_parameters_sends_them_and_a_mismatch_is_refused(live_service, storage):
    """A template with a "Pay now" URL button (a `{{1}}` suffix) and a quick reply, declared on the
    platform: each recipient's suffix reaches the platform in the button component; recipients
    whose buttons do not fit the template are a 422 at creation, and nothing is sent or reserved.
    A press of the quick reply comes back with its payload and the campaign message it answers."""
    alice = Persona("Alice Buttons", credits=100)
    declared = requests.post(f"{live_service.sim_url}/_sim/templates", timeout=5, json={
        "name": "pay_buttons", "language": "es", "body": "Hola {{1}}", "buttons": [
            {"type": "URL", "text": "Pay now", "url": "https://pay.example.com/pay/{{1}}"},
            {"type": "QUICK_REPLY", "text": "Already paid"}]})
    declared.raise_for_status()
    account = live_number(live_service, alice, templates=[*TEMPLATES, template_row(declared.json())])
    wa_ids = ["5215551240001", "5215551240002", "5215551240003"]
    recipients = [{"wa_id": wa_id, "vars": [f"Cliente {n}"],
                   "buttons": [{"index": 0, "type": "url", "text": f"plk_{n}"}]} for n, wa_id in enumerate(wa_ids)]
    recipients[2]["buttons"].append({"index": 1, "type": "quick_reply", "payload": "PAID-2"})
    body = {"account_id": account.public_id, "template_name": "pay_buttons", "language": "es",
            "recipients": recipients}

    mismatched = {**body, "recipients": [*recipients, {"wa_id": "5215551240004", "vars": ["Sin botón"]}]}
    refused = api(live_service, alice, "POST", "/campaigns", json=mismatched)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "validation_failed"
    assert refused.json()["error"]["details"]["errors"] == {
        "recipients.3.buttons": ["the URL button at index 0 needs its suffix: {index: 0, type: url, text}"]}
    assert credits.wallet_of(alice.id).reserved == 0

    created = api(live_service, alice, "POST", "/campaigns", json=body)
    assert created.status_code == 201, created.text
    campaign_id = created.json()["data"]["id"]

    def accepted() -> bool:
        data = api(live_service, alice, "GET", f"/campaigns/{campaign_id}").json()["data"]
        return data["consumed_credits"] == 3

    wait_until(accepted, timeout=30, message="the three sends")
    sent = requests.get(f"{live_service.sim_url}/_sim/sent", timeout=5).json()["data"]
    buttons = {item["to"]: [(c["sub_type"], c["index"], c["parameters"]) for c in item["components"]
                            if c["type"] == "button"] for item in sent if item["phone_number_id"] == account.phone_id}
    assert buttons == {
        "5215551240001": [("url", "0", [{"type": "text", "text": "plk_0"}])],
        "5215551240002": [("url", "0", [{"type": "text", "text": "plk_1"}])],
        "5215551240003": [("url", "0", [{"type": "text", "text": "plk_2"}]),
                          ("quick_reply", "1", [{"type": "payload", "payload": "PAID-2"}])]}
    listed_rows = recipients_of(live_service, alice, campaign_id)
    listed = {item["wa_id"]: item["buttons"] for item in listed_rows}
    listed_ids = {item["wa_id"]: item["id"] for item in listed_rows}
    assert listed["5215551240003"] == [{"index": 0, "type": "url", "text": "plk_2"},
                                       {"index": 1, "type": "quick_reply", "payload": "PAID-2"}]

    # The third recipient presses "Already paid": the payload the campaign gave it comes back,
    # with the campaign and recipient; the first, whose send gave none, sends the button's text.
    by_wa_id = {item["to"]: item["wamid"] for item in sent}
    for wa_id in ("5215551240003", "5215551240001"):
        pressed = requests.post(f"{live_service.sim_url}/_sim/press", timeout=5,
                                json={"wamid": by_wa_id[wa_id], "index": 1})
        assert pressed.status_code == 200, pressed.text

    def presses() -> list[dict]:
        found = [e.payload for e in Event.select().where(Event.name == "message.inbound.created")]
        return found if len(found) == 2 else []

    by_sender = {item["from"]: item for item in wait_until(presses, timeout=30, message="the presses")}
    for event in by_sender.values():
        assert_documented_event(event)
    third = by_sender["5215551240003"]
    assert (third["type"], third["payload"], third["body"], third["context_wam_id"]) == (
        "button", "PAID-2", "Already paid", by_wa_id["5215551240003"])
    assert (third["campaign_id"], third["recipient_id"]) == (campaign_id, listed_ids["5215551240003"])
    assert by_sender["5215551240001"]["payload"] == "Already paid"
