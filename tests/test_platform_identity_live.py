"""End to end (gunicorn, a huey consumer and `svcctl sim` as processes): a coexistence number
connected through onboarding receives the business app's contacts and history, so a customer
who wrote to the app an hour before can be answered at once; a username user without a phone
writes in and is answered by business-scoped id; a campaign recipient given by that id is sent
once; a debtor who replies from a username account is matched to their debt."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from messaging.simulator.users import business_app_contacts, user_id_for
from models.events.tables import Event
from models.numbers.tables import MessagingAccount
from models.receivables.inputs import DebtInput, debt_spec
from models.receivables.snapshots import upsert_debt
from tests.conftest import Persona
from tests.live import LiveService, wait_until
from tests.live_fixtures import *  # noqa: F403
from tests.receivables_fixtures import debt_body

pytestmark = pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
HIDDEN = "MX.4455667788990017"  # ends in 7: a username user who never shared a phone


def api(service: LiveService, persona: Persona, method: str, path: str, headers: dict | None = None, **kwargs):
    return requests.request(method, f"{service.api_url}/api/v1{path}", headers={**persona.headers, **(headers or {})},
                            timeout=30, **kwargs)


def connect(service: LiveService, persona: Persona) -> MessagingAccount:
    link = api(service, persona, "POST", "/accounts/coexistence-link",
               json={"redirect_url": "https://example.com/done"})
    assert link.status_code == 201, link.text
    attempt_id = link.json()["data"]["attempt_id"]
    done = requests.post(f"{service.api_url}/onboarding/{attempt_id}/simulate", allow_redirects=False, timeout=30)
    params = parse_qs(urlsplit(done.headers["Location"]).query)
    assert params["success"] == ["true"], params
    return MessagingAccount.get(MessagingAccount.public_id == params["account_id"][0])


def inbound_events(persona: Persona) -> list[dict]:
    return [e.payload for e in Event.select().where((Event.tenant == persona.id)
                                                   & (Event.name == "message.inbound.created")).order_by(Event.id)]


def sent_to(service: LiveService, key: str) -> list[dict]:
    sent = requests.get(f"{service.sim_url}/_sim/sent", timeout=5).json()["data"]
    return [item for item in sent if key in (item["to"], item.get("recipient"))]


def test_coexistence_sync_and_users_by_business_scoped_id_end_to_end(live_service, storage):
    alice = Persona("Alice Identity", credits=100)
    account = connect(live_service, alice)

    # 1. The sync: contacts and history arrive; the customer who wrote an hour ago is answered at once.
    def synced():
        row = MessagingAccount.get_by_id(account.id)
        done = (row.contacts_imported, row.history_threads, row.history_progress) == (3, 2, 100)
        return row if done else None
    wait_until(synced, timeout=30, message="the coexistence sync")
    wrote_an_hour_ago = business_app_contacts(account.phone_id)[0][0]
    reply = api(live_service, alice, "POST", "/messages", headers={"Prefer": "wait=5"},
                json={"account_id": account.public_id, "to": wrote_an_hour_ago, "type": "text",
                      "text": {"body": "Hola, son 10.00"}})
    assert reply.status_code == 201, reply.text
    # Imported messages are history: nothing was reported or sent because of them.
    assert inbound_events(alice) == []
    assert len(sent_to(live_service, wrote_an_hour_ago)) == 1

    # 2. A username user without a phone writes in and gets a single message back.
    requests.post(f"{live_service.sim_url}/_sim/inbound",
                  json={"user_id": HIDDEN, "to": account.phone_id, "text": "hola"}, timeout=5).raise_for_status()
    [hello] = wait_until(lambda: inbound_events(alice) or None, message="the inbound event")
    assert hello["from"] == HIDDEN and hello["user_id"] == HIDDEN and hello["username"]
    answer = api(live_service, alice, "POST", "/messages", headers={"Prefer": "wait=5"},
                 json={"account_id": account.public_id, "to": HIDDEN, "type": "text", "text": {"body": "hola!"}})
    assert answer.status_code == 201, answer.text

    # 3. A campaign recipient given by business-scoped id (twice, deduplicated) is sent once.
    campaign = api(live_service, alice, "POST", "/campaigns", json={
        "account_id": account.public_id, "template_name": "hello_world", "dedupe": True,
        "recipients": [{"user_id": HIDDEN}, {"user_id": HIDDEN}]})
    assert campaign.status_code == 201, campaign.text
    campaign_id = campaign.json()["data"]["id"]
    wait_until(lambda: api(live_service, alice, "GET", f"/campaigns/{campaign_id}").json()["data"]["status"]
               == "completed", message="the campaign")
    assert [item["type"] for item in sent_to(live_service, HIDDEN)] == ["text", "template"]

    # 4. A debtor known by phone: the reminder's status links the phone to the user's id; when
    #    they reply from a username account (no phone), the reply names their debt.
    debtor_phone = "5215557770011"
    upsert_debt(alice.id, debt_spec(DebtInput.model_validate(
        debt_body(account.public_id, "D-77", deudor={"nombre": "Pat", "telefono": debtor_phone}))))
    reminder = api(live_service, alice, "POST", "/campaigns", json={
        "account_id": account.public_id, "template_name": "hello_world", "recipients": [{"wa_id": debtor_phone}]})
    assert reminder.status_code == 201, reminder.text
    wait_until(lambda: api(live_service, alice, "GET", f"/campaigns/{reminder.json()['data']['id']}")
               .json()["data"]["read"] == 1, message="the reminder's statuses")
    requests.post(f"{live_service.sim_url}/_sim/inbound",
                  json={"user_id": user_id_for(debtor_phone), "to": account.phone_id, "text": "ya pagué"},
                  timeout=5).raise_for_status()
    reply_event = wait_until(lambda: next((e for e in inbound_events(alice) if e["body"] == "ya pagué"), None),
                             message="the debtor's reply")
    assert reply_event["from"] == debtor_phone and reply_event["debt_external_ids"] == ["D-77"]
