"""Templates a business writes through Graph, and their life after: submitted with
`POST /{waba_id}/message_templates`, reviewed like the platform reviews them, deleted with
`DELETE /{waba_id}/message_templates?name=`; and what the platform does to an approved one later
(recategorise it, move its quality, pause it for quality and unpause it), driven by the control
endpoints. Each change is posted as the platform's webhook.

The review, `review_delay` seconds (a setting) after the submission, decides in this order:
1. `REJECTED` with `INVALID_FORMAT` when the body starts or ends with a variable, a variable has
   no example, or the variables are not numbered `{{1}}`, `{{2}}`, ... without gaps;
2. `REJECTED` with `TAG_CONTENT_MISMATCH` when a UTILITY template reads like marketing: its body
   or header holds one of MARKETING_WORDS (English, Spanish and Portuguese: offer, discount,
   sale, promo, ...), a simple heuristic standing in for the platform's classifier;
3. `APPROVED` otherwise.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from typing import Any

from messaging.simulator.errors import ControlError, GraphError
from messaging.simulator.platform import Platform
from messaging.simulator.records import template_id, template_record
from messaging.simulator.webhook_values import (
    template_category_update,
    template_quality_update,
    template_status_update,
)

MARKETING_WORDS = ("offer", "discount", "sale", "promo", "deal", "% off", "buy now", "coupon",
                   "oferta", "descuento", "rebaja", "promoción", "cupón", "desconto", "promoção", "cupom")
QUALITY_SCORES = ("GREEN", "YELLOW", "RED", "UNKNOWN")
CATEGORIES = ("MARKETING", "UTILITY", "AUTHENTICATION")
NAME = re.compile(r"^[a-z0-9_]{1,512}$")
_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")
# The platform's error for a name and language the business account already has.
TEMPLATE_EXISTS_SUBCODE = 2388024


def submit(platform: Platform, waba_id: str, body: Any) -> dict[str, Any]:
    """`POST /{waba_id}/message_templates`: keep the template `PENDING` and review it later."""
    if not isinstance(body, Mapping):
        raise GraphError(400, 100, "(#100) Invalid parameter")
    name, language, category = body.get("name"), body.get("language"), body.get("category")
    components = body.get("components")
    if not isinstance(name, str) or not NAME.match(name):
        raise GraphError(400, 100, "(#100) Invalid parameter", details="name: lowercase letters, digits, underscores")
    if not isinstance(language, str) or not language:
        raise GraphError(400, 100, "(#100) Param language is required")
    if not isinstance(category, str) or category.upper() not in CATEGORIES:
        raise GraphError(400, 100, "(#100) Param category must be one of {MARKETING, UTILITY, AUTHENTICATION}")
    if not isinstance(components, list) or not any(
            isinstance(c, Mapping) and str(c.get("type", "")).upper() == "BODY" for c in components):
        raise GraphError(400, 100, "(#100) Param components must include a BODY")
    state = platform.state
    with state.lock:
        if state.find_template(name, language) is not None:
            raise GraphError(400, 100, "Invalid parameter", subcode=TEMPLATE_EXISTS_SUBCODE,
                             details=f"Message template \"{name}\" already exists in {language}")
        template = template_record(template_id(len(state.templates) + 1), name, language, "PENDING",
                                   category.upper(), json.loads(json.dumps(components)))
        state.templates.append(template)
        state.changed = True
        answer = {"id": template["id"], "status": "PENDING", "category": template["category"]}
    timer = threading.Timer(platform.settings.review_delay, _review, (platform, template["id"]))
    timer.daemon = True
    timer.start()
    return answer


def delete(platform: Platform, query: Mapping[str, str]) -> dict[str, Any]:
    """`DELETE /{waba_id}/message_templates?name=`: every language of the template."""
    name = query.get("name")
    state = platform.state
    with state.lock:
        gone = [t for t in state.templates if t["name"] == name]
        if not gone:
            raise GraphError(400, 100, "Invalid parameter", subcode=2593002,
                             details=f"Message template \"{name}\" not found")
        state.templates = [t for t in state.templates if t["name"] != name]
        state.changed = True
        snapshots = [{**json.loads(json.dumps(t)), "status": "DELETED"} for t in gone]
    for snapshot in snapshots:
        platform.webhooks.post_later(state.waba_id, "message_template_status_update",
                                     template_status_update(snapshot, None))
    return {"success": True}


def verdict(template: Mapping[str, Any]) -> tuple[str, str | None]:
    """The review's outcome for a template: (status, rejection reason)."""
    body = next((c for c in template["components"] if str(c.get("type", "")).upper() == "BODY"), {})
    text = str(body.get("text") or "")
    numbers = [inside for inside in _PLACEHOLDER.findall(text)]
    examples = ((body.get("example") or {}).get("body_text") or [[]])[0] if isinstance(body.get("example"), dict) \
        else []
    if numbers and (not all(n.isdigit() for n in numbers)
                    or sorted({int(n) for n in numbers}) != list(range(1, len(set(numbers)) + 1))
                    or text.strip().startswith("{{") or text.strip().endswith("}}")
                    or not isinstance(examples, list) or len(examples) < len(set(numbers))):
        return "REJECTED", "INVALID_FORMAT"
    if template["category"] == "UTILITY":
        words = " ".join(str(c.get("text") or "") for c in template["components"]).lower()
        if any(word in words for word in MARKETING_WORDS):
            return "REJECTED", "TAG_CONTENT_MISMATCH"
    return "APPROVED", None


def _review(platform: Platform, template_id_: str) -> None:
    state = platform.state
    with state.lock:
        template = next((t for t in state.templates if t["id"] == template_id_), None)
        if template is None or template["status"] != "PENDING":
            return  # deleted, or decided through a control endpoint meanwhile
        status, reason = verdict(template)
        template["status"] = status
        if status == "APPROVED":
            template["quality_score"] = {"score": "UNKNOWN", "date": template["quality_score"]["date"]}
        state.changed = True
        snapshot = json.loads(json.dumps(template))
    platform.webhooks.post_later(state.waba_id, "message_template_status_update",
                                 template_status_update(snapshot, reason))


def set_quality(platform: Platform, name: str, language: str, score: str) -> dict[str, Any]:
    """`POST /_sim/templates/quality`: the template's quality rating moves."""
    score = score.upper()
    if score not in QUALITY_SCORES:
        raise ControlError(400, f"quality must be one of {', '.join(QUALITY_SCORES)}")
    template, previous = _update(platform, name, language, lambda t: _set_score(t, score))
    platform.webhooks.post_later(platform.state.waba_id, "message_template_quality_update",
                                 template_quality_update(template, previous))
    return template


def recategorise(platform: Platform, name: str, language: str, category: str) -> dict[str, Any]:
    """`POST /_sim/templates/category`: the platform moves the template to another category."""
    category = category.upper()
    if category not in CATEGORIES:
        raise ControlError(400, f"category must be one of {', '.join(CATEGORIES)}")
    template, previous = _update(platform, name, language, lambda t: _swap(t, "category", category))
    if previous != category:
        platform.webhooks.post_later(platform.state.waba_id, "template_category_update",
                                     template_category_update(template, previous))
    return template


def pause(platform: Platform, name: str, language: str) -> dict[str, Any]:
    """`POST /_sim/templates/pause`: quality RED, then the template paused for it (the platform's
    first pause lasts 3 hours), each posted as the platform does."""
    template, previous = _update(platform, name, language, lambda t: _set_score(t, "RED"))
    waba_id = platform.state.waba_id
    if previous != "RED":
        platform.webhooks.post_later(waba_id, "message_template_quality_update",
                                     template_quality_update(template, previous))
    template, _ = _update(platform, name, language, lambda t: _swap(t, "status", "PAUSED"))
    platform.webhooks.post_later(waba_id, "message_template_status_update", template_status_update(
        template, None, {"title": "FIRST_PAUSE",
                         "description": "Your WhatsApp message template has been paused for 3 hours "
                                        "due to low quality."}))
    return template


def unpause(platform: Platform, name: str, language: str) -> dict[str, Any]:
    """`POST /_sim/templates/unpause`: the pause is over, the template is approved again."""
    def resume(template: dict[str, Any]) -> str:
        if template["status"] != "PAUSED":
            raise ControlError(409, f"template {name} ({language}) is {template['status']}, not PAUSED")
        return _swap(template, "status", "APPROVED")

    template, _ = _update(platform, name, language, resume)
    platform.webhooks.post_later(platform.state.waba_id, "message_template_status_update",
                                 template_status_update(template, None))
    return template


def _update(platform: Platform, name: str, language: str, change) -> tuple[dict[str, Any], Any]:
    state = platform.state
    with state.lock:
        template = state.find_template(name, language)
        if template is None:
            raise ControlError(404, f"no template {name} ({language})")
        previous = change(template)
        state.changed = True
        return json.loads(json.dumps(template)), previous


def _set_score(template: dict[str, Any], score: str) -> str:
    previous = template["quality_score"]["score"]
    template["quality_score"] = {**template["quality_score"], "score": score}
    return previous


def _swap(template: dict[str, Any], key: str, value: str) -> str:
    previous = template[key]
    template[key] = value
    return previous
