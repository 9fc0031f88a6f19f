"""Replies in WhatsApp through the platform's webhook, in process, on both backends: what a press
or a text may and may not record (models/receivables/replies.py)."""

from __future__ import annotations

import time

from models.events.tables import Event
from models.numbers.tables import MessagingAccount
from models.receivables import snapshots
from models.receivables.inputs import parse_debt
from models.receivables.tables import DebtDispute, DebtorResponseExport, DebtPromise, DebtReply
from models.sending.tables import Message
from tests.accounts_fixtures import *  # noqa: F403  (fixtures)
from tests.accounts_fixtures import connect_number, messages_value, notification, signed_post
from tests.receivables_fixtures import debt_body

ANA, LUIS = "56922223333", "56944445555"


def setup_debts(client, persona) -> MessagingAccount:
    """Ana owes D-1 and D-2, Luis owes L-1, on the persona's number."""
    account = MessagingAccount.get(MessagingAccount.public_id == connect_number(client, persona))
    for external_id, phone, document in (("D-1", ANA, "11-1"), ("D-2", ANA, "11-1"), ("L-1", LUIS, "22-2")):
        snapshots.upsert_debt(persona.id, parse_debt(debt_body(
            account.public_id, external_id, deudor={"nombre": "X", "documento": document, "telefono": phone})))
    return account


def message(account: MessagingAccount, sender: str, wamid: str, **content) -> dict:
    return notification(account.business_account_id, "messages", messages_value(
        account, contacts=[{"profile": {"name": "X"}, "wa_id": sender}],
        messages=[{"from": sender, "id": wamid, "timestamp": str(int(time.time())), **content}]))


def press(account: MessagingAccount, sender: str, wamid: str, payload: str) -> dict:
    return message(account, sender, wamid, type="button", button={"payload": payload, "text": "x"})


def count(name: str) -> int:
    return Event.select().where(Event.name == name).count()


def test_a_press_records_only_its_senders_own_open_debt(client, alice):
    account = setup_debts(client, alice)
    # Ana's press naming Luis's debt, a debt nobody has, and a payload of no action: nothing.
    for wamid, payload in (("wamid.P1", "cartera:dispute:L-1"), ("wamid.P2", "cartera:dispute:NOPE"),
                           ("wamid.P3", "cartera:resign:D-1"), ("wamid.P4", "Ya pagué")):
        assert signed_post(client, press(account, ANA, wamid, payload)).status_code == 200
    assert not DebtDispute.select().exists() and not DebtReply.select().exists()
    assert not Message.select().exists() and count("debt.disputed") == 0

    # Luis's own press is his.
    signed_post(client, press(account, LUIS, "wamid.P5", "cartera:dispute:L-1"))
    [dispute] = DebtDispute.select()
    assert dispute.debt.external_id == "L-1" and count("debt.disputed") == 1
    [answer] = Message.select()
    assert answer.to == LUIS and "/d/dl_" in answer.content["body"]


def test_the_same_promise_pressed_again_changes_nothing_but_is_answered(client, alice):
    account = setup_debts(client, alice)
    signed_post(client, press(account, ANA, "wamid.Q1", "cartera:promise:D-1"))
    signed_post(client, press(account, ANA, "wamid.Q2", "cartera:promise:D-1"))
    assert DebtPromise.select().count() == 1 and count("debt.promise_made") == 1
    assert DebtorResponseExport.select().count() == 1
    assert Message.select().count() == 2  # each press gets the page link
    # Disputed twice: the first dispute stands.
    signed_post(client, press(account, ANA, "wamid.Q3", "cartera:dispute:D-1"))
    signed_post(client, press(account, ANA, "wamid.Q4", "cartera:dispute:D-1"))
    assert DebtDispute.select().count() == 1 and count("debt.disputed") == 1


def test_free_text_is_attached_to_each_open_debt_of_its_sender_only(client, alice):
    account = setup_debts(client, alice)
    payload = message(account, ANA, "wamid.T1", type="text", text={"body": "Pago el viernes"})
    signed_post(client, payload)
    signed_post(client, payload)  # redelivered
    signed_post(client, message(account, "56900000000", "wamid.T2", type="text", text={"body": "hola"}))
    assert sorted((reply.debt.external_id, reply.body) for reply in DebtReply.select()) == [
        ("D-1", "Pago el viernes"), ("D-2", "Pago el viernes")]
    assert not Message.select().exists()  # free text is the company's to answer
