"""Replies in WhatsApp end to end on the live stack (gunicorn, the consumer, the platform and
payment gateway simulators as processes), on both backends: a reminder carries the three quick
replies with payloads naming the debt; the debtor presses them through the simulator
(`/_sim/press`, each webhook delivered twice) and writes free text (`/_sim/inbound`); each press is
recorded once, answered once with the debtor's page link, and exported to the ERP with a cursor;
the text shows on the debt's page in the portal."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import requests

from models.events.tables import Event
from models.numbers.tables import PlatformWebhookBatch
from models.receivables.tables import Debt, DebtDispute, DebtPromise, DebtReply
from models.sending.tables import Message
from tests.live import PaymentsLiveService, env_for, wait_until
from tests.portal_fixtures import make_user
from tests.test_debtor_links_live import DEBTOR_PHONE, remind, text_of
from tests.test_payments_live import sent_to
from tests.test_webhooks_delivery_log import portal_session


@pytest.fixture
def service(storage, tmp_path, immediate_queue):
    immediate_queue.immediate = False
    # The whole day is inside the sending window, so the reminder goes out whenever this runs.
    env = {**env_for(storage), "SVC_QUIET_HOURS_START": "00:00", "SVC_QUIET_HOURS_END": "00:00"}
    live = PaymentsLiveService(env, tmp_path).start()
    yield live
    live.stop()


def press(service: PaymentsLiveService, wamid: str, index: int) -> dict:
    """The debtor presses a button; the platform delivers the webhook twice."""
    pressed = requests.post(f"{service.sim_url}/_sim/press", json={"wamid": wamid, "index": index, "deliveries": 2},
                            timeout=10)
    assert pressed.status_code == 200, pressed.text
    return pressed.json()


def answers(service: PaymentsLiveService) -> list[str]:
    """The texts the service answered with, once the platform accepted each."""
    sent = [item for item in sent_to(service, DEBTOR_PHONE) if item["type"] == "text"]
    stored = [message.content["body"] for message in Message.select().order_by(Message.id)]
    return stored if len(sent) == len(stored) else []


def settled() -> bool:
    """Every webhook batch the platform posted has been processed (the duplicates included)."""
    return not PlatformWebhookBatch.select().where(PlatformWebhookBatch.processed_at.is_null()).exists()


def names(alice_id: int, name: str) -> int:
    return Event.select().where((Event.tenant == alice_id) & (Event.name == name)).count()


@pytest.mark.timeout(240)
def test_quick_replies_are_recorded_once_answered_with_the_page_and_exported(service, alice):
    remind(service, alice)
    [reminder] = [item for item in sent_to(service, DEBTOR_PHONE) if item["type"] == "template"]
    quick = {int(c["index"]): c["parameters"][0]["payload"] for c in reminder["components"]
             if c["type"] == "button" and c["sub_type"] == "quick_reply"}
    assert quick == {1: "cartera:paid:P-1", 2: "cartera:promise:P-1", 3: "cartera:dispute:P-1"}
    today = dt.datetime.now(dt.UTC).date()

    # "Pagaré en 7 días": a promise for today + 7, through the page's operation, and its answer.
    assert press(service, reminder["wamid"], 2)["payload"] == "cartera:promise:P-1"
    wait_until(lambda: len(answers(service)) == 1 and settled(), message="the answer to the promise")
    [promised] = DebtPromise.select()
    assert promised.promised_date == today + dt.timedelta(days=7)
    assert names(alice.id, "debt.promise_made") == 1
    [answer] = answers(service)
    assert "Anotamos tu compromiso de pago" in answer and f"{service.api_url}/d/dl_" in answer
    page = requests.get(answer.rsplit(" ", 1)[1], timeout=10)
    assert page.status_code == 200 and "Factura P-1" in text_of(page.text)
    answered = Message.get()
    assert answered.status in ("sent", "delivered", "read") and answered.to == DEBTOR_PHONE

    # "Ya pagué": a payment claimed, for the ERP to check; nothing is paid.
    press(service, reminder["wamid"], 1)
    wait_until(lambda: len(answers(service)) == 2 and settled(), message="the answer to the payment claimed")
    assert "confirme tu pago" in answers(service)[1]
    assert Debt.get(Debt.external_id == "P-1").saldo_pendiente == 15000000

    # "No reconozco": a dispute with its reason.
    press(service, reminder["wamid"], 3)
    wait_until(lambda: len(answers(service)) == 3 and settled(), message="the answer to the dispute")
    [disputed] = DebtDispute.select()
    assert disputed.reason == "not recognised via WhatsApp" and names(alice.id, "debt.disputed") == 1
    assert [(reply.kind, reply.action) for reply in DebtReply.select().order_by(DebtReply.id)] == [
        ("button", "promise"), ("button", "paid"), ("button", "dispute")]

    # Free text from the debtor's phone: attached to their debt once, shown in the portal.
    written = requests.post(f"{service.sim_url}/_sim/inbound", timeout=10, json={
        "from": DEBTOR_PHONE, "to": reminder["phone_number_id"], "text": "Pago el viernes <b>seguro</b>",
        "deliveries": 2})
    assert written.status_code == 200, written.text
    wait_until(lambda: DebtReply.select().where(DebtReply.kind == "text").exists() and settled(),
               message="the text attached")
    assert DebtReply.select().where(DebtReply.kind == "text").count() == 1
    assert len(answers(service)) == 3  # text is not answered by the service
    browser = portal_session(service, make_user(alice.id, "viewer").email)
    browser.headers["Accept-Language"] = "en"
    debt_page = browser.get(f"{service.api_url}/portal/receivables/debt", params={"id": "P-1"}, timeout=30)
    assert debt_page.status_code == 200
    shown = text_of(debt_page.text)
    assert "Pago el viernes <b>seguro</b>" in shown and "&lt;b&gt;" in debt_page.text
    assert "Pressed “I already paid”" in shown and "not recognised via WhatsApp" in shown

    # The ERP's feed: the CLI and the API, with a cursor.
    exported = service.svcctl("cartera", "responses", "export", "--tenant", alice.tenant.public_id, "--format", "jsonl")
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [(row["tipo"], row["origin"]) for row in rows] == [
        ("promesa", "whatsapp"), ("pago_informado", "whatsapp"), ("disputa", "whatsapp")]
    assert rows[0]["promised_date"] == (today + dt.timedelta(days=7)).isoformat()
    headers = alice.headers
    first = requests.get(f"{service.api_url}/api/v1/cartera/respuestas", params={"limit": 2}, headers=headers,
                         timeout=10).json()
    assert [row["tipo"] for row in first["data"]] == ["promesa", "pago_informado"] and first["meta"]["has_more"]
    rest = requests.get(f"{service.api_url}/api/v1/cartera/respuestas", headers=headers, timeout=10,
                        params={"cursor": first["meta"]["next_cursor"]}).json()
    assert [row["tipo"] for row in rest["data"]] == ["disputa"] and not rest["meta"]["has_more"]
    assert rest["data"][0]["reason"] == "not recognised via WhatsApp"
    refused = requests.get(f"{service.api_url}/api/v1/cartera/respuestas", headers=headers, timeout=10,
                           params={"cursor": "x"})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "validation_failed"
