"""Users by business-scoped id, phone number or both; the coexistence sync webhooks; the error
codes that pause a number; payloads in the platform's documented shapes through our parser."""

from __future__ import annotations

import contextlib
import logging
import time

import pytest

from messaging.simulator.users import user_id_for
from models.clock import utcnow
from models.events.tables import Event
from models.numbers import accounts, platform_users
from models.numbers.platform_users import marketing_opted_out
from models.numbers.tables import BusinessInitiated, ContactWindow, MessagingAccount, PlatformUser
from models.sending.tables import Campaign, CampaignRecipient, Message
from tests.accounts_fixtures import messages_value, notification, signed_post
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import campaign_body, wa

sqlite_only = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
HIDDEN = "MX.1502576394655843"  # a username user who does not share their phone


def inbound(account, wamid: str, *, user_id: str, wa_id: str | None = None, username: str | None = None,
            at: int | None = None, kind: str = "text") -> dict:
    contact = {"profile": {"name": "Ana", **({"username": username} if username else {})}, "user_id": user_id,
               **({"wa_id": wa_id} if wa_id else {})}
    message = {"from_user_id": user_id, "id": wamid, "timestamp": str(at or int(time.time())), "type": kind,
               **({"from": wa_id} if wa_id else {})}
    message.update({"text": {"body": "hola"}} if kind == "text" else
                   {"reaction": {"message_id": "wamid.X", "emoji": "👍"}})
    return notification(account.business_account_id, "messages", messages_value(account, contacts=[contact],
                                                                        messages=[message]))


def events(name: str) -> list[dict]:
    return [e.payload for e in Event.select().where(Event.name == name).order_by(Event.id)]


def test_a_username_user_without_a_phone_writes_and_is_answered_by_business_scoped_id(client, alice, number, sim):
    assert signed_post(client, inbound(number, "wamid.H1", user_id=HIDDEN, username="@ana")).status_code == 200
    [event] = events("message.inbound.created")
    assert (event["from"], event["user_id"], event["username"]) == (HIDDEN, HIDDEN, "@ana")
    assert accounts.window_open(number.id, HIDDEN)

    response = client.simulate_post("/api/v1/messages", headers=alice.headers, json={
        "account_id": number.public_id, "to": HIDDEN, "type": "text", "text": {"body": "Hola Ana"}})
    assert response.status_code == 202, response.text
    assert Message.get(Message.public_id == response.json["data"]["id"]).status == "sent"
    [accepted] = [item for item in sim.sent() if item["recipient"] == HIDDEN]
    assert accepted["to"] == HIDDEN  # no phone number went out
    # The customer's message was marked read, with a typing indicator, as the answer went out.
    assert {"message_id": "wamid.H1", "typing": True}.items() <= sim.reads()[-1].items()


def test_a_reaction_does_not_open_the_window(client, alice, number):
    signed_post(client, inbound(number, "wamid.R1", user_id=HIDDEN, kind="reaction"))
    assert events("message.inbound.created")[0]["type"] == "reaction"
    assert not accounts.window_open(number.id, HIDDEN)


def test_a_user_who_later_hides_their_phone_keeps_their_key(client, alice, number):
    phone = wa()
    user_id = user_id_for(phone)
    signed_post(client, inbound(number, "wamid.P1", user_id=user_id, wa_id=phone))
    # Later the same user writes with a username and no phone: still the same user and window.
    signed_post(client, inbound(number, "wamid.P2", user_id=user_id, username="@pat"))
    assert [e["from"] for e in events("message.inbound.created")] == [phone, phone]
    assert PlatformUser.select().where(PlatformUser.account == number.id).count() == 1
    # Sent by business-scoped id, the message goes to the user's known phone number.
    response = client.simulate_post("/api/v1/messages", headers=alice.headers, json={
        "account_id": number.public_id, "to": user_id, "type": "text", "text": {"body": "ok"}})
    assert response.status_code == 202 and response.json["data"]["to"] == phone


def test_a_campaign_recipient_given_by_business_scoped_id_is_sent_once(client, alice, number, sim):
    body = campaign_body(number, [])
    body["recipients"] = [{"user_id": HIDDEN}, {"user_id": HIDDEN}, {"wa_id": wa()}]
    body["dedupe"] = True
    response = client.simulate_post("/api/v1/campaigns", headers=alice.headers, json=body)
    assert response.status_code in (201, 202), response.text
    assert CampaignRecipient.select().where(CampaignRecipient.wa_id == HIDDEN).count() == 1
    assert [item["recipient"] for item in sim.sent()].count(HIDDEN) == 1


@sqlite_only
@pytest.mark.parametrize("recipient", [{}, {"wa_id": "5215550001", "user_id": HIDDEN}, {"user_id": "not-an-id"}])
def test_a_recipient_names_the_user_one_way(client, alice, number, recipient):
    body = campaign_body(number, [])
    body["recipients"] = [recipient]
    response = client.simulate_post("/api/v1/campaigns", headers=alice.headers, json=body)
    assert response.status_code == 422 and response.json["error"]["code"] == "validation_failed"


def test_history_opens_the_window_without_events_and_contacts_are_counted(client, alice, number):
    phone, hour_ago = wa(), int(time.time()) - 3600
    history = {"history": [{"metadata": {"phase": 0, "chunk_order": 1, "progress": 40}, "threads": [{
        "id": phone, "messages": [
            {"from": phone, "id": "wamid.OLD1", "timestamp": str(hour_ago), "type": "text",
             "text": {"body": "¿cuánto debo?"}, "history_context": {"status": "READ"}},
            {"from": number.phone_number.lstrip("+"), "to": phone, "id": "wamid.OLD2",
             "timestamp": str(hour_ago + 60), "type": "text", "text": {"body": "te aviso"}}]}]}]}
    payload = notification(number.business_account_id, "history", messages_value(number, **history))
    signed_post(client, payload)
    signed_post(client, payload)  # delivered again
    contacts = notification(number.business_account_id, "smb_app_state_sync", messages_value(number, state_sync=[
        {"type": "contact", "contact": {"full_name": "Ana Pérez", "first_name": "Ana", "phone_number": phone},
         "action": "add", "metadata": {"timestamp": str(hour_ago)}}]))
    signed_post(client, contacts)

    assert accounts.window_open(number.id, phone)
    assert events("message.inbound.created") == [] and events("message.echo.created") == []
    account = MessagingAccount.get_by_id(number.id)
    assert (account.history_threads, account.history_progress, account.contacts_imported) == (1, 40, 1)
    response = client.simulate_post("/api/v1/messages", headers=alice.headers, json={
        "account_id": number.public_id, "to": phone, "type": "text", "text": {"body": "Hola"}})
    assert response.status_code == 202, response.text


def test_a_marketing_template_skips_users_who_opted_out(client, alice, number, sim):
    phone, other = wa(), wa()
    stop = notification(number.business_account_id, "user_preferences", messages_value(
        number, contacts=[{"wa_id": phone, "user_id": user_id_for(phone), "profile": {"name": "A"}}],
        user_preferences=[{"wa_id": phone, "user_id": user_id_for(phone), "detail": "User requested to stop",
                           "category": "marketing_messages", "value": "stop", "timestamp": str(int(time.time()))}]))
    signed_post(client, stop)
    assert marketing_opted_out(number.id, [phone, other]) == {phone}

    body = campaign_body(number, [phone, other], template="order_update", header_type="image",
                         header_url="https://example.com/a.jpg")
    body["body_placeholders"] = ["A-1"]
    response = client.simulate_post("/api/v1/campaigns", headers=alice.headers, json=body)
    assert response.status_code in (201, 202), response.text
    skipped = CampaignRecipient.get(CampaignRecipient.wa_id == phone)
    assert (skipped.status, skipped.error_code) == ("skipped", "marketing_opt_out")
    campaign = client.simulate_get(f"/api/v1/campaigns/{response.json['data']['id']}", headers=alice.headers)
    assert campaign.json["data"]["skipped"] == 1
    assert [item["to"] for item in sim.sent()] == [other]


def test_a_restricted_business_account_pauses_the_number_instead_of_failing_the_list(client, alice, number, sim):
    sim.set_number(number.phone_id, blocked=368)
    blocked, later = wa(), wa()
    body = campaign_body(number, [blocked, later])
    response = client.simulate_post("/api/v1/campaigns", headers=alice.headers, json=body)
    assert response.status_code in (201, 202), response.text
    account = MessagingAccount.get_by_id(number.id)
    assert account.status == "paused" and account.paused_reason.startswith("platform_blocked: (#368)")
    [paused] = events("account.paused")
    assert paused["account"]["id"] == number.public_id and "368" in paused["reason"]
    statuses = {r.wa_id: r.status for r in CampaignRecipient.select()}
    assert statuses[blocked] != "failed" and statuses[later] != "failed"


def test_a_window_opened_by_business_scoped_id_stays_with_the_user_once_their_phone_is_linked(
        client, alice, number, sim):
    phone = wa()
    user_id = user_id_for(phone)
    # 1. The user writes without sharing the phone: the window is the id's; it is answered by id.
    signed_post(client, inbound(number, "wamid.L1", user_id=user_id))
    answer = client.simulate_post("/api/v1/messages", headers=alice.headers, json={
        "account_id": number.public_id, "to": user_id, "type": "text", "text": {"body": "hola"}})
    assert answer.status_code == 202 and answer.json["data"]["to"] == user_id
    # A message stored under the id before the link: the window must still be found for it after.
    waiting = Message.get(Message.public_id == answer.json["data"]["id"])

    # 2. A campaign reaches the user by phone; its status names phone and id together: linked.
    response = client.simulate_post("/api/v1/campaigns", headers=alice.headers, json=campaign_body(number, [phone]))
    assert response.status_code in (201, 202), response.text
    [sent] = [item for item in sim.sent() if item["to"] == phone]
    status = {"id": sent["wamid"], "status": "delivered", "timestamp": str(int(time.time())),
              "recipient_id": phone, "recipient_user_id": user_id}
    signed_post(client, notification(number.business_account_id, "messages", messages_value(
        number, contacts=[{"profile": {"name": "Ana"}, "wa_id": phone, "user_id": user_id}], statuses=[status])))
    assert PlatformUser.get(PlatformUser.user_id == user_id).wa_id == phone

    # 3. The window, and the business-initiated send counted against the daily limit, are the user's.
    assert [(w.wa_id, w.last_inbound_wamid) for w in ContactWindow.select().where(
        ContactWindow.account == number.id)] == [(phone, "wamid.L1")]
    assert [b.wa_id for b in BusinessInitiated.select().where(
        BusinessInitiated.account == number.id)] == [phone]
    assert accounts.messages_sent_today(number.id) == 1
    assert platform_users.open_windows(number.id, [waiting.to, phone], utcnow()) == {user_id, phone}
    # A message stored under the id before the link and accepted after it counts the same user.
    accounts.record_business_sends(number.id, [waiting.to])
    assert accounts.messages_sent_today(number.id) == 1
    # A later message by phone, or by id, sees the open window.
    for to in (phone, user_id):
        later = client.simulate_post("/api/v1/messages", headers=alice.headers, json={
            "account_id": number.public_id, "to": to, "type": "text", "text": {"body": "¿algo más?"}})
        assert later.status_code == 202, later.text
        assert later.json["data"]["to"] == phone
        assert Message.get(Message.public_id == later.json["data"]["id"]).status == "sent"


class StatementLog(logging.Handler):
    """Every SQL statement peewee runs that reads a table (peewee logs each one at DEBUG)."""

    def __init__(self, table: str) -> None:
        super().__init__(logging.DEBUG)
        self.table, self.statements = table, []

    def emit(self, record: logging.LogRecord) -> None:
        sql = record.msg[0] if isinstance(record.msg, tuple) else str(record.msg)
        if sql.lstrip().upper().startswith("SELECT") and f'FROM "{self.table}"' in sql:
            self.statements.append(sql)


@contextlib.contextmanager
def statements_on(table: str):
    log, handler = logging.getLogger("peewee"), StatementLog(table)
    level = log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    try:
        yield handler.statements
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def test_campaign_recipients_by_business_scoped_id_are_looked_up_together(client, alice, number, immediate_queue):
    linked = [wa() for _ in range(3)]
    for n, phone in enumerate(linked):
        signed_post(client, inbound(number, f"wamid.B{n}", user_id=user_id_for(phone), wa_id=phone))
    immediate_queue.immediate = False  # the lookups are the creation's; sending 603 would take half a minute
    hidden = [f"MX.90000000{n:04d}" for n in range(600)]  # more than one lookup chunk
    body = campaign_body(number, [])
    body["recipients"] = [{"user_id": user_id_for(phone)} for phone in linked] + [{"user_id": u} for u in hidden]
    with statements_on("platform_user") as lookups:
        response = client.simulate_post("/api/v1/campaigns", headers=alice.headers, json=body)
    assert response.status_code in (201, 202), response.text
    # One lookup per 500 ids, not one a recipient.
    assert len(lookups) == 2, lookups
    keys = {r.wa_id for r in CampaignRecipient.select().where(
        CampaignRecipient.campaign == Campaign.get(Campaign.public_id == response.json["data"]["id"]))}
    assert keys == set(linked) | set(hidden)
