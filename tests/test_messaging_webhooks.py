"""Platform webhook signatures and parsing, on samples shaped like the platform's."""

from __future__ import annotations

import copy
import hashlib
import hmac
from datetime import UTC, datetime

import pytest

from messaging.webhooks import (
    AccountUpdate,
    EchoMessage,
    HistoryThread,
    InboundMessage,
    PhoneQualityUpdate,
    PlatformUser,
    StatusUpdate,
    TemplateStatusUpdate,
    UserPreference,
    parse_notification,
    sign,
    verify_signature,
)

SECRET = "app-secret"
WABA_ID = "102290129340398"
NUMBER_ID = "106540352242001"
METADATA = {"display_phone_number": "15550100001", "phone_number_id": NUMBER_ID}


def notification(field: str, value: dict) -> dict:
    return {"object": "whatsapp_business_account",
            "entry": [{"id": WABA_ID, "changes": [{"field": field, "value": value}]}]}


def statuses(*items: dict) -> dict:
    return notification("messages", {"messaging_product": "whatsapp", "metadata": METADATA, "statuses": list(items)})


DELIVERED = {
    "id": "wamid.HBgLMTY1MDUwNzY1MjAVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA",
    "status": "delivered",
    "timestamp": "1750263773",
    "recipient_id": "5215551234567",
    "biz_opaque_callback_data": "rcp_123",
    "conversation": {"id": "6ceb9d929c10e2ba0e1a8a1d7d1b4b56", "origin": {"type": "marketing"}},
    "pricing": {"billable": True, "pricing_model": "PMP", "category": "marketing"},
}
FAILED = {
    "id": "wamid.failed",
    "status": "failed",
    "timestamp": "1750263774",
    "recipient_id": "5215559999",
    "errors": [{"code": 131026, "title": "Message undeliverable", "message": "Message undeliverable",
                "error_data": {"details": "Message Undeliverable."}}],
}
INBOUND_TEXT = {"from": "5215551234567", "id": "wamid.in1", "timestamp": "1750263800", "type": "text",
                "text": {"body": "hola"}}
INBOUND_IMAGE = {"from": "5215551234567", "id": "wamid.in2", "timestamp": "1750263801", "type": "image",
                 "image": {"caption": "my receipt", "mime_type": "image/jpeg", "sha256": "x", "id": "1"}}
INBOUND_BUTTON = {"from": "5215551234567", "id": "wamid.in3", "timestamp": "1750263802", "type": "interactive",
                  "interactive": {"type": "button_reply", "button_reply": {"id": "pay", "title": "Pay now"}}}


# Signatures


def test_sign_is_the_hex_hmac_sha256_of_the_body():
    assert sign(b"{}", "secret") == "sha256=" + hmac.new(b"secret", b"{}", hashlib.sha256).hexdigest()


def test_a_signed_body_verifies():
    body = b'{"object":"whatsapp_business_account","entry":[]}'

    assert verify_signature(sign(body, SECRET), body, SECRET)


@pytest.mark.parametrize(
    ("header", "body"),
    [
        (sign(b'{"a":1}', SECRET), b'{"a":2}'),  # tampered body
        (sign(b'{"a":1}', "other-secret"), b'{"a":1}'),  # another app's secret
        (None, b'{"a":1}'),  # missing header
        ("", b'{"a":1}'),
        (sign(b'{"a":1}', SECRET)[len("sha256="):], b'{"a":1}'),  # no prefix
        ("sha1=" + sign(b'{"a":1}', SECRET)[len("sha256="):], b'{"a":1}'),
        ("sha256=zz", b'{"a":1}'),  # malformed hex
        ("sha256=é", b'{"a":1}'),  # not even ASCII
    ],
    ids=["tampered", "wrong-secret", "missing", "empty", "no-prefix", "sha1", "malformed", "non-ascii"],
)
def test_bad_signatures_do_not_verify(header, body):
    assert verify_signature(header, body, SECRET) is False


def test_without_a_secret_nothing_verifies():
    assert verify_signature(sign(b"{}", ""), b"{}", "") is False


# Statuses


def test_status_updates_are_parsed():
    [delivered, failed] = parse_notification(statuses(DELIVERED, FAILED))

    assert delivered == StatusUpdate(
        phone_number_id=NUMBER_ID,
        wamid=DELIVERED["id"],
        status="delivered",
        timestamp=datetime(2025, 6, 18, 16, 22, 53, tzinfo=UTC),
        recipient_id="5215551234567",
        callback_data="rcp_123",
        errors=[],
        recipient=PlatformUser(wa_id="5215551234567"),
        pricing={"billable": True, "pricing_model": "PMP", "category": "marketing"},
    )
    assert failed.status == "failed"
    assert failed.callback_data is None
    assert failed.errors[0]["code"] == 131026


def test_many_changes_and_entries_in_one_post():
    payload = statuses(DELIVERED)
    payload["entry"][0]["changes"].append(copy.deepcopy(statuses(FAILED)["entry"][0]["changes"][0]))
    payload["entry"].append(copy.deepcopy(statuses({**DELIVERED, "status": "read"})["entry"][0]))

    assert [u.status for u in parse_notification(payload)] == ["delivered", "failed", "read"]


# Messages, echoes and account events


def test_inbound_messages_are_parsed():
    value = {"messaging_product": "whatsapp", "metadata": METADATA,
             "contacts": [{"profile": {"name": "Ana"}, "wa_id": "5215551234567"}],
             "messages": [INBOUND_TEXT, INBOUND_IMAGE, INBOUND_BUTTON]}

    text, image, button = parse_notification(notification("messages", value))

    assert isinstance(text, InboundMessage)
    assert (text.phone_number_id, text.wamid, text.from_wa_id, text.type, text.body) == (
        NUMBER_ID, "wamid.in1", "5215551234567", "text", "hola")
    assert text.timestamp == datetime.fromtimestamp(1750263800, UTC)
    assert text.raw == INBOUND_TEXT
    assert (image.type, image.body) == ("image", "my receipt")
    assert (button.type, button.body) == ("interactive", "Pay now")


def test_a_message_without_readable_text_has_no_body():
    sticker = {"from": "52155", "id": "wamid.s", "timestamp": "1750263800", "type": "sticker",
               "sticker": {"id": "9", "mime_type": "image/webp"}}

    [message] = parse_notification(notification("messages", {"metadata": METADATA, "messages": [sticker]}))

    assert message.body is None


def test_echoes_from_the_business_app_are_parsed():
    value = {"messaging_product": "whatsapp", "metadata": METADATA,
             "message_echoes": [{"from": "15550100001", "to": "5215551234567", "id": "wamid.echo",
                                 "timestamp": "1750263900", "type": "text", "text": {"body": "on our way"}}]}

    [echo] = parse_notification(notification("smb_message_echoes", value))

    assert isinstance(echo, EchoMessage)
    assert (echo.phone_number_id, echo.wamid, echo.to_wa_id, echo.type, echo.body) == (
        NUMBER_ID, "wamid.echo", "5215551234567", "text", "on our way")


def test_template_status_updates_are_parsed():
    value = {"event": "APPROVED", "message_template_id": 1500000000000004,
             "message_template_name": "promo_pending", "message_template_language": "en_US", "reason": None}

    [update] = parse_notification(notification("message_template_status_update", value))

    assert update == TemplateStatusUpdate(WABA_ID, "1500000000000004", "promo_pending", "en_US", "APPROVED", None)


def test_phone_quality_updates_are_parsed():
    value = {"display_phone_number": "15550100001", "event": "FLAGGED", "current_limit": "TIER_2K"}

    [update] = parse_notification(notification("phone_number_quality_update", value))

    assert update == PhoneQualityUpdate(WABA_ID, "15550100001", "FLAGGED", "TIER_2K")


def test_account_updates_are_parsed():
    value = {"phone_number": "15550100001", "event": "DISABLED_UPDATE",
             "ban_info": {"waba_ban_state": "DISABLE", "waba_ban_date": "2025-06-18"}}
    restricted = {"event": "ACCOUNT_RESTRICTION",
                  "restriction_info": [{"restriction_type": "RESTRICTED_ADD_PHONE_NUMBER_ACTION",
                                        "expiration": 1750350000}]}

    [ban] = parse_notification(notification("account_update", value))
    [restriction] = parse_notification(notification("account_update", restricted))

    assert isinstance(ban, AccountUpdate)
    assert (ban.waba_id, ban.event, ban.ban_info["waba_ban_state"]) == (WABA_ID, "DISABLED_UPDATE", "DISABLE")
    assert ban.restriction_info is None
    assert ban.raw["phone_number"] == "15550100001"
    assert restriction.restriction_info[0]["restriction_type"] == "RESTRICTED_ADD_PHONE_NUMBER_ACTION"


# What is ignored or skipped


def test_unknown_fields_are_ignored():
    payload = statuses(DELIVERED)
    payload["entry"][0]["changes"].insert(0, {"field": "business_capability_update",
                                              "value": {"max_daily_conversation_per_phone": 1000}})

    assert [type(u) for u in parse_notification(payload)] == [StatusUpdate]


@pytest.mark.parametrize(
    "payload",
    [None, [], "text", {}, {"object": "page", "entry": [{"id": "1", "changes": []}]},
     {"object": "whatsapp_business_account"}, {"object": "whatsapp_business_account", "entry": "x"},
     {"object": "whatsapp_business_account", "entry": [None, 1, {"changes": "x"}, {"changes": [None, 2]}]}],
)
def test_payloads_of_the_wrong_shape_give_no_updates(payload):
    assert parse_notification(payload) == []


@pytest.mark.parametrize(
    "broken",
    [
        {k: v for k, v in DELIVERED.items() if k != "id"},
        {k: v for k, v in DELIVERED.items() if k != "timestamp"},
        {**DELIVERED, "timestamp": "yesterday"},
        {**DELIVERED, "timestamp": "99999999999999999999"},
        {**DELIVERED, "status": "deleted"},
        {**DELIVERED, "status": ["read"]},
        {**DELIVERED, "id": ""},
        {**DELIVERED, "id": {"nested": True}},
        "not a status",
    ],
    ids=["no-id", "no-timestamp", "bad-timestamp", "huge-timestamp", "unknown-status", "status-list",
         "empty-id", "id-object", "string"],
)
def test_malformed_items_are_skipped_and_the_rest_kept(broken):
    updates = parse_notification(statuses(broken, DELIVERED))

    assert [u.wamid for u in updates] == [DELIVERED["id"]]


def test_malformed_messages_and_values_are_skipped():
    no_sender = {k: v for k, v in INBOUND_TEXT.items() if k != "from"}
    no_metadata = notification("messages", {"messages": [INBOUND_TEXT]})
    value_not_object = notification("messages", ["x"])
    bad_event = notification("phone_number_quality_update", {"event": None})
    one_broken = notification("messages", {"metadata": METADATA, "messages": [no_sender, INBOUND_TEXT]})

    assert [u.wamid for u in parse_notification(one_broken)] == ["wamid.in1"]
    assert parse_notification(no_metadata) == []
    assert parse_notification(value_not_object) == []
    assert parse_notification(bad_event) == []


# The platform's current shapes, as its documentation shows them: users by business-scoped id.

BSUID = "US.13491208655302741918"
CONTACT = {"profile": {"name": "Sheena Nelson", "username": "@realsheenanelson"}, "wa_id": "16505551234",
           "user_id": BSUID, "parent_user_id": "US.ENT.11815799212886844830"}
HIDDEN_CONTACT = {"profile": {"name": "Sheena Nelson", "username": "@realsheenanelson"}, "user_id": BSUID}


def current(field: str, **value) -> dict:
    return {"object": "whatsapp_business_account", "entry": [{"id": "102290129340398", "changes": [
        {"field": field, "value": {"messaging_product": "whatsapp",
                                   "metadata": {"display_phone_number": "15550783881", "phone_number_id": NUMBER_ID},
                                   **value}}]}]}


INBOUND_SAMPLES = [
    ({"type": "text", "text": {"body": "hi"}}, "hi", None),
    ({"type": "image", "image": {"caption": "receipt", "mime_type": "image/jpeg", "sha256": "x", "id": "1"}},
     "receipt", None),
    ({"type": "location", "location": {"latitude": 19.4, "longitude": -99.1, "name": "Office"}}, None, None),
    ({"type": "contacts", "contacts": [{"name": {"formatted_name": "Ana"}, "phones": [{"phone": "+1 555"}]}]},
     None, None),
    # The chosen reply's id is its payload, as a quick-reply button's payload is.
    ({"type": "interactive", "interactive": {"type": "button_reply", "button_reply": {"id": "y", "title": "Yes"}}},
     "Yes", "y"),
    ({"type": "interactive", "interactive": {"type": "list_reply",
                                             "list_reply": {"id": "m", "title": "Monthly", "description": "d"}}},
     "Monthly", "m"),
    ({"type": "button", "button": {"payload": "PAID", "text": "Ya pagué"},
      "context": {"from": "15550783881", "id": "wamid.TPL"}}, "Ya pagué", "PAID"),
    ({"type": "order", "order": {"catalog_id": "1", "product_items": []}}, None, None),
    ({"type": "reaction", "reaction": {"message_id": "wamid.X", "emoji": "👍"}}, "👍", None),
    ({"type": "unsupported", "errors": [{"code": 131051, "title": "Message type unknown",
                                         "error_data": {"details": "Message type is not currently supported"}}],
      "unsupported": {"type": "edit"}}, None, None),
]


@pytest.mark.parametrize(("content", "body", "payload"), INBOUND_SAMPLES)
@pytest.mark.parametrize("contact", [CONTACT, HIDDEN_CONTACT], ids=["shares-phone", "username-only"])
def test_every_inbound_type_names_its_user(content, body, payload, contact):
    message = {"from_user_id": BSUID, "id": "wamid.IN", "timestamp": "1750263773", **content}
    if "wa_id" in contact:
        message["from"] = contact["wa_id"]
    [update] = parse_notification(current("messages", contacts=[contact], messages=[message]))
    assert isinstance(update, InboundMessage)
    assert (update.type, update.body, update.payload) == (content["type"], body, payload)
    assert update.sender == PlatformUser(user_id=BSUID, wa_id=contact.get("wa_id"),
                                         parent_user_id=contact.get("parent_user_id"),
                                         username="@realsheenanelson", profile_name="Sheena Nelson")
    assert update.from_wa_id == contact.get("wa_id")


def test_an_edit_carries_the_new_text_and_the_original_id():
    message = {"from_user_id": BSUID, "id": "wamid.EDIT", "timestamp": "1750263773", "type": "edit",
               "edit": {"original_message_id": "wamid.ORIG", "message": {"type": "text", "text": {"body": "v2"}}}}
    [update] = parse_notification(current("messages", contacts=[HIDDEN_CONTACT], messages=[message]))
    assert (update.type, update.body, update.edited_wamid) == ("text", "v2", "wamid.ORIG")


def test_a_failed_status_with_pricing_names_a_username_recipient():
    status = {"id": "wamid.S", "status": "failed", "timestamp": "1750263773", "recipient_user_id": BSUID,
              "errors": [{"code": 131049, "title": "This message was not delivered to maintain healthy ecosystem "
                                                   "engagement.", "error_data": {"details": "..."}}],
              "pricing": {"billable": False, "pricing_model": "PMP", "type": "regular", "category": "marketing"}}
    [update] = parse_notification(current("messages", contacts=[HIDDEN_CONTACT], statuses=[status]))
    assert update.recipient_id == BSUID and update.recipient.username == "@realsheenanelson"
    assert update.errors[0]["code"] == 131049


def test_an_echo_to_a_username_user():
    echo = {"from": "15550783881", "to_user_id": BSUID, "id": "wamid.E", "timestamp": "1750263773",
            "type": "text", "text": {"body": "thanks"}}
    [update] = parse_notification(current("smb_message_echoes", contacts=[HIDDEN_CONTACT], message_echoes=[echo]))
    assert isinstance(update, EchoMessage) and update.to_wa_id is None and update.recipient.user_id == BSUID


def test_history_and_app_state_sync():
    history = [{"metadata": {"phase": 1, "chunk_order": 2, "progress": 80}, "threads": [
        {"id": "16505551234", "messages": [
            {"from": "16505551234", "id": "wamid.H1", "timestamp": "1750000000", "type": "text",
             "text": {"body": "old"}, "history_context": {"status": "READ"}},
            {"from": "16505551234", "id": "wamid.H2", "timestamp": "1750000500", "type": "image",
             "image": {"id": "1"}, "history_context": {"status": "READ"}},
            {"from": "15550783881", "to": "16505551234", "id": "wamid.H3", "timestamp": "1750000900",
             "type": "text", "text": {"body": "reply"}, "history_context": {"status": "DELIVERED"}}]}]}]
    [thread] = parse_notification(current("history", history=history))
    assert isinstance(thread, HistoryThread)
    assert (thread.user.wa_id, thread.messages, thread.phase, thread.progress) == ("16505551234", 3, 1, 80)
    assert thread.last_inbound_at == datetime.fromtimestamp(1750000500, UTC)
    state = [{"type": "contact", "contact": {"full_name": "Ana Pérez", "first_name": "Ana",
                                             "phone_number": "+1 650-555-1234"},
              "action": "add", "metadata": {"timestamp": "1750000000"}},
             {"type": "contact", "contact": {"phone_number": "16505550000"}, "action": "remove",
              "metadata": {"timestamp": "1750000001"}}]
    added, removed = parse_notification(current("smb_app_state_sync", state_sync=state))
    assert (added.wa_id, added.full_name, added.action) == ("16505551234", "Ana Pérez", "add")
    assert (removed.wa_id, removed.action) == ("16505550000", "remove")


def test_user_preferences():
    preference = {"wa_id": "16505551234", "user_id": BSUID, "detail": "User requested to stop marketing messages",
                  "category": "marketing_messages", "value": "stop", "timestamp": 1750000000}
    [update] = parse_notification(current("user_preferences", contacts=[CONTACT], user_preferences=[preference]))
    assert isinstance(update, UserPreference)
    assert (update.user.user_id, update.user.wa_id, update.value) == (BSUID, "16505551234", "stop")
