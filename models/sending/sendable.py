"""What a send may use: a number of the tenant's that is ready and active, a template approved on
it (and not rated RED), and button parameters that fit the template's buttons. Campaigns, single
messages and the receivables' reminders and payment links all check these before anything is
reserved.
"""

from __future__ import annotations

import re
from typing import Any

from models.errors import Invalid
from models.numbers.accounts import get_account
from models.numbers.tables import MessagingAccount, Template
from models.sending.campaign_inputs import DYNAMIC_SUFFIX, MAX_BUTTON_URL, ButtonInput

_NOT_DIGITS = re.compile(r"[^0-9]+")


def digits(value: str) -> str:
    """A phone number as the platform wants it: ASCII digits only."""
    return _NOT_DIGITS.sub("", value)


def sendable_account(tenant_id: int, public_id: str) -> MessagingAccount:
    """The tenant's number, ready and active: 404, then 422 `account_not_ready` / `account_inactive`."""
    account = get_account(tenant_id, public_id)
    if not account.ready:
        raise Invalid(f"the number {public_id} has not finished onboarding", code="account_not_ready")
    if account.status != "active":
        raise Invalid(f"the number {public_id} is paused", code="account_inactive",
                      details={"reason": account.paused_reason} if account.paused_reason else None)
    return account


def approved_template(account: MessagingAccount, name: str, language: str | None) -> Template:
    query = Template.select().where((Template.account == account.id) & (Template.name == name)
                                    & (Template.status == "approved") & Template.active)
    if language is not None:
        query = query.where(Template.language == language)
    found = list(query.order_by(Template.language))
    if len(found) > 1:
        raise Invalid(f"the template {name} is approved in several languages; say which with `language`",
                      details={"errors": {"language": [
                          "required: one of " + ", ".join(t.language for t in found)]}})
    if not found:
        where = f" in {language}" if language else ""
        unsendable = _unsendable_template(account, name, language)
        if unsendable is not None:
            raise unsendable
        raise Invalid(f"the template {name} is not approved{where} for this number", code="template_not_approved",
                      details={"template_name": name, "language": language})
    template = found[0]
    if (template.quality_score or "").upper() == LOW_QUALITY:
        raise _template_refusal(template, f"the template {name} ({template.language}) is rated RED by the "
                                          "platform for its quality; edit it or wait until its rating recovers")
    return template


# The platform's quality rating at which a template is refused here: the platform pauses a RED
# template that keeps being sent, which would fail the campaign halfway (and lower the number's
# own quality rating meanwhile).
LOW_QUALITY = "RED"


def _unsendable_template(account: MessagingAccount, name: str, language: str | None) -> Invalid | None:
    """Why a template known here but not approved cannot be sent: paused for quality, say."""
    query = Template.select().where((Template.account == account.id) & (Template.name == name) & Template.active)
    if language is not None:
        query = query.where(Template.language == language)
    template = query.order_by(Template.language).first()
    if template is None:
        return None
    if template.status == "paused":
        return _template_refusal(template, f"the template {name} ({template.language}) is paused by the platform "
                                           "for its quality; it can be sent again once the platform unpauses it")
    return _template_refusal(template, f"the template {name} ({template.language}) is {template.status}, "
                                       "not approved, on this number")


def _template_refusal(template: Template, message: str) -> Invalid:
    return Invalid(message, code="template_not_approved", details={
        "template_name": template.name, "language": template.language, "status": template.status,
        "quality_score": template.quality_score,
        "reason": template.rejected_reason or template.status_detail})


def template_buttons(template: Template) -> list[dict[str, Any]]:
    """The template's buttons in order (their index is their position), from its components as
    the platform lists them: `{"type": "URL", "text", "url"}`, `{"type": "QUICK_REPLY", "text"}`..."""
    for component in template.components or []:
        if isinstance(component, dict) and str(component.get("type", "")).upper() == "BUTTONS":
            return [button for button in component.get("buttons") or [] if isinstance(button, dict)]
    return []


def _dynamic_url(button: dict[str, Any]) -> bool:
    return str(button.get("type", "")).upper() == "URL" and str(button.get("url", "")).endswith(DYNAMIC_SUFFIX)


def button_mismatch(declared: list[dict[str, Any]], given: list[ButtonInput]) -> str | None:
    """Why these button parameters do not fit the template's buttons, or None when they do.

    Every URL button whose URL ends in `{{1}}` needs its suffix; a quick-reply button may take a
    payload; any other button (a fixed URL, a phone number) takes nothing. The platform refuses
    a send that breaks these (132000, 132018): it is refused here, before anything is reserved.
    """
    for button in given:
        if button.index >= len(declared):
            return f"the template has {len(declared)} buttons: there is none at index {button.index}"
        kind = str(declared[button.index].get("type", "")).upper()
        if button.type == "url" and not _dynamic_url(declared[button.index]):
            return f"the button at index {button.index} ({kind}) takes no URL suffix"
        if button.type == "quick_reply" and kind != "QUICK_REPLY":
            return f"the button at index {button.index} ({kind}) takes no quick-reply payload"
        if button.type == "url":
            url = str(declared[button.index]["url"])[:-len(DYNAMIC_SUFFIX)] + (button.text or "")
            if len(url) > MAX_BUTTON_URL:
                return f"the button at index {button.index}: its URL would be longer than {MAX_BUTTON_URL} characters"
    given_indexes = {button.index for button in given}
    missing = [index for index, button in enumerate(declared) if _dynamic_url(button) and index not in given_indexes]
    if missing:
        return f"the URL button at index {missing[0]} needs its suffix: {{index: {missing[0]}, type: url, text}}"
    return None
