"""Signature check and parser for the platform's webhooks.

The platform signs each POST with `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw
body keyed with the app secret>`. The body is `{"object": "whatsapp_business_account",
"entry": [{"id": <waba id>, "changes": [{"field": ..., "value": {...}}]}]}`, and one POST
may carry many updates (up to 1000), in no particular order, possibly again later.

`parse_notification` never raises on content: unknown fields are ignored and malformed
items are skipped, so one odd item cannot make the platform retry the whole batch.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Hub-Signature-256"
STATUSES = frozenset({"sent", "delivered", "read", "failed"})


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    phone_number_id: str
    wamid: str
    status: str
    timestamp: datetime
    recipient_id: str | None
    callback_data: str | None
    errors: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class InboundMessage:
    phone_number_id: str
    wamid: str
    from_wa_id: str
    type: str
    body: str | None
    timestamp: datetime
    raw: dict[str, Any]


@dataclass(frozen=True, slots=True)
class EchoMessage:
    """A message the business sent from its own app (coexistence)."""

    phone_number_id: str
    wamid: str
    to_wa_id: str
    type: str
    body: str | None
    timestamp: datetime
    raw: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TemplateStatusUpdate:
    waba_id: str
    template_id: str | None
    name: str | None
    language: str | None
    status: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class PhoneQualityUpdate:
    waba_id: str
    display_phone_number: str | None
    event: str
    current_limit: str | None


@dataclass(frozen=True, slots=True)
class AccountUpdate:
    waba_id: str
    event: str
    ban_info: dict[str, Any] | None
    restriction_info: list[dict[str, Any]] | None
    raw: dict[str, Any]


Update = (
    StatusUpdate
    | InboundMessage
    | EchoMessage
    | TemplateStatusUpdate
    | PhoneQualityUpdate
    | AccountUpdate
)


def sign(body: bytes, app_secret: str) -> str:
    digest = hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify_signature(header_value: str | None, body: bytes, app_secret: str) -> bool:
    """True when `header_value` is the platform's signature of `body` (constant time)."""
    if not header_value or not app_secret or not header_value.startswith("sha256="):
        return False
    return hmac.compare_digest(header_value.encode(), sign(body, app_secret).encode())


def parse_notification(payload: Any) -> list[Update]:
    """Turn one webhook body into updates, in the order they appear."""
    if not isinstance(payload, Mapping) or payload.get("object") != "whatsapp_business_account":
        return []
    updates: list[Update] = []
    for entry in _dicts(payload.get("entry")):
        waba_id = str(entry.get("id") or "")
        for change in _dicts(entry.get("changes")):
            parser = _PARSERS.get(change.get("field"))
            value = change.get("value")
            if parser is None or not isinstance(value, Mapping):
                continue
            updates.extend(parser(waba_id, value))
    return updates


def _parse_messages_field(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    phone_number_id = _phone_number_id(value)
    if phone_number_id is None:
        return
    for item in _dicts(value.get("statuses")):
        yield from _skip_malformed(_status, phone_number_id, item)
    for item in _dicts(value.get("messages")):
        yield from _skip_malformed(_inbound, phone_number_id, item)


def _parse_echoes(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    phone_number_id = _phone_number_id(value)
    if phone_number_id is None:
        return
    for item in _dicts(value.get("message_echoes")):
        yield from _skip_malformed(_echo, phone_number_id, item)


def _parse_template_status(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    event = value.get("event")
    if not isinstance(event, str) or not event:
        return
    template_id = value.get("message_template_id")
    yield TemplateStatusUpdate(
        waba_id=waba_id,
        template_id=str(template_id) if template_id is not None else None,
        name=_str_or_none(value.get("message_template_name")),
        language=_str_or_none(value.get("message_template_language")),
        status=event,
        reason=_str_or_none(value.get("reason")),
    )


def _parse_quality(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    event = value.get("event")
    if not isinstance(event, str) or not event:
        return
    yield PhoneQualityUpdate(
        waba_id=waba_id,
        display_phone_number=_str_or_none(value.get("display_phone_number")),
        event=event,
        current_limit=_str_or_none(value.get("current_limit")),
    )


def _parse_account_update(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    event = value.get("event")
    if not isinstance(event, str) or not event:
        return
    ban_info = value.get("ban_info")
    restriction_info = value.get("restriction_info")
    yield AccountUpdate(
        waba_id=waba_id,
        event=event,
        ban_info=dict(ban_info) if isinstance(ban_info, Mapping) else None,
        restriction_info=list(_dicts(restriction_info)) if restriction_info is not None else None,
        raw=dict(value),
    )


_PARSERS: dict[Any, Callable[[str, Mapping[str, Any]], Iterator[Update]]] = {
    "messages": _parse_messages_field,
    "smb_message_echoes": _parse_echoes,
    "message_template_status_update": _parse_template_status,
    "phone_number_quality_update": _parse_quality,
    "account_update": _parse_account_update,
}


def _status(phone_number_id: str, item: Mapping[str, Any]) -> StatusUpdate | None:
    status = item["status"]
    if status not in STATUSES:
        # e.g. a legacy "deleted": nothing the service tracks.
        return None
    return StatusUpdate(
        phone_number_id=phone_number_id,
        wamid=_required_str(item, "id"),
        status=status,
        timestamp=_timestamp(item["timestamp"]),
        recipient_id=_str_or_none(item.get("recipient_id")),
        callback_data=_str_or_none(item.get("biz_opaque_callback_data")),
        errors=list(_dicts(item.get("errors"))),
    )


def _inbound(phone_number_id: str, item: Mapping[str, Any]) -> InboundMessage:
    return InboundMessage(
        phone_number_id=phone_number_id,
        wamid=_required_str(item, "id"),
        from_wa_id=_required_str(item, "from"),
        type=_required_str(item, "type"),
        body=_message_body(item),
        timestamp=_timestamp(item["timestamp"]),
        raw=dict(item),
    )


def _echo(phone_number_id: str, item: Mapping[str, Any]) -> EchoMessage:
    return EchoMessage(
        phone_number_id=phone_number_id,
        wamid=_required_str(item, "id"),
        to_wa_id=_required_str(item, "to"),
        type=_required_str(item, "type"),
        body=_message_body(item),
        timestamp=_timestamp(item["timestamp"]),
        raw=dict(item),
    )


def _message_body(item: Mapping[str, Any]) -> str | None:
    """The text a person would read: text body, media caption, or the chosen reply."""
    kind = item.get("type")
    content = item.get(kind) if isinstance(kind, str) else None
    if not isinstance(content, Mapping):
        return None
    if kind == "text":
        return _str_or_none(content.get("body"))
    if kind == "button":
        return _str_or_none(content.get("text"))
    if kind == "interactive":
        reply = content.get("button_reply") or content.get("list_reply")
        return _str_or_none(reply.get("title")) if isinstance(reply, Mapping) else None
    return _str_or_none(content.get("caption"))


def _skip_malformed(
    build: Callable[[str, Mapping[str, Any]], Update | None],
    phone_number_id: str,
    item: Mapping[str, Any],
) -> Iterator[Update]:
    try:
        update = build(phone_number_id, item)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        log.warning("skipping malformed platform webhook item: %r", exc)
        return
    if update is not None:
        yield update


def _phone_number_id(value: Mapping[str, Any]) -> str | None:
    metadata = value.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("phone_number_id"):
        return str(metadata["phone_number_id"])
    return None


def _dicts(items: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(items, list):
        yield from (item for item in items if isinstance(item, Mapping))


def _timestamp(value: Any) -> datetime:
    # Unix seconds, sent as a string.
    return datetime.fromtimestamp(int(value), tz=UTC)


def _required_str(item: Mapping[str, Any], key: str) -> str:
    value = item[key]
    if not isinstance(value, (str, int)) or value == "":
        raise ValueError(f"{key} is missing")
    return str(value)


def _str_or_none(value: Any) -> str | None:
    return str(value) if value is not None else None
