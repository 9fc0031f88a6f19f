"""A third-party Cloud API client (pywa) against `svcctl sim`: every kind of message the service
sends is accepted, and every webhook the simulator posts parses in pywa into the right update
type with the right user (business-scoped id, phone number when shared, username)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
import requests
from pywa import WhatsApp, types
from pywa.errors import TemplateParamCountMismatch, WhatsAppError
from pywa.handlers import MessageHandler, MessageStatusHandler, OutgoingMessageHandler, RawUpdateHandler
from pywa.types.templates import BodyText, Buttons, QuickReplyButton, TemplateLanguage, URLButton

from messaging.simulator.users import business_app_contacts, user_id_for, username_for
from messaging.testing import WebhookReceiver
from messaging.webhooks import HistoryThread, SyncedContact, parse_notification
from tests.live import ROOT, free_port, wait_until

SECRET = "pywa-sim-secret"
PHONE = "5215551230001"  # an ordinary recipient who shares their phone
USERNAME_PHONE = "5215551230017"  # ends in 7: the simulator gives this user a username
HIDDEN_USER = "MX.998877665544337"  # ends in 7: a username user who does not share their phone


@pytest.fixture
def receiver():
    endpoint = WebhookReceiver().start()
    yield endpoint
    endpoint.stop()


@pytest.fixture
def sim_url(receiver, tmp_path):
    port = free_port()
    env = {**os.environ, "SVC_DATA_DIR": str(tmp_path), "SVC_APP_SECRET": SECRET}
    process = subprocess.Popen(
        [sys.executable, "-m", "svcctl.main", "sim", "--bind", f"127.0.0.1:{port}", "--webhook-url", receiver.url,
         "--duplicate-rate", "0", "--delivered-delay", "0.02", "--read-delay", "0.04"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(f"{url}/_sim/health"), timeout=20, message="the simulator")
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


class Parsed:
    """What pywa made of the simulator's webhooks."""

    def __init__(self) -> None:
        self.messages: list[types.Message] = []
        self.statuses: list[types.MessageStatus] = []
        self.echoes: list = []
        self.raw: list[types.RawUpdate] = []


def pywa_client(sim_url: str, parsed: Parsed) -> tuple[WhatsApp, str]:
    signup = requests.post(f"{sim_url}/_sim/signup", json={}, timeout=5).json()
    token = requests.get(f"{sim_url}/v26.0/oauth/access_token",
                         params={"client_id": "app", "client_secret": SECRET, "code": signup["code"]},
                         timeout=5).json()["access_token"]
    # Repeats are kept: the simulator posts one history chunk twice, as the platform may.
    wa = WhatsApp(phone_id=signup["phone_number_id"], token=token, app_secret=SECRET, server=None,
                  skip_duplicate_updates=False, waba_id=signup["waba_id"])
    # pywa speaks to graph.facebook.com; its session is pointed at the simulator instead.
    wa.api._session.base_url = f"{sim_url}/v26.0"
    wa.add_handlers(
        MessageHandler(lambda _, update: parsed.messages.append(update)),
        MessageStatusHandler(lambda _, update: parsed.statuses.append(update)),
        OutgoingMessageHandler(lambda _, update: parsed.echoes.append(update)),
        RawUpdateHandler(lambda _, update: parsed.raw.append(update)),
    )
    return wa, signup["phone_number_id"]


def feed(wa: WhatsApp, receiver: WebhookReceiver, seen: int) -> int:
    """Hand every POST since `seen` to pywa exactly as its web server would."""
    for post in receiver.posts[seen:]:
        assert wa.webhook_update_validator(post.body, post.signature) is None
        assert wa.webhook_update_handler(post.body) == ("ok", 200)
    return len(receiver.posts)


PAY_LINK = {"name": "pay_link", "language": "es", "body": "Hola {{1}}, paga tu saldo.",
            "buttons": [{"type": "URL", "text": "Pay now", "url": "https://pay.example.com/pay/{{1}}"},
                        {"type": "QUICK_REPLY", "text": "Already paid"}]}


def test_pywa_parses_templates_with_buttons_and_their_sends_are_checked(sim_url, receiver):
    wa, _number_id = pywa_client(sim_url, Parsed())
    requests.post(f"{sim_url}/_sim/templates", json=PAY_LINK, timeout=5).raise_for_status()

    templates = {template.name: template for template in wa.get_templates()}
    assert templates["payment_reminder"].components[0].text == "Hola {{1}}, tu saldo pendiente es {{2}}."
    [buttons] = [c for c in templates["pay_link"].components if isinstance(c, Buttons)]
    url_button, quick_reply = buttons.buttons
    assert isinstance(url_button, URLButton) and isinstance(quick_reply, QuickReplyButton)
    assert (url_button.text, url_button.url, quick_reply.text) == (
        "Pay now", "https://pay.example.com/pay/{{1}}", "Already paid")

    sent = wa.send_template(PHONE, "pay_link", TemplateLanguage.SPANISH, params=[
        BodyText.params("Ana"), URLButton.params(url_variable="plk_abc", index=0)])
    [kept] = requests.get(f"{sim_url}/_sim/sent", timeout=5).json()["data"]
    assert kept["wamid"] == sent.id
    assert [c["parameters"] for c in kept["components"] if c["type"] == "button"] == [
        [{"type": "text", "text": "plk_abc"}]]
    # The URL button's suffix left out, and a URL parameter for a template without buttons: the
    # platform's errors, which pywa raises with their codes.
    with pytest.raises(TemplateParamCountMismatch) as missing:
        wa.send_template(PHONE, "pay_link", TemplateLanguage.SPANISH, params=[BodyText.params("Ana")])
    assert missing.value.code == 132000 and "button at index 0" in missing.value.details
    with pytest.raises(WhatsAppError) as foreign:
        wa.send_template(PHONE, "payment_reminder", TemplateLanguage.SPANISH, params=[
            BodyText.params("Ana", "$10.00"), URLButton.params(url_variable="pay/abc", index=0)])
    assert foreign.value.code == 132018


def test_pywa_sends_every_kind_and_parses_every_simulator_webhook(sim_url, receiver):
    parsed = Parsed()
    wa, number_id = pywa_client(sim_url, parsed)
    requests.post(f"{sim_url}/_sim/templates", json=PAY_LINK, timeout=5).raise_for_status()

    assert wa.get_business_phone_number().id == number_id
    sent = [
        wa.send_message(PHONE, "hello"),
        wa.send_image(PHONE, "https://example.com/a.jpg", caption="invoice"),
        wa.send_document(PHONE, "https://example.com/a.pdf", filename="a.pdf"),
        wa.send_message(PHONE, "choose", buttons=[types.Button("Yes", "yes"), types.Button("No", "no")]),
        wa.send_message(PHONE, "pick", buttons=types.SectionList("Options", [
            types.Section("Plans", [types.SectionRow("Monthly", "m"), types.SectionRow("Yearly", "y")])])),
        wa.send_location(PHONE, latitude=19.43, longitude=-99.13, name="Office"),
        wa.send_template(PHONE, "hello_world", TemplateLanguage.ENGLISH_US),
        wa.send_template(PHONE, "payment_reminder", TemplateLanguage.SPANISH, params=[
            BodyText.params("Ana", "$10.00")]),
        wa.send_template(PHONE, "pay_link", TemplateLanguage.SPANISH, params=[
            BodyText.params("Ana"), URLButton.params(url_variable="plk_abc", index=0),
            QuickReplyButton.params(callback_data="PAID", index=1)]),
        wa.send_message(USERNAME_PHONE, "hi username user"),
        wa.send_message(HIDDEN_USER, "by business-scoped id"),
    ]
    wa.send_reaction(PHONE, "👍", sent[0].id)
    sends = requests.get(f"{sim_url}/_sim/sent", timeout=5).json()["data"]
    assert len(sends) == len(sent) + 1
    assert {"to": HIDDEN_USER, "recipient": HIDDEN_USER}.items() <= sends[len(sent) - 1].items()

    # Inbound from a phone user and from a username user without a phone, and an echo.
    inbound = requests.post(f"{sim_url}/_sim/inbound", json={"from": PHONE, "to": number_id, "text": "paid"},
                            timeout=5).json()
    hidden = requests.post(f"{sim_url}/_sim/inbound",
                           json={"user_id": HIDDEN_USER, "to": number_id, "text": "it's me"}, timeout=5).json()
    requests.post(f"{sim_url}/_sim/echo", json={"from": number_id, "to": PHONE, "text": "thanks"}, timeout=5)
    # The coexistence sync: pywa has no call for it, so it is asked for directly.
    for sync_type in ("smb_app_state_sync", "history"):
        answer = requests.post(f"{sim_url}/v26.0/{number_id}/smb_app_data", json={
            "messaging_product": "whatsapp", "sync_type": sync_type},
            headers={"Authorization": f"Bearer {wa.api._session.headers['Authorization'][7:]}"}, timeout=5)
        assert answer.status_code == 200, answer.text
    assert wa.mark_message_as_read(inbound["wamid"]).success
    assert wa.indicate_typing(hidden["wamid"]).success

    # Every send, the reaction included: delivered and read, each parsed.
    expected_statuses = 2 * (len(sent) + 1)
    wait_until(lambda: sum(len(p.json()["entry"][0]["changes"][0]["value"].get("statuses", []))
                           for p in receiver.posts) >= expected_statuses, timeout=20, message="status webhooks")
    wait_until(lambda: sum(p.json()["entry"][0]["changes"][0]["field"] == "history" for p in receiver.posts) >= 3,
               timeout=20, message="history webhooks")
    feed(wa, receiver, 0)

    # pywa reads the first item of each POST; the simulator batches statuses, so every item is
    # also parsed alone through pywa's own constructor.
    for post in receiver.posts:
        raw = types.RawUpdate(post.body, hmac_header=post.signature, update_hash=str(id(post)))
        value = raw["entry"][0]["changes"][0]["value"]
        for index, item in enumerate(value.get("statuses", [])):
            status = types.MessageStatus.from_update(wa, raw, contact_idx=index, status_idx=index)
            assert status.id == item["id"]
            assert status.from_user.bsuid == item["recipient_user_id"]
            assert status.from_user.wa_id == item.get("recipient_id")
            assert status.pricing is not None
    assert {status.status for status in parsed.statuses} <= {types.MessageStatusType.DELIVERED,
                                                              types.MessageStatusType.READ}
    assert len(parsed.messages) == 2 and len(parsed.echoes) == 1
    by_text = {message.text: message for message in parsed.messages}
    assert by_text["paid"].from_user.wa_id == PHONE
    assert by_text["paid"].from_user.bsuid == user_id_for(PHONE)
    assert by_text["it's me"].from_user.wa_id is None
    assert by_text["it's me"].from_user.bsuid == HIDDEN_USER
    assert by_text["it's me"].from_user.username == username_for(HIDDEN_USER) is not None
    assert parsed.echoes[0].from_user.wa_id == PHONE
    assert username_for(USERNAME_PHONE) and not username_for(PHONE)
    # Nothing the simulator posted was left unparsed; pywa has no type for the sync webhooks, so
    # they reach it raw, and they go through the service's own parser.
    assert len(parsed.raw) == len(receiver.posts)
    fields = Counter(update.field for update in parsed.raw)
    assert fields["smb_app_state_sync"] == 1 and fields["history"] == 3
    synced = [u for post in receiver.posts for u in parse_notification(post.json())
              if isinstance(u, SyncedContact | HistoryThread)]
    assert {u.wa_id for u in synced if isinstance(u, SyncedContact)} == {p for p, _ in business_app_contacts(number_id)}
    assert sum(isinstance(u, HistoryThread) for u in synced) == 3
