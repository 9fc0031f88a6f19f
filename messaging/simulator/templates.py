"""A business account's templates: the Graph listing (`GET /{waba_id}/message_templates`), and
templates added, edited or moved to another status through `POST /_sim/templates`, each status
change notified as the platform does. (How a send is checked against its template:
`template_checks`.)"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from messaging.client import template_variable_count
from messaging.simulator.errors import ControlError, GraphError
from messaging.simulator.platform import Platform
from messaging.simulator.records import template_id, template_record
from messaging.simulator.state import PlatformState
from messaging.simulator.webhook_values import template_status_update

# Template buttons: a URL button whose URL ends in `{{1}}` takes its suffix at send time (one
# `text` parameter); a quick-reply button may take a `payload` (returned when it is pressed).
# A URL without `{{1}}` is fixed and takes nothing.
BUTTON_TYPES = ("URL", "QUICK_REPLY")
MAX_TEMPLATE_BUTTONS = 10
MAX_BUTTON_TEXT = 25
MAX_BUTTON_URL = 2000
DYNAMIC_SUFFIX = "{{1}}"


def listing(
    state: PlatformState, waba_id: str, query: Mapping[str, str], version: str, base_url: str
) -> dict[str, Any]:
    """`GET /{waba_id}/message_templates?limit&after&summary`, a page at a time."""
    limit = max(1, min(_int(query.get("limit"), 25), 1000))
    start = _decode_cursor(query.get("after")) if query.get("after") else 0
    with state.lock:
        page = json.loads(json.dumps(state.templates[start:start + limit]))
        total = len(state.templates)
    for template in page:
        # Positional `{{1}}` placeholders, as the platform names them (named ones are `{{name}}`);
        # a template kept from before the field was listed gets it too.
        template.setdefault("parameter_format", "POSITIONAL")
        template["quality_score"].setdefault("date", int(time.time()))
    result: dict[str, Any] = {"data": page}
    summary = [name for name in query.get("summary", "").split(",") if name]
    if summary:
        counts = {"total_count": total, "message_template_count": total, "message_template_limit": 250,
                  "are_translations_complete": True}
        result["summary"] = {name: counts[name] for name in summary if name in counts}
    if page:
        end = start + len(page)
        result["paging"] = {
            "cursors": {"before": _encode_cursor(start), "after": _encode_cursor(end)}
        }
        if end < total:
            next_query = {**query, "limit": str(limit), "after": _encode_cursor(end)}
            result["paging"]["next"] = (
                f"{base_url}/{version}/{waba_id}/message_templates?{urlencode(next_query)}"
            )
    return result


def set_template(
    platform: Platform,
    name: str,
    language: str,
    status: str = "APPROVED",
    category: str = "UTILITY",
    body: str | None = None,
    header: str | None = None,
    reason: str | None = None,
    buttons: list[Any] | None = None,
) -> dict[str, Any]:
    """Add a template, or change one's status (notified like the platform does); a `body` or
    `buttons` given for an existing template replace its components, as an edit in the
    business's template manager does."""
    status = status.upper()
    template_buttons = buttons_from_input(buttons) if buttons is not None else None
    state = platform.state
    with state.lock:
        template = state.find_template(name, language)
        if template is None:
            if body is None:
                raise ControlError(400, "a new template needs a body")
            template = template_record(
                template_id(len(state.templates) + 1),
                name, language, status, category.upper(),
                components(body, header, template_buttons),
            )
            state.templates.append(template)
            changed = True
        else:
            changed = template["status"] != status
            template["status"] = status
            if body is not None or template_buttons is not None:
                current = _body_text(template) if body is None else body
                if current is None:
                    raise ControlError(400, "the template has no body to keep")
                kept_header = header or next((c.get("format") for c in template["components"]
                                              if c.get("type") == "HEADER"), None)
                template["components"] = components(current, kept_header, template_buttons)
        snapshot = json.loads(json.dumps(template))
        state.changed = True
    if changed:
        platform.webhooks.post_later(state.waba_id, "message_template_status_update",
                                     template_status_update(snapshot, reason))
    return snapshot


def buttons_from_input(buttons: Any) -> list[dict[str, Any]]:
    """Buttons declared through `POST /_sim/templates`, in the Graph shape."""
    if not isinstance(buttons, list) or not 1 <= len(buttons) <= MAX_TEMPLATE_BUTTONS:
        raise ControlError(400, f"buttons must be a list of 1 to {MAX_TEMPLATE_BUTTONS}")
    shaped = []
    for index, button in enumerate(buttons):
        if not isinstance(button, dict):
            raise ControlError(400, f"buttons[{index}] must be an object")
        kind = str(button.get("type", "")).upper()
        text = button.get("text")
        if kind not in BUTTON_TYPES:
            raise ControlError(400, f"buttons[{index}].type must be URL or QUICK_REPLY")
        if not isinstance(text, str) or not 1 <= len(text) <= MAX_BUTTON_TEXT:
            raise ControlError(400, f"buttons[{index}].text must be 1 to {MAX_BUTTON_TEXT} characters")
        item: dict[str, Any] = {"type": kind, "text": text}
        if kind == "URL":
            url = button.get("url")
            if not isinstance(url, str) or not re.match(r"^https?://[^\s/?#]+", url) \
                    or len(url) > MAX_BUTTON_URL or DYNAMIC_SUFFIX in url[:-len(DYNAMIC_SUFFIX)]:
                raise ControlError(400, f"buttons[{index}].url must be an http(s) URL, with {{{{1}}}} "
                                        "only at its end")
            item["url"] = url
            if url.endswith(DYNAMIC_SUFFIX):
                example = button.get("example")
                item["example"] = [str(example[0]) if isinstance(example, list) and example
                                   else url[:-len(DYNAMIC_SUFFIX)] + "example"]
        shaped.append(item)
    return shaped


def components(body: str, header: str | None, buttons: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """A template's components in the Graph shape: a header of that format, the body, the buttons."""
    shaped: list[dict[str, Any]] = []
    if header:
        shaped.append({"type": "HEADER", "format": header.upper()})
    body_component: dict[str, Any] = {"type": "BODY", "text": body}
    count = template_variable_count(body)
    if count:
        # The platform approves a body with variables only with an example for each.
        body_component["example"] = {"body_text": [[f"example {n}" for n in range(1, count + 1)]]}
    shaped.append(body_component)
    if buttons:
        shaped.append({"type": "BUTTONS", "buttons": buttons})
    return shaped


def _body_text(template: dict[str, Any]) -> str | None:
    return next((c.get("text") for c in template["components"] if c.get("type") == "BODY"), None)


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _encode_cursor(index: int) -> str:
    return base64.urlsafe_b64encode(f"idx:{index}".encode()).decode()


def _decode_cursor(cursor: str) -> int:
    try:
        return max(0, int(base64.urlsafe_b64decode(cursor.encode()).decode().split(":")[1]))
    except (ValueError, IndexError, UnicodeDecodeError):
        raise GraphError(400, 100, "(#100) Invalid cursor") from None
