"""What the simulated platform posts: the `value` of each webhook change, by its field.

- `messages`: the statuses of an accepted send; what a user sends (a text, a quick-reply press).
- `smb_message_echoes`: what the business answers from its own app.
- `phone_number_quality_update`, `message_template_status_update`,
  `message_template_quality_update`, `template_category_update`.
- `smb_app_state_sync`, `history`: a coexistence sync.

The behaviour that causes one builds its value here and hands it to `webhook_sender`. Another kind
of webhook (another message a user sends) is another function here.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from messaging.simulator.records import SimNumber
from messaging.simulator.users import business_app_contacts, contact_entry, digits, new_wamid

# A message the platform could not deliver after accepting it.
UNDELIVERABLE = {
    "code": 131026,
    "title": "Message undeliverable",
    "message": "Message undeliverable",
    "error_data": {"details": "The recipient could not be reached."},
}


def message_status(
    wamid: str, name: str, contact: dict[str, Any], callback_data: str | None, **extra: Any
) -> dict[str, Any]:
    """One status of a send, for `WebhookSender.schedule`, which groups statuses into `messages`
    values and takes `_contact` out into the value's `contacts`."""
    item: dict[str, Any] = {
        "id": wamid,
        "status": name,
        "timestamp": str(int(time.time())),
        "recipient_user_id": contact["user_id"],
        "_contact": contact,
    }
    if contact.get("wa_id"):
        item["recipient_id"] = contact["wa_id"]
    if callback_data is not None:
        item["biz_opaque_callback_data"] = callback_data
    item.update(extra)
    return item


def failed_status(wamid: str, contact: dict[str, Any], callback_data: str | None) -> dict[str, Any]:
    return message_status(wamid, "failed", contact, callback_data, errors=[UNDELIVERABLE])


def delivered_and_read(
    wamid: str, contact: dict[str, Any], callback_data: str | None, category: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `delivered` status (with its conversation) and the `read` one, billed by `category`:
    a template's, or `service` for a free message inside the customer-service window."""
    conversation = {
        "id": secrets.token_hex(16),
        "origin": {"type": category},
    }
    pricing = {"billable": category != "service", "pricing_model": "PMP",
               "type": "regular" if category != "service" else "free_customer_service",
               "category": category}
    return (message_status(wamid, "delivered", contact, callback_data, conversation=conversation, pricing=pricing),
            message_status(wamid, "read", contact, callback_data, pricing=pricing))


def user_message(
    number: SimNumber, wa_id: str | None, user_id: str, message: dict[str, Any], name: str | None = None
) -> dict[str, Any]:
    """A `messages` value for one message a user sent the number: `from` only when the user
    shares their phone."""
    if wa_id:
        message = {"from": wa_id, **message}
    return {
        "messaging_product": "whatsapp",
        "metadata": number.metadata(),
        "contacts": [contact_entry(wa_id, user_id, name)],
        "messages": [message],
    }


def text_from_user(
    number: SimNumber, wa_id: str | None, user_id: str, wamid: str, text: str, name: str | None
) -> dict[str, Any]:
    message = {"from_user_id": user_id, "id": wamid, "timestamp": str(int(time.time())), "type": "text",
               "text": {"body": text}}
    return user_message(number, wa_id, user_id, message, name)


def button_press(
    number: SimNumber, wa_id: str | None, user_id: str, wamid: str, replying_to: str, payload: str, text: str
) -> dict[str, Any]:
    """A `button` message: the user pressed a quick-reply button of the template message `replying_to`."""
    message = {
        "context": {"from": digits(number.display_phone_number), "id": replying_to},
        "from_user_id": user_id, "id": wamid, "timestamp": str(int(time.time())), "type": "button",
        "button": {"payload": payload, "text": text}}
    return user_message(number, wa_id, user_id, message)


def business_echo(number: SimNumber, wa_id: str | None, user_id: str, wamid: str, text: str) -> dict[str, Any]:
    """What the business answered from its own app (`smb_message_echoes`)."""
    echo: dict[str, Any] = {"from": digits(number.display_phone_number), "to_user_id": user_id, "id": wamid,
                            "timestamp": str(int(time.time())), "type": "text", "text": {"body": text}}
    if wa_id:
        echo["to"] = wa_id
    return {
        "messaging_product": "whatsapp",
        "metadata": number.metadata(),
        "contacts": [contact_entry(wa_id, user_id)],
        "message_echoes": [echo],
    }


def quality_update(number: SimNumber, event: str) -> dict[str, Any]:
    """`phone_number_quality_update`: FLAGGED, UNFLAGGED, UPGRADE or DOWNGRADE."""
    return {
        "display_phone_number": digits(number.display_phone_number),
        "event": event,
        "current_limit": number.messaging_limit_tier,
    }


def template_status_update(template: dict[str, Any], reason: str | None,
                           other_info: dict[str, str] | None = None) -> dict[str, Any]:
    """`message_template_status_update`: the template's new status, and why where it says
    (`reason` for a rejection, `other_info` for a pause)."""
    value = {
        "event": template["status"],
        "message_template_id": int(template["id"]),
        "message_template_name": template["name"],
        "message_template_language": template["language"],
        "message_template_category": template["category"],
        "reason": reason or "NONE",
    }
    if other_info:
        value["other_info"] = other_info
    return value


def template_quality_update(template: dict[str, Any], previous: str | None) -> dict[str, Any]:
    """`message_template_quality_update`: the template's quality rating moved."""
    return {
        "previous_quality_score": previous or "UNKNOWN",
        "new_quality_score": template["quality_score"]["score"],
        "message_template_id": int(template["id"]),
        "message_template_name": template["name"],
        "message_template_language": template["language"],
    }


def template_category_update(template: dict[str, Any], previous: str) -> dict[str, Any]:
    """`template_category_update`: the platform moved the template to another category."""
    return {
        "message_template_id": int(template["id"]),
        "message_template_name": template["name"],
        "message_template_language": template["language"],
        "previous_category": previous,
        "new_category": template["category"],
    }


def business_app_sync(number: SimNumber, sync_type: str) -> list[dict[str, Any]]:
    """What a coexistence sync delivers: the app's contacts in one `smb_app_state_sync` webhook;
    its chats in `history` chunks (the first contact wrote an hour ago and was answered), the
    last chunk sent twice, as the platform may."""
    now = int(time.time())
    contacts = business_app_contacts(number.id)
    base = {"messaging_product": "whatsapp", "metadata": number.metadata()}
    if sync_type == "smb_app_state_sync":
        return [{**base, "state_sync": [
            {"type": "contact", "contact": {"full_name": name, "first_name": name.split()[0], "phone_number": phone},
             "action": "add", "metadata": {"timestamp": str(now)}} for phone, name in contacts]}]
    business = digits(number.display_phone_number)
    chunks = []
    for order, (phone, _) in enumerate(contacts[:2], start=1):
        wrote = now - 3600 if order == 1 else now - 3 * 86400
        messages = [
            {"from": phone, "id": new_wamid(phone), "timestamp": str(wrote), "type": "text",
             "text": {"body": "Hola, ¿cuánto debo?"}, "history_context": {"status": "READ"}},
            {"from": business, "to": phone, "id": new_wamid(phone), "timestamp": str(wrote + 60), "type": "text",
             "text": {"body": "Te aviso enseguida"}, "history_context": {"status": "DELIVERED"}},
        ]
        chunks.append({**base, "history": [{"metadata": {"phase": 0, "chunk_order": order, "progress": 50 * order},
                                            "threads": [{"id": phone, "messages": messages}]}]})
    return [*chunks, chunks[-1]]
