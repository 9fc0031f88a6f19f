"""The platform's documented webhook payloads, kind by kind, through the parser
(messaging/webhooks.py) and through the service (signed POST, models/inbox/batches.py): each is the
right kind from the right user, and only what the platform counts as the user writing opens the
24-hour customer-service window. The shapes are those of the Cloud API's webhook reference
(messages, statuses, message_echoes, errors, system), users named by phone, business-scoped id,
or both, with a username where the user chose one."""

from __future__ import annotations

import time
from typing import Any

import pytest

from messaging.webhooks import EchoMessage, InboundMessage, Media, StatusUpdate, parse_notification
from models.events.tables import Event
from models.inbox.updates import WINDOW_OPENING_TYPES
from models.numbers import accounts
from models.numbers.tables import MessagingAccount
from tests.accounts_fixtures import *  # noqa: F403  (fixtures)
from tests.accounts_fixtures import connect_number, notification, signed_post, sqlite_only
from tests.openapi_fixtures import assert_documented_event

WABA = "1234567890987654321"
NUMBER = "1122334455667"


def value(phone_number_id: str = NUMBER, display: str = "972123456789", **items) -> dict:
    return {"messaging_product": "whatsapp",
            "metadata": {"display_phone_number": display, "phone_number_id": phone_number_id}, **items}


def contact(wa_id: str | None, user_id: str | None = None, username: str | None = None) -> dict:
    profile: dict[str, Any] = {"name": "Test Name"}
    if username:
        profile["username"] = username
    return {"profile": profile, **({"wa_id": wa_id} if wa_id else {}), **({"user_id": user_id} if user_id else {})}


# Each documented message kind: (the message object, whether it opens the window, body, payload, media).
MESSAGES: dict[str, tuple[dict, bool, str | None, str | None, Media | None]] = {
    "text": ({"type": "text", "text": {"body": "Body Text"}}, True, "Body Text", None, None),
    "image": ({"type": "image", "image": {"caption": "the receipt", "mime_type": "image/jpeg",
                                          "sha256": "4654+8g=", "id": "65463453"}},
              True, "the receipt", None, Media("65463453", "image/jpeg")),
    "video": ({"context": {"forwarded": True}, "type": "video",
               "video": {"caption": "caption", "mime_type": "video/mp4", "sha256": "Jh+2ij6Pz=", "id": "765756756"}},
              True, "caption", None, Media("765756756", "video/mp4")),
    "document": ({"type": "document", "document": {"caption": "caption", "filename": "factura.pdf",
                                                   "mime_type": "application/pdf", "sha256": "grwfwe=",
                                                   "id": "1234567890987654321"}},
                 True, "caption", None, Media("1234567890987654321", "application/pdf", "factura.pdf")),
    "audio": ({"type": "audio", "audio": {"mime_type": "audio/ogg; codecs=opus", "sha256": "m04pFf2E=",
                                          "id": "4433221100", "voice": True}},
              True, None, None, Media("4433221100", "audio/ogg; codecs=opus")),
    "sticker": ({"type": "sticker", "sticker": {"mime_type": "image/webp", "sha256": "OmT4nhjU=", "id": "998877",
                                                "animated": False}},
                True, None, None, Media("998877", "image/webp")),
    "location": ({"type": "location", "location": {"latitude": 37.4611978, "longitude": -122.2164385,
                                                   "name": "Facebook HQ", "address": "1 Hacker Way, Menlo Park",
                                                   "url": "https://maps.google.com/?cid=2000000000000000000"}},
                 True, None, None, None),
    "contacts": ({"type": "contacts", "contacts": [{
        "name": {"first_name": "Chandler", "last_name": "Bing", "formatted_name": "Chandler Bing"},
        "phones": [{"phone": "+1 555-555-5555", "wa_id": "15555555555", "type": "CELL"}]}]},
        True, None, None, None),
    "order": ({"type": "order", "order": {"catalog_id": "354160437058781", "text": "sin cebolla", "product_items": [
        {"product_retailer_id": "HAMBURGER", "quantity": 3, "item_price": 30, "currency": "ILS"}]}},
        True, "sin cebolla", None, None),
    "button_reply": ({"context": {"from": "972123456789", "id": "wamid.ASKED"}, "type": "interactive",
                      "interactive": {"type": "button_reply", "button_reply": {"id": "pay_now", "title": "Pagar"}}},
                     True, "Pagar", "pay_now", None),
    "list_reply": ({"context": {"from": "972123456789", "id": "wamid.ASKED"}, "type": "interactive",
                    "interactive": {"type": "list_reply", "list_reply": {
                        "id": "plan_3", "title": "3 cuotas", "description": "Tres pagos mensuales"}}},
                   True, "3 cuotas", "plan_3", None),
    "quick_reply": ({"context": {"from": "972123456789", "id": "wamid.TEMPLATE"}, "type": "button",
                     "button": {"payload": "STOP_REMINDERS", "text": "No más recordatorios"}},
                    True, "No más recordatorios", "STOP_REMINDERS", None),
    "reaction": ({"type": "reaction", "reaction": {"message_id": "wamid.OURS", "emoji": "\U0001f44d"}},
                 False, "\U0001f44d", None, None),
    "unreaction": ({"type": "reaction", "reaction": {"message_id": "wamid.OURS", "emoji": ""}},
                   False, None, None, None),
    "unsupported": ({"type": "unsupported", "errors": [{
        "code": 131051, "title": "Message type unknown", "message": "Message type unknown",
        "error_data": {"details": "Message type is currently not supported."}}]},
        False, None, None, None),
    "identity_changed": ({"type": "system", "identity": {"acknowledged": True, "created_timestamp": "1697044706",
                                                         "hash": "xyzxyz"},
                          "system": {"body": "User identity changed", "type": "customer_identity_changed"}},
                         False, "User identity changed", None, None),
}

# How the message names its user: phone only; phone and business-scoped id (with a username);
# business-scoped id only (a username user who does not share their phone).
SENDERS = {
    "phone": ("972987654321", None, None),
    "phone_and_id": ("972987654322", "US.13491208655302741918", "@ana"),
    "id_only": (None, "MX.1502576394655843", "@pat"),
}


def message_notification(kind: str, sender: str, wamid: str, phone_number_id: str = NUMBER,
                         display: str = "972123456789", waba: str = WABA) -> dict:
    wa_id, user_id, username = SENDERS[sender]
    item = {**MESSAGES[kind][0], "id": wamid, "timestamp": str(int(time.time()))}
    if wa_id:
        item["from"] = wa_id
    if user_id:
        item["from_user_id"] = user_id
    return notification(waba, "messages", value(phone_number_id, display, contacts=[contact(wa_id, user_id, username)],
                                                messages=[item]))


def test_the_window_opening_kinds_are_the_platforms():
    assert {MESSAGES[kind][0]["type"] for kind, case in MESSAGES.items() if case[1]} == WINDOW_OPENING_TYPES
    assert not {MESSAGES[kind][0]["type"] for kind, case in MESSAGES.items() if not case[1]} & WINDOW_OPENING_TYPES


@pytest.mark.parametrize("sender", SENDERS)
@pytest.mark.parametrize("kind", MESSAGES)
def test_each_documented_message_parses_to_its_kind_and_user(kind, sender):
    [message] = parse_notification(message_notification(kind, sender, f"wamid.{kind}"))

    message_object, _opens, body, payload, media = MESSAGES[kind]
    wa_id, user_id, username = SENDERS[sender]
    assert isinstance(message, InboundMessage)
    assert (message.phone_number_id, message.wamid, message.type) == (NUMBER, f"wamid.{kind}", message_object["type"])
    assert (message.sender.wa_id, message.sender.user_id, message.sender.username) == (wa_id, user_id, username)
    assert message.sender.profile_name == "Test Name"
    assert (message.body, message.payload, message.media) == (body, payload, media)


def test_system_messages_name_their_user_with_or_without_a_sender():
    number_changed = {"from": "972987654321", "id": "wamid.SYS1", "timestamp": "1753851315", "type": "system",
                      "system": {"body": "User A changed from 972987654321 to 972912345678",
                                 "wa_id": "972912345678", "type": "user_changed_number"}}
    id_changed = {"id": "wamid.SYS2", "timestamp": "1753851315", "type": "system",
                  "system": {"body": "User changed from CO.1234567890 to MX.0987654321", "user_id": "MX.0987654321",
                             "previous_user_id": "CO.1234567890", "type": "user_changed_user_id"}}

    changed, renamed = parse_notification(notification(WABA, "messages", value(messages=[number_changed, id_changed])))

    assert (changed.type, changed.sender.wa_id, changed.body) == (
        "system", "972987654321", "User A changed from 972987654321 to 972912345678")
    # No `from` at all: the user is the one the system message names.
    assert (renamed.type, renamed.sender.user_id, renamed.sender.wa_id) == ("system", "MX.0987654321", None)


def test_errors_at_the_value_level_are_no_update_and_do_not_hide_the_message_beside_them(caplog):
    only_errors = notification(WABA, "messages", value(errors=[{
        "code": 131000, "title": "Something went wrong", "message": "Something went wrong",
        "error_data": {"details": "Unsupported webhook payload"}}]))
    assert parse_notification(only_errors) == []
    assert "131000" in caplog.text

    # A reply to an interactive message the platform could not render: still the user writing.
    with_message = notification(WABA, "messages", value(
        contacts=[contact("972987654321")],
        messages=[{"context": {"from": "972123456789", "id": "wamid.ASKED"}, "from": "972987654321",
                   "id": "wamid.ERR", "timestamp": "1700505494", "type": "interactive"}],
        errors=[{"code": 131000, "title": "Something went wrong", "message": "Something went wrong",
                 "error_data": {"details": "Unsupported webhook payload"}}]))
    [message] = parse_notification(with_message)
    assert (message.type, message.sender.wa_id, message.body, message.payload) == (
        "interactive", "972987654321", None, None)


def test_statuses_carry_their_user_errors_and_pricing():
    delivered = {"id": "wamid.OUT1", "status": "delivered", "timestamp": "1698266945",
                 "recipient_id": "972987654322", "recipient_user_id": "US.13491208655302741918",
                 "biz_opaque_callback_data": "cmp_1:rcp_1",
                 "conversation": {"id": "7270432eae37498234f4444b35ffc5", "origin": {"type": "utility"}},
                 "pricing": {"billable": True, "pricing_model": "PMP", "category": "utility", "type": "regular"}}
    failed = {"id": "wamid.OUT2", "status": "failed", "timestamp": "1689380458",
              "recipient_user_id": "MX.1502576394655843",
              "errors": [{"code": 130472, "title": "User's number is part of an experiment",
                          "message": "User's number is part of an experiment",
                          "error_data": {"details": "Failed to send message because this user's phone number is "
                                                    "part of an experiment"},
                          "href": "https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/"}]}
    payload = notification(WABA, "messages", value(
        contacts=[contact("972987654322", "US.13491208655302741918", "@ana"),
                  contact(None, "MX.1502576394655843", "@pat")],
        statuses=[delivered, failed]))

    first, second = parse_notification(payload)

    assert isinstance(first, StatusUpdate) and isinstance(second, StatusUpdate)
    assert (first.status, first.recipient_id, first.recipient.user_id, first.recipient.username) == (
        "delivered", "972987654322", "US.13491208655302741918", "@ana")
    assert first.callback_data == "cmp_1:rcp_1" and first.errors == []
    assert first.pricing == {"billable": True, "pricing_model": "PMP", "category": "utility", "type": "regular"}
    # A user without a phone is keyed by their business-scoped id.
    assert (second.status, second.recipient_id, second.recipient.wa_id, second.recipient.username) == (
        "failed", "MX.1502576394655843", None, "@pat")
    assert [error["code"] for error in second.errors] == [130472] and second.pricing is None


def test_an_echo_names_the_user_it_went_to():
    echo = {"from": "972123456789", "to": "972987654322", "to_user_id": "US.13491208655302741918",
            "to_parent_user_id": "US.ENT.11815799212886844830", "id": "wamid.ECHO", "timestamp": "1697043223",
            "type": "text", "text": {"body": "Test message"}}
    payload = notification(WABA, "smb_message_echoes", value(
        contacts=[{**contact("972987654322", "US.13491208655302741918", "@ana"),
                   "parent_user_id": "US.ENT.11815799212886844830"}],
        message_echoes=[echo]))

    [message] = parse_notification(payload)

    assert isinstance(message, EchoMessage)
    assert (message.type, message.body, message.to_wa_id) == ("text", "Test message", "972987654322")
    assert (message.recipient.user_id, message.recipient.parent_user_id, message.recipient.username) == (
        "US.13491208655302741918", "US.ENT.11815799212886844830", "@ana")


# Through the service: the signed POST, the stored batch, the event and the window.

def events(name: str) -> list[dict]:
    return [event.payload for event in Event.select().where(Event.name == name).order_by(Event.id)]


@pytest.fixture
def account(client, alice) -> MessagingAccount:
    return MessagingAccount.get(MessagingAccount.public_id == connect_number(client, alice))


@sqlite_only
@pytest.mark.parametrize("kind", MESSAGES)
def test_each_documented_message_is_reported_and_opens_the_window_only_if_it_should(client, account, kind):
    message_object, opens, body, payload, media = MESSAGES[kind]
    display = account.phone_number.lstrip("+")
    for sender in SENDERS:
        response = signed_post(client, message_notification(kind, sender, f"wamid.{kind}.{sender}",
                                                            account.phone_id, display, account.business_account_id))
        assert response.status_code == 200

    reported = events("message.inbound.created")
    assert [event["type"] for event in reported] == [message_object["type"]] * len(SENDERS)
    for event, (wa_id, user_id, username) in zip(reported, SENDERS.values(), strict=True):
        key = wa_id or user_id
        assert_documented_event(event)
        # The contract's `from` is the phone when known, else the business-scoped id.
        assert event["from"] == key
        assert (event.get("user_id"), event.get("username")) == (user_id, username)
        assert (event["body"], event.get("payload")) == (body, payload)
        if media is None:
            assert "media" not in event
        else:
            assert event["media"]["id"] == media.id and event["media"]["mime_type"] == media.mime_type
            assert event["media"].get("filename") == media.filename
        assert accounts.window_open(account.id, key) is opens


@sqlite_only
def test_statuses_with_errors_and_pricing_and_an_echo_open_no_window(client, account):
    display = account.phone_number.lstrip("+")
    statuses = notification(account.business_account_id, "messages", value(
        account.phone_id, display, contacts=[contact("972987654322", "US.13491208655302741918", "@ana")],
        statuses=[{"id": "wamid.UNKNOWN", "status": "failed", "timestamp": str(int(time.time())),
                   "recipient_id": "972987654322", "recipient_user_id": "US.13491208655302741918",
                   "pricing": {"billable": False, "pricing_model": "PMP", "category": "utility"},
                   "errors": [{"code": 131026, "title": "Message undeliverable"}]}]))
    echo = notification(account.business_account_id, "smb_message_echoes", value(
        account.phone_id, display, contacts=[contact("972987654323", "US.99887766554433221100", "@leo")],
        message_echoes=[{"from": display, "to": "972987654323", "to_user_id": "US.99887766554433221100",
                         "id": "wamid.ECHO2", "timestamp": str(int(time.time())), "type": "image",
                         "image": {"caption": "su recibo", "mime_type": "image/jpeg", "id": "5544"}}]))

    assert signed_post(client, statuses).status_code == 200
    assert signed_post(client, echo).status_code == 200

    [reported] = events("message.echo.created")
    assert (reported["to"], reported["user_id"], reported["username"], reported["body"]) == (
        "972987654323", "US.99887766554433221100", "@leo", "su recibo")
    assert_documented_event(reported)
    assert events("message.inbound.created") == []
    for key in ("972987654322", "972987654323", "US.13491208655302741918"):
        assert not accounts.window_open(account.id, key)
