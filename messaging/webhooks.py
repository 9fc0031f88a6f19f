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

from messaging.users import PlatformUser

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
    recipient: PlatformUser = field(default_factory=PlatformUser)
    # What the platform charges for the message (`billable`, `pricing_model`, `category`, `type`).
    pricing: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Media:
    """A media attachment as the platform reports it: its media id (downloadable through the
    Graph API with the number's token), type and, for documents, the file's name."""

    id: str
    mime_type: str | None = None
    filename: str | None = None


@dataclass(frozen=True, slots=True)
class InboundMessage:
    phone_number_id: str
    wamid: str
    from_wa_id: str | None
    type: str
    body: str | None
    timestamp: datetime
    raw: dict[str, Any]
    sender: PlatformUser = field(default_factory=PlatformUser)
    # A quick-reply button's payload or the id of the chosen interactive reply (button or list
    # row), and the edited message's original id.
    payload: str | None = None
    edited_wamid: str | None = None
    media: Media | None = None
    # The message this one answers (`context.id`): a template whose button was pressed, a quoted reply.
    context_wamid: str | None = None


@dataclass(frozen=True, slots=True)
class EchoMessage:
    """A message the business sent from its own app (coexistence)."""

    phone_number_id: str
    wamid: str
    to_wa_id: str | None
    type: str
    body: str | None
    timestamp: datetime
    raw: dict[str, Any]
    recipient: PlatformUser = field(default_factory=PlatformUser)


@dataclass(frozen=True, slots=True)
class SyncedContact:
    """One business-app contact from a coexistence `smb_app_state_sync` webhook."""

    phone_number_id: str
    wa_id: str | None
    user_id: str | None
    full_name: str | None
    action: str  # "add" or "remove"
    timestamp: datetime | None


@dataclass(frozen=True, slots=True)
class HistoryThread:
    """One chat of a coexistence `history` webhook: the messages are past ones, never acted on;
    only the last time the user wrote matters (it may still hold the 24-hour window open)."""

    phone_number_id: str
    user: PlatformUser
    last_inbound_at: datetime | None
    messages: int
    phase: int | None
    progress: int | None


@dataclass(frozen=True, slots=True)
class UserPreference:
    """A user stopped (`stop`) or resumed (`resume`) marketing messages."""

    phone_number_id: str
    user: PlatformUser
    category: str
    value: str
    timestamp: datetime | None


@dataclass(frozen=True, slots=True)
class TemplateStatusUpdate:
    waba_id: str
    template_id: str | None
    name: str | None
    language: str | None
    status: str
    reason: str | None = None
    # What the platform adds about a pause, a lock or a disable (`other_info`, `disable_info`).
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class TemplateQualityUpdate:
    waba_id: str
    template_id: str | None
    name: str | None
    language: str | None
    quality_score: str
    previous_quality_score: str | None


@dataclass(frozen=True, slots=True)
class TemplateCategoryUpdate:
    waba_id: str
    template_id: str | None
    name: str | None
    language: str | None
    category: str
    previous_category: str | None


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
    | TemplateQualityUpdate
    | TemplateCategoryUpdate
    | PhoneQualityUpdate
    | AccountUpdate
    | SyncedContact
    | HistoryThread
    | UserPreference
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


def status_callbacks(payload: Any) -> list[str]:
    """The `biz_opaque_callback_data` of every status in one webhook body, read without parsing
    anything else: what the body may prove about sends, known before anyone applies it."""
    found: dict[str, None] = {}  # in order, once each
    if not isinstance(payload, Mapping):
        return []
    for entry in _dicts(payload.get("entry")):
        for change in _dicts(entry.get("changes")):
            value = change.get("value")
            if change.get("field") != "messages" or not isinstance(value, Mapping):
                continue
            for item in _dicts(value.get("statuses")):
                callback = item.get("biz_opaque_callback_data")
                if isinstance(callback, str) and callback:
                    found[callback] = None
    return list(found)


def _parse_messages_field(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    phone_number_id = _phone_number_id(value)
    if phone_number_id is None:
        return
    _log_value_errors(value)
    users = _contact_users(value)
    yield from _built(_status, phone_number_id, _dicts(value.get("statuses")), users)
    yield from _built(_inbound, phone_number_id, _dicts(value.get("messages")), users)


def _parse_echoes(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    phone_number_id = _phone_number_id(value)
    if phone_number_id is None:
        return
    users = _contact_users(value)
    yield from _built(_echo, phone_number_id, _dicts(value.get("message_echoes")), users)


def _parse_app_state_sync(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    phone_number_id = _phone_number_id(value)
    if phone_number_id is None:
        return
    yield from _built(_synced_contact, phone_number_id, _dicts(value.get("state_sync")), {})


def _parse_history(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    phone_number_id = _phone_number_id(value)
    if phone_number_id is None:
        return
    _log_value_errors(value)
    for chunk in _dicts(value.get("history")):
        metadata = chunk.get("metadata") if isinstance(chunk.get("metadata"), Mapping) else {}
        yield from _built(lambda pid, item, _users, meta=metadata: _history_thread(pid, item, meta),
                          phone_number_id, _dicts(chunk.get("threads")), {})


def _parse_user_preferences(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    phone_number_id = _phone_number_id(value)
    if phone_number_id is None:
        return
    users = _contact_users(value)
    yield from _built(_user_preference, phone_number_id, _dicts(value.get("user_preferences")), users)


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
        detail=_template_detail(value),
    )


def _template_detail(value: Mapping[str, Any]) -> str | None:
    other = value.get("other_info")
    if isinstance(other, Mapping):
        parts = [_str_or_none(other.get("title")), _str_or_none(other.get("description"))]
        return ": ".join(part for part in parts if part) or None
    disable = value.get("disable_info")
    if isinstance(disable, Mapping) and disable.get("disable_date") is not None:
        return f"disabled on {disable.get('disable_date')}"
    return None


def _template_identity(value: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    template_id = value.get("message_template_id")
    return (str(template_id) if template_id is not None else None,
            _str_or_none(value.get("message_template_name")),
            _str_or_none(value.get("message_template_language")))


def _parse_template_quality(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    score = _str_or_none(value.get("new_quality_score"))
    if score is None:
        return
    template_id, name, language = _template_identity(value)
    yield TemplateQualityUpdate(waba_id=waba_id, template_id=template_id, name=name, language=language,
                                quality_score=score,
                                previous_quality_score=_str_or_none(value.get("previous_quality_score")))


def _parse_template_category(waba_id: str, value: Mapping[str, Any]) -> Iterator[Update]:
    category = _str_or_none(value.get("new_category"))
    if category is None:
        return
    template_id, name, language = _template_identity(value)
    yield TemplateCategoryUpdate(waba_id=waba_id, template_id=template_id, name=name, language=language,
                                 category=category, previous_category=_str_or_none(value.get("previous_category")))


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
        restriction_info=_dicts(restriction_info) if restriction_info is not None else None,
        raw=dict(value),
    )


_PARSERS: dict[Any, Callable[[str, Mapping[str, Any]], Iterator[Update]]] = {
    "messages": _parse_messages_field,
    "smb_message_echoes": _parse_echoes,
    "message_template_status_update": _parse_template_status,
    "message_template_quality_update": _parse_template_quality,
    "template_category_update": _parse_template_category,
    "phone_number_quality_update": _parse_quality,
    "account_update": _parse_account_update,
    "smb_app_state_sync": _parse_app_state_sync,
    "history": _parse_history,
    "user_preferences": _parse_user_preferences,
}


Users = dict[str, PlatformUser]


def _contact_users(value: Mapping[str, Any]) -> Users:
    """The value's `contacts`, indexed by every id each one carries."""
    users: Users = {}
    for contact in _dicts(value.get("contacts")):
        profile = contact.get("profile") if isinstance(contact.get("profile"), Mapping) else {}
        user = PlatformUser(
            user_id=_str_or_none(contact.get("user_id")) or None,
            wa_id=_str_or_none(contact.get("wa_id")) or None,
            parent_user_id=_str_or_none(contact.get("parent_user_id")),
            username=_str_or_none(profile.get("username")),
            profile_name=_str_or_none(profile.get("name")),
        )
        for key in (user.user_id, user.wa_id):
            if key:
                users[key] = user
    return users


def _user(users: Users, wa_id: Any, user_id: Any, parent_user_id: Any = None) -> PlatformUser:
    """The user an item names by phone number, business-scoped id or both, completed from the
    value's `contacts`."""
    wa_id, user_id = _str_or_none(wa_id) or None, _str_or_none(user_id) or None
    known = users.get(user_id or "") or users.get(wa_id or "")
    parent_user_id = _str_or_none(parent_user_id) or None
    if known is None:
        if wa_id is None and user_id is None:
            raise ValueError("the item names no user")
        return PlatformUser(user_id=user_id, wa_id=wa_id, parent_user_id=parent_user_id)
    if user_id in (None, known.user_id) and wa_id in (None, known.wa_id) \
            and parent_user_id in (None, known.parent_user_id):
        return known  # named as the contacts name them (a status batch's usual case)
    return PlatformUser(user_id=user_id or known.user_id, wa_id=wa_id or known.wa_id,
                        parent_user_id=parent_user_id or known.parent_user_id,
                        username=known.username, profile_name=known.profile_name)


def _status(phone_number_id: str, item: Mapping[str, Any], users: Users) -> StatusUpdate | None:
    status = item["status"]
    if status not in STATUSES:
        # e.g. a legacy "deleted": nothing the service tracks.
        return None
    recipient = _user(users, item.get("recipient_id"), item.get("recipient_user_id"),
                      item.get("recipient_parent_user_id"))
    return StatusUpdate(
        phone_number_id=phone_number_id,
        wamid=_required_str(item, "id"),
        status=status,
        timestamp=_timestamp(item["timestamp"]),
        recipient_id=recipient.key,
        callback_data=_str_or_none(item.get("biz_opaque_callback_data")),
        errors=_dicts(item.get("errors")),
        recipient=recipient,
        pricing=dict(pricing) if isinstance(pricing := item.get("pricing"), Mapping) else None,
    )


def _inbound(phone_number_id: str, item: Mapping[str, Any], users: Users) -> InboundMessage:
    system = item.get("system") if isinstance(item.get("system"), Mapping) else {}
    # A system message may name no sender: a user who changed their business-scoped id is named
    # by the new one inside `system`.
    sender = _user(users, item.get("from"), item.get("from_user_id") or system.get("user_id"),
                   item.get("from_parent_user_id"))
    for error in _dicts(item.get("errors")):
        log.warning("platform reports an error on inbound message %s: %s %s", item.get("id"),
                    error.get("code"), error.get("title"))
    content = item
    edit = item.get("edit")
    if isinstance(edit, Mapping) and isinstance(edit.get("message"), Mapping):
        content = edit["message"]
    context = content.get("context") if isinstance(content.get("context"), Mapping) else {}
    return InboundMessage(
        phone_number_id=phone_number_id,
        wamid=_required_str(item, "id"),
        from_wa_id=sender.wa_id,
        type=_required_str(content, "type"),
        body=_message_body(content),
        timestamp=_timestamp(item["timestamp"]),
        raw=dict(item),
        sender=sender,
        payload=_reply_payload(content),
        edited_wamid=_str_or_none(edit.get("original_message_id")) if isinstance(edit, Mapping) else None,
        media=_media(content),
        context_wamid=_str_or_none(context.get("id")),
    )


def _echo(phone_number_id: str, item: Mapping[str, Any], users: Users) -> EchoMessage:
    recipient = _user(users, item.get("to"), item.get("to_user_id"), item.get("to_parent_user_id"))
    return EchoMessage(
        phone_number_id=phone_number_id,
        wamid=_required_str(item, "id"),
        to_wa_id=recipient.wa_id,
        type=_required_str(item, "type"),
        body=_message_body(item),
        timestamp=_timestamp(item["timestamp"]),
        raw=dict(item),
        recipient=recipient,
    )


def _synced_contact(phone_number_id: str, item: Mapping[str, Any], _users: Users) -> SyncedContact | None:
    contact = item.get("contact")
    if item.get("type") != "contact" or not isinstance(contact, Mapping):
        return None
    wa_id = _str_or_none(contact.get("phone_number")) or None
    user_id = _str_or_none(contact.get("user_id")) or None
    if wa_id is None and user_id is None:
        raise ValueError("the contact names no user")
    action = str(item.get("action") or "add").lower()
    timestamp = item.get("metadata", {}).get("timestamp") if isinstance(item.get("metadata"), Mapping) else None
    return SyncedContact(
        phone_number_id=phone_number_id,
        wa_id="".join(ch for ch in wa_id if ch.isdigit()) if wa_id else None,
        user_id=user_id,
        full_name=_str_or_none(contact.get("full_name")),
        action=action,
        timestamp=_timestamp(timestamp) if timestamp is not None else None,
    )


def _history_thread(phone_number_id: str, thread: Mapping[str, Any], metadata: Mapping[str, Any]) -> HistoryThread:
    user = PlatformUser(wa_id=_str_or_none(thread.get("id")) or None,
                        user_id=_str_or_none(thread.get("user_id")) or None)
    if user.key is None:
        raise ValueError("the thread names no user")
    last_inbound: datetime | None = None
    count = 0
    for message in _dicts(thread.get("messages")):
        count += 1
        # The user's own messages carry `from` = the user; the business's carry its number.
        sender = _str_or_none(message.get("from_user_id")) or _str_or_none(message.get("from"))
        if sender not in {user.wa_id, user.user_id} or message.get("timestamp") is None:
            continue
        at = _timestamp(message["timestamp"])
        if last_inbound is None or at > last_inbound:
            last_inbound = at
    return HistoryThread(phone_number_id=phone_number_id, user=user, last_inbound_at=last_inbound,
                         messages=count, phase=_int_or_none(metadata.get("phase")),
                         progress=_int_or_none(metadata.get("progress")))


def _user_preference(phone_number_id: str, item: Mapping[str, Any], users: Users) -> UserPreference:
    user = _user(users, item.get("wa_id"), item.get("user_id"), item.get("parent_user_id"))
    timestamp = item.get("timestamp")
    return UserPreference(phone_number_id=phone_number_id, user=user,
                          category=str(item.get("category") or "marketing_messages"),
                          value=_required_str(item, "value").lower(),
                          timestamp=_timestamp(timestamp) if timestamp is not None else None)


def _log_value_errors(value: Mapping[str, Any]) -> None:
    # Errors at the value level concern the whole change (e.g. an unsupported message kind).
    for error in _dicts(value.get("errors")):
        log.warning("platform reports an error in a webhook: %s %s (%s)", error.get("code"), error.get("title"),
                    (error.get("error_data") or {}).get("details") if isinstance(error.get("error_data"), Mapping)
                    else None)


MEDIA_TYPES = frozenset({"image", "video", "audio", "document", "sticker"})


def _content(item: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The object named by the message's type (`{"type": "image", "image": {...}}`)."""
    kind = item.get("type")
    content = item.get(kind) if isinstance(kind, str) else None
    return content if isinstance(content, Mapping) else None


def _message_body(item: Mapping[str, Any]) -> str | None:
    """The text a person would read: text body, media caption, the chosen reply, a reaction's
    emoji, an order's note, or what a system message says."""
    kind, content = item.get("type"), _content(item)
    if content is None:
        return None
    if kind in ("text", "system"):
        return _str_or_none(content.get("body"))
    if kind in ("button", "order"):
        return _str_or_none(content.get("text")) or None
    if kind == "reaction":
        return _str_or_none(content.get("emoji")) or None  # none: the reaction was removed
    if kind == "interactive":
        reply = _interactive_reply(content)
        return _str_or_none(reply.get("title")) if reply is not None else None
    return _str_or_none(content.get("caption"))


def _interactive_reply(content: Mapping[str, Any]) -> Mapping[str, Any] | None:
    reply = content.get("button_reply") or content.get("list_reply")
    return reply if isinstance(reply, Mapping) else None


def _reply_payload(item: Mapping[str, Any]) -> str | None:
    """What the business put behind the reply the user chose: a template quick-reply button's
    payload, or the id of an interactive button or list row."""
    kind, content = item.get("type"), _content(item)
    if content is None:
        return None
    if kind == "button":
        return _str_or_none(content.get("payload"))
    if kind == "interactive":
        reply = _interactive_reply(content)
        return _str_or_none(reply.get("id")) if reply is not None else None
    return None


def _media(item: Mapping[str, Any]) -> Media | None:
    content = _content(item)
    if item.get("type") not in MEDIA_TYPES or content is None or not content.get("id"):
        return None
    return Media(id=str(content["id"]), mime_type=_str_or_none(content.get("mime_type")),
                 filename=_str_or_none(content.get("filename")))


def _built(
    build: Callable[[str, Mapping[str, Any], Users], Update | None],
    phone_number_id: str,
    items: list[Mapping[str, Any]],
    users: Users,
) -> Iterator[Update]:
    """What `build` makes of each item, the malformed ones skipped (and logged)."""
    for item in items:
        try:
            update = build(phone_number_id, item, users)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            log.warning("skipping malformed platform webhook item: %r", exc)
            continue
        if update is not None:
            yield update


def _phone_number_id(value: Mapping[str, Any]) -> str | None:
    metadata = value.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("phone_number_id"):
        return str(metadata["phone_number_id"])
    return None


def _dicts(items: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON list; nothing when `items` is not a list."""
    if not isinstance(items, list):
        return []
    # `type(...) is dict` first: JSON objects are dicts, and an ABC's isinstance costs more.
    return [item for item in items if type(item) is dict or isinstance(item, Mapping)]


def _timestamp(value: Any) -> datetime:
    # Unix seconds, sent as a string.
    return datetime.fromtimestamp(int(value), tz=UTC)


def _required_str(item: Mapping[str, Any], key: str) -> str:
    value = item[key]
    if not isinstance(value, (str, int)) or value == "":
        raise ValueError(f"{key} is missing")
    return str(value)


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _str_or_none(value: Any) -> str | None:
    return str(value) if value is not None else None
