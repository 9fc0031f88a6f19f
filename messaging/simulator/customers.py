"""The people on the other side of a number's chats, played through the control endpoints: a
customer writes to the number (`POST /_sim/inbound`) or presses a quick-reply button of a template
message they got (`POST /_sim/press`), and the business answers from its own app (`POST /_sim/echo`).

Each is posted to the service at once, and the service's HTTP status returned, so a test knows it
was taken. A customer is named by phone number, business-scoped id or both (`users.user_ids`).
"""

from __future__ import annotations

from typing import Any

from messaging.simulator.errors import ControlError
from messaging.simulator.platform import Platform
from messaging.simulator.records import SimNumber, declared_buttons
from messaging.simulator.users import digits, new_wamid, user_ids
from messaging.simulator.webhook_sender import WebhookDeliveryError
from messaging.simulator.webhook_values import business_echo, button_press, text_from_user


def inbound(platform: Platform, from_wa_id: str | None, phone_number_id: str, text: str,
            name: str | None = None, user_id: str | None = None, deliveries: int = 1) -> dict[str, Any]:
    """A customer writes to a number: post a `messages` webhook now. A user given only by
    `user_id` (a username user who does not share their phone) comes without `from`."""
    number = platform.state.known_number(phone_number_id)
    wa_id, user_id = user_ids(from_wa_id, user_id)
    wamid = new_wamid(wa_id or digits(user_id))
    value = text_from_user(number, wa_id, user_id, wamid, text, name)
    return {"wamid": wamid, "user_id": user_id,
            "webhook_status": _post_now(platform, number, "messages", value, deliveries)}


def press(platform: Platform, wamid: str, index: int, deliveries: int = 1) -> dict[str, Any]:
    """The user presses a quick-reply button of a template message they got: a `button`
    message whose payload is the one the send gave that button (the button's text without
    one), replying to (`context`) the template message. `deliveries`: the same webhook posted
    that many times (a redelivery)."""
    state = platform.state
    with state.lock:
        record = next((item for item in state.sent if item["wamid"] == wamid), None)
        template = state.find_template(record["template"], record["language"]) if record else None
    if record is None or template is None:
        raise ControlError(404, f"no accepted template send {wamid}")
    declared = declared_buttons(template)
    if not 0 <= index < len(declared) or declared[index]["type"] != "QUICK_REPLY":
        raise ControlError(400, f"the template {record['template']} has no quick-reply button at index {index}")
    payload = declared[index]["text"]
    for component in record["components"] or []:
        if component.get("type") == "button" and str(component.get("index")) == str(index):
            payload = component["parameters"][0]["payload"]
    number = state.known_number(record["phone_number_id"])
    wa_id, user_id = user_ids(record["to"] if record["to"] != record["recipient"] else None, record["recipient"])
    reply = new_wamid(wa_id or digits(user_id))
    value = button_press(number, wa_id, user_id, reply, wamid, payload, declared[index]["text"])
    return {"wamid": reply, "payload": payload,
            "webhook_status": _post_now(platform, number, "messages", value, deliveries)}


def echo(platform: Platform, phone_number_id: str, to_wa_id: str | None, text: str,
         user_id: str | None = None) -> dict[str, Any]:
    """The business replies from its own app: post a `smb_message_echoes` webhook now."""
    number = platform.state.known_number(phone_number_id)
    wa_id, user_id = user_ids(to_wa_id, user_id)
    wamid = new_wamid(wa_id or digits(user_id))
    value = business_echo(number, wa_id, user_id, wamid, text)
    return {"wamid": wamid, "webhook_status": _post_now(platform, number, "smb_message_echoes", value)}


def _post_now(platform: Platform, number: SimNumber, field_name: str, value: dict[str, Any],
              deliveries: int = 1) -> int:
    if not platform.settings.webhook_url:
        raise ControlError(409, "no webhook_url is configured in the simulator")
    try:
        for _ in range(deliveries):
            status = platform.webhooks.post_now(number.waba_id, field_name, value)
        return status
    except WebhookDeliveryError as exc:
        raise ControlError(502, str(exc)) from exc
