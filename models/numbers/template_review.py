"""The platform's review of a template, as its webhooks tell it, and the event each change emits.

- `message_template_status_update`: approved, rejected (the reason kept), paused for quality and
  unpaused (what the platform said about it kept in `status_detail`), disabled, deleted;
- `message_template_quality_update`: the quality rating (GREEN, YELLOW, RED, UNKNOWN);
- `template_category_update`: the platform moved the template to another category (the one it
  had is kept in `previous_category`).

A template is found by its platform id, else by name and language, on every number of the
business account the webhook names. One that is not known here, or a status event that does not
name the status it leads to (REINSTATED, ...), asks for a full sync of the number instead. Every
change of a stored template emits `template.status_changed` to the number's company, in the
transaction that makes it; an update that changes nothing (a redelivery) emits nothing.
"""

from __future__ import annotations

from typing import Any

from messaging.webhooks import TemplateCategoryUpdate, TemplateQualityUpdate, TemplateStatusUpdate
from models.clock import isoformat, utcnow
from models.events.outbox import emit
from models.numbers.tables import MessagingAccount, Template

TEMPLATE_EVENT = "template.status_changed"
# Template events that name the template's new status outright.
STATUS_EVENTS = {
    "APPROVED": "approved",
    "REJECTED": "rejected",
    "PENDING": "pending",
    "PAUSED": "paused",
    "DISABLED": "disabled",
    "FLAGGED": "flagged",
    "IN_APPEAL": "in_appeal",
    "PENDING_DELETION": "pending_deletion",
    "LIMIT_EXCEEDED": "limit_exceeded",
    "ARCHIVED": "archived",
}
# Gone from the platform: kept here for history, never listed or sent.
GONE_EVENTS = {"DELETED"}
# The platform writes "NONE" as the reason of anything but a rejection.
NO_REASON = {"", "NONE"}

TemplateUpdate = TemplateStatusUpdate | TemplateQualityUpdate | TemplateCategoryUpdate


def apply_template_status(update: TemplateStatusUpdate) -> set[int]:
    """Apply a template status webhook to every number of its business account.

    Returns the ids of the accounts that need a full sync instead (unknown template, or an event
    such as REINSTATED that does not name the resulting status).
    """
    event = update.status.upper()
    resync: set[int] = set()
    for account in _numbers_of(update.waba_id):
        template = _find(account.id, update)
        if template is None or (event not in STATUS_EVENTS and event not in GONE_EVENTS):
            resync.add(account.id)
            continue
        reason = None if (update.reason or "").upper() in NO_REASON else update.reason
        if event in GONE_EVENTS:
            changes = {"status": "deleted", "active": False}
        else:
            status = STATUS_EVENTS[event]
            changes = {"status": status, "active": True,
                       "rejected_reason": reason[:255] if status == "rejected" and reason else None,
                       "status_detail": update.detail[:512] if update.detail else None}
        _change(account, template, changes, "status")
    return resync


def apply_template_quality(update: TemplateQualityUpdate) -> set[int]:
    """Keep a template's quality rating; the accounts that do not know the template are returned
    for a full sync."""
    resync: set[int] = set()
    for account in _numbers_of(update.waba_id):
        template = _find(account.id, update)
        if template is None:
            resync.add(account.id)
            continue
        _change(account, template, {"quality_score": update.quality_score[:32]}, "quality")
    return resync


def apply_template_category(update: TemplateCategoryUpdate) -> set[int]:
    """Keep the category the platform moved a template to, and the one it had."""
    resync: set[int] = set()
    for account in _numbers_of(update.waba_id):
        template = _find(account.id, update)
        if template is None:
            resync.add(account.id)
            continue
        if template.category == update.category[:32]:
            continue
        previous = (update.previous_category or template.category or "")[:32] or None
        _change(account, template, {"category": update.category[:32], "previous_category": previous}, "category")
    return resync


def template_changed(account: MessagingAccount, template: Template, change: str,
                     previous_status: str | None) -> None:
    """Emit `template.status_changed` for the template as it is now (inside the change's transaction)."""
    emit(account.tenant_id, TEMPLATE_EVENT, {
        "account_id": account.public_id,
        "template_id": template.platform_id,
        "name": template.name,
        "language": template.language,
        "change": change,
        "status": template.status,
        "previous_status": previous_status,
        "reason": template.rejected_reason,
        "detail": template.status_detail,
        "category": template.category,
        "previous_category": template.previous_category,
        "quality_score": template.quality_score,
        "timestamp": isoformat(utcnow()),
    })


def _change(account: MessagingAccount, template: Template, changes: dict[str, Any], change: str) -> None:
    if all(getattr(template, name) == value for name, value in changes.items()):
        return  # a redelivery, or nothing new
    previous_status = template.status
    for name, value in changes.items():
        setattr(template, name, value)
    template.updated_at = utcnow()
    Template.update(updated_at=template.updated_at, **changes).where(Template.id == template.id).execute()
    template_changed(account, template, change, previous_status)


def _numbers_of(waba_id: str):
    return MessagingAccount.select().where(MessagingAccount.business_account_id == waba_id)


def _find(account_id: int, update: TemplateUpdate) -> Template | None:
    if update.template_id:
        template = Template.get_or_none((Template.account == account_id)
                                        & (Template.platform_id == update.template_id))
        if template is not None:
            return template
    if update.name and update.language:
        return Template.get_or_none((Template.account == account_id) & (Template.name == update.name)
                                    & (Template.language == update.language))
    return None
