"""`POST /{phone_number_id}/messages`: a send checked and accepted as the platform does, its
statuses posted a moment later; mark-as-read (`status: read`, `message_id`, an optional typing
indicator; no `to`); and the outages `POST /_sim/fail` sets.

Behaviour by recipient (the phone number, or a business-scoped id's digits): ends in `0000`:
refused (131026, permanent); ends in `0429`: the first attempt throttled (130429), later ones
accepted; ends in `9999`: accepted, then a `failed` status; any other: accepted, then
`delivered` and `read`. Past a number's cap (`ThroughputWindow`) a send is throttled (130429); a
number blocked by `POST /_sim/numbers/{id}` refuses every send with its code (368, 131042).

Choices where the platform varies: throttling (130429) is answered with HTTP 400, as the
platform's error-code reference lists it, so callers must decide on `error.code`; a send that
hangs in "timeout" mode is still accepted once the hang ends, as the real platform may accept a
message whose answer the caller never saw.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from messaging.simulator.errors import ControlError, GraphError
from messaging.simulator.httpserver import DropConnection
from messaging.simulator.platform import Platform
from messaging.simulator.records import SimNumber
from messaging.simulator.state import PlatformState
from messaging.simulator.template_checks import check_template
from messaging.simulator.users import BSUID, contact_entry, digits, new_wamid, user_id_for
from messaging.simulator.webhook_values import delivered_and_read, failed_status

SEND_TYPES = frozenset(
    {"text", "template", "image", "video", "audio", "document", "sticker", "interactive",
     "location", "contacts", "reaction"}
)
FAILURE_MODES = ("500", "timeout", "off")


def send(platform: Platform, number: SimNumber, body: Any) -> dict[str, Any]:
    state = platform.state
    _apply_failure_mode(platform)
    if isinstance(body, dict) and body.get("status") == "read":
        answer = _mark_read(body)
        with state.lock:
            state.reads.append({"phone_number_id": number.id, "message_id": body["message_id"],
                                "typing": body.get("typing_indicator") is not None})
        return answer
    message = _validate_message(body)
    _check_blocked(number)
    wa_id, user_id = _recipient(message)
    # The behaviours by suffix, throttling and wamids go by the phone, or the id's digits.
    to = wa_id or digits(user_id)
    template = name = language = None
    if message["type"] == "template":
        name = message["template"]["name"]
        language = message["template"]["language"]["code"]
        with state.lock:
            template = state.find_template(name, language)
        check_template(template, message["template"])
    with state.lock:
        if not number.bucket.take():
            state.throttled += 1
            raise _rate_limit_hit()
        # Taken with the window's own check: `/_sim/sent` shows the times the cap counted.
        accepted_at = datetime.now(UTC)
        if to.endswith("0429") and to not in state.throttled_once:
            state.throttled_once.add(to)
            state.changed = True
            raise _rate_limit_hit()
    if to.endswith("0000"):
        raise GraphError(
            400, 131026, "(#131026) Message Undeliverable.",
            details="Message Undeliverable.",
        )

    wamid = new_wamid(to)
    callback_data = message.get("biz_opaque_callback_data")
    state.record_send({
        "to": wa_id or user_id,
        "recipient": user_id,
        "type": message["type"],
        "template": name,
        "language": language,
        "components": (message.get("template") or {}).get("components"),
        "biz_opaque_callback_data": callback_data,
        "wamid": wamid,
        "phone_number_id": number.id,
        "at": accepted_at.isoformat(),
    })
    _schedule_statuses(platform, number, wamid, to, callback_data, template, contact_entry(wa_id, user_id))
    result: dict[str, Any] = {"id": wamid}
    if template is not None:
        result["message_status"] = "accepted"
    contact: dict[str, Any] = {"input": message.get("to") or message["recipient"], "user_id": user_id}
    if wa_id:
        contact["wa_id"] = wa_id
    return {"messaging_product": "whatsapp", "contacts": [contact], "messages": [result]}


def fail(state: PlatformState, mode: str, seconds: float = 60.0, hang: float | None = None) -> None:
    """Make sends answer 500 ("500") or hang ("timeout") for `seconds`; "off" ends it."""
    if mode not in FAILURE_MODES:
        raise ControlError(400, 'mode must be "500", "timeout" or "off"')
    with state.lock:
        state.fail_mode = mode
        state.fail_until = time.monotonic() + float(seconds)
        if hang is not None:
            state.hang = float(hang)


def _apply_failure_mode(platform: Platform) -> None:
    state = platform.state
    with state.lock:
        active = state.fail_mode != "off" and time.monotonic() < state.fail_until
        mode, hang = state.fail_mode, state.hang
    if not active:
        return
    if mode == "500":
        raise GraphError(
            500, 131000, "(#131000) Something went wrong",
            details="The simulator is set to fail sends.",
        )
    # "timeout": hang past the caller's timeout, then carry on and accept the message.
    if platform.stopping.wait(hang):
        raise DropConnection


def _rate_limit_hit() -> GraphError:
    return GraphError(400, 130429, "(#130429) Rate limit hit",
                      details="Cloud API message throughput has been reached.")


def _check_blocked(number: SimNumber) -> None:
    if number.blocked == 368:
        raise GraphError(400, 368, "(#368) Temporarily blocked for policies violations",
                         details="The business account is restricted from messaging for a policy violation.")
    if number.blocked == 131042:
        raise GraphError(400, 131042, "(#131042) Business eligibility payment issue",
                         details="There was an error related to your payment method.")


def _schedule_statuses(
    platform: Platform,
    number: SimNumber,
    wamid: str,
    to: str,
    callback_data: str | None,
    template: dict[str, Any] | None,
    contact: dict[str, Any],
) -> None:
    settings = platform.settings
    if not settings.webhook_url:
        return
    now = time.monotonic()
    metadata = number.metadata()
    schedule = platform.webhooks.schedule
    if to.endswith("9999"):
        schedule(now + settings.delivered_delay, number.waba_id, metadata, failed_status(wamid, contact, callback_data))
        return
    category = str(template["category"]).lower() if template else "service"
    delivered, read = delivered_and_read(wamid, contact, callback_data, category)
    schedule(now + settings.delivered_delay, number.waba_id, metadata, delivered)
    schedule(now + settings.read_delay, number.waba_id, metadata, read)


def _mark_read(body: dict[str, Any]) -> dict[str, Any]:
    """Mark-as-read (with a typing indicator when asked): no `to`, the message id names the chat."""
    if body.get("messaging_product") != "whatsapp":
        raise GraphError(400, 100, "(#100) The parameter messaging_product is required.")
    if not isinstance(body.get("message_id"), str) or not body["message_id"].startswith("wamid."):
        raise GraphError(400, 100, "(#100) The parameter message_id is required.")
    typing = body.get("typing_indicator")
    if typing is not None and (not isinstance(typing, dict) or typing.get("type") != "text"):
        raise GraphError(400, 100, "(#100) Invalid parameter", details="typing_indicator.type must be text")
    return {"success": True}


def _recipient(message: dict[str, Any]) -> tuple[str | None, str]:
    """The phone number (None for a send by business-scoped id) and the user id of a send."""
    recipient = message.get("recipient")
    if isinstance(recipient, str) and recipient:
        if not BSUID.match(recipient):
            raise GraphError(400, 100, "(#100) Invalid parameter",
                             details="recipient must be a business-scoped user id")
        return None, recipient
    wa_id = digits(message["to"])
    return wa_id, user_id_for(wa_id)


def _validate_message(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise GraphError(400, 100, "(#100) Invalid parameter", details="body must be JSON")
    if body.get("messaging_product") != "whatsapp":
        raise GraphError(400, 100, "(#100) The parameter messaging_product is required.")
    has_to = isinstance(body.get("to"), str) and bool(digits(body["to"]))
    if not has_to and not (isinstance(body.get("recipient"), str) and body["recipient"]):
        raise GraphError(400, 100, "(#100) The parameter to is required.")
    kind = body.setdefault("type", "text")
    if kind not in SEND_TYPES:
        raise GraphError(
            400, 100, "(#100) Invalid parameter", details=f"type {kind!r} is not supported"
        )
    if not isinstance(body.get(kind), dict):
        raise GraphError(400, 100, f"(#100) The parameter {kind} is required.")
    if kind == "text" and not body["text"].get("body"):
        raise GraphError(400, 100, "(#100) The parameter text['body'] is required.")
    if kind == "template":
        template = body["template"]
        if not isinstance(template.get("name"), str):
            raise GraphError(400, 100, "(#100) The parameter template['name'] is required.")
        language = template.get("language")
        if not isinstance(language, dict) or not isinstance(language.get("code"), str):
            raise GraphError(
                400, 100, "(#100) The parameter template['language']['code'] is required."
            )
    return body
