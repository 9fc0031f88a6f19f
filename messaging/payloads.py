"""Bodies for `POST /{phone_number_id}/messages` (WhatsApp Cloud API shapes).

Pure functions: they only build dicts. `callback_data` travels as
`biz_opaque_callback_data`, which the platform echoes back in every status webhook of
the message; the service uses it to reconcile sends whose answer was lost.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# A business-scoped user id: two-letter country code, a dot, an optional ENT., alphanumerics.
USER_ID = re.compile(r"^[A-Z]{2}\.(?:ENT\.)?[A-Za-z0-9]{1,128}$")

MEDIA_KINDS = frozenset({"image", "video", "audio", "document", "sticker"})
HEADER_MEDIA_KINDS = frozenset({"image", "video", "document"})
# The platform rejects a caption on these.
_NO_CAPTION_KINDS = frozenset({"audio", "sticker"})


def template_message(
    to: str,
    name: str,
    language: str,
    body_params: Sequence[str] = (),
    header: Mapping[str, Any] | None = None,
    callback_data: str | None = None,
    buttons: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A template message with positional body parameters.

    `header` is for media headers: `{"type": "image"|"video"|"document", "link": url}` or
    `{"type": ..., "id": media_id}`; a document may add `"filename"`.
    `buttons` fill the template's dynamic buttons, by their index in the template:
    `{"index": 0, "type": "url", "text": "pay/abc"}` (the URL's variable suffix) or
    `{"index": 1, "type": "quick_reply", "payload": "PAID"}`.
    """
    components: list[dict[str, Any]] = []
    if header is not None:
        components.append({"type": "header", "parameters": [_header_parameter(header)]})
    if body_params:
        components.append(
            {
                "type": "body",
                "parameters": [{"type": "text", "text": str(value)} for value in body_params],
            }
        )
    components.extend(_button_component(button) for button in buttons)
    template: dict[str, Any] = {"name": name, "language": {"code": language}}
    if components:
        template["components"] = components
    return _message(to, "template", template, callback_data)


def text_message(
    to: str, body: str, preview_url: bool = False, callback_data: str | None = None
) -> dict[str, Any]:
    return _message(to, "text", {"preview_url": preview_url, "body": body}, callback_data)


def media_message(
    to: str,
    kind: str,
    link: str | None = None,
    media_id: str | None = None,
    caption: str | None = None,
    filename: str | None = None,
    callback_data: str | None = None,
) -> dict[str, Any]:
    """An image, video, audio, document or sticker message, by `link` or uploaded `media_id`."""
    if kind not in MEDIA_KINDS:
        raise ValueError(f"unsupported media kind {kind!r}")
    media = _media_object(link, media_id)
    if caption is not None:
        if kind in _NO_CAPTION_KINDS:
            raise ValueError(f"{kind} messages take no caption")
        media["caption"] = caption
    if filename is not None:
        if kind != "document":
            raise ValueError("only document messages take a filename")
        media["filename"] = filename
    return _message(to, kind, media, callback_data)


def interactive_buttons(
    to: str,
    body: str,
    buttons: Sequence[Mapping[str, str]],
    header: str | Mapping[str, Any] | None = None,
    footer: str | None = None,
    callback_data: str | None = None,
) -> dict[str, Any]:
    """Reply buttons: 1 to 3 items `{"id", "title"}`.

    `header` is a text (str) or a header object such as `{"type": "image", "image": {...}}`.
    """
    if not 1 <= len(buttons) <= 3:
        raise ValueError("reply buttons take 1 to 3 buttons")
    action = {
        "buttons": [
            {"type": "reply", "reply": {"id": button["id"], "title": button["title"]}}
            for button in buttons
        ]
    }
    return _interactive(to, "button", body, action, header, footer, callback_data)


def interactive_list(
    to: str,
    body: str,
    button: str,
    sections: Sequence[Mapping[str, Any]],
    header: str | None = None,
    footer: str | None = None,
    callback_data: str | None = None,
) -> dict[str, Any]:
    """A list message: `sections` are `{"title", "rows": [{"id", "title", "description"?}]}`."""
    if not 1 <= len(sections) <= 10:
        raise ValueError("list messages take 1 to 10 sections")
    action = {"button": button, "sections": [_section(section) for section in sections]}
    return _interactive(to, "list", body, action, header, footer, callback_data)


def _message(
    to: str, kind: str, content: dict[str, Any], callback_data: str | None
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        # A user who hides their phone is reached by business-scoped id, as `recipient`.
        ("recipient" if USER_ID.match(to) else "to"): to,
        "type": kind,
        kind: content,
    }
    if callback_data is not None:
        payload["biz_opaque_callback_data"] = callback_data
    return payload


def _button_component(button: Mapping[str, Any]) -> dict[str, Any]:
    kind = str(button.get("type", "")).lower()
    if kind == "url":
        parameter = {"type": "text", "text": str(button["text"])}
    elif kind == "quick_reply":
        parameter = {"type": "payload", "payload": str(button["payload"])}
    else:
        raise ValueError(f"template button parameters are url or quick_reply, not {kind!r}")
    return {"type": "button", "sub_type": kind, "index": str(int(button["index"])), "parameters": [parameter]}


def mark_read(message_wamid: str, typing: bool = False) -> dict[str, Any]:
    """Mark an inbound message read (and show a typing indicator): the chat is named by the
    message, so there is no `to`."""
    payload: dict[str, Any] = {"messaging_product": "whatsapp", "status": "read", "message_id": message_wamid}
    if typing:
        payload["typing_indicator"] = {"type": "text"}
    return payload


def _media_object(link: str | None, media_id: str | None) -> dict[str, Any]:
    if (link is None) == (media_id is None):
        raise ValueError("exactly one of link and media_id is required")
    return {"link": link} if link is not None else {"id": media_id}


def _header_parameter(header: Mapping[str, Any]) -> dict[str, Any]:
    kind = str(header.get("type", "")).lower()
    if kind not in HEADER_MEDIA_KINDS:
        raise ValueError(f"template header type must be image, video or document, not {kind!r}")
    media = _media_object(header.get("link"), header.get("id"))
    if kind == "document" and header.get("filename"):
        media["filename"] = header["filename"]
    return {"type": kind, kind: media}


def _interactive(
    to: str,
    kind: str,
    body: str,
    action: dict[str, Any],
    header: str | Mapping[str, Any] | None,
    footer: str | None,
    callback_data: str | None,
) -> dict[str, Any]:
    interactive: dict[str, Any] = {"type": kind}
    if header is not None:
        interactive["header"] = (
            {"type": "text", "text": header} if isinstance(header, str) else dict(header)
        )
    interactive["body"] = {"text": body}
    if footer is not None:
        interactive["footer"] = {"text": footer}
    interactive["action"] = action
    return _message(to, "interactive", interactive, callback_data)


def _section(section: Mapping[str, Any]) -> dict[str, Any]:
    rows = []
    for row in section["rows"]:
        item = {"id": row["id"], "title": row["title"]}
        if row.get("description"):
            item["description"] = row["description"]
        rows.append(item)
    result: dict[str, Any] = {"rows": rows}
    if section.get("title"):
        result["title"] = section["title"]
    return result
