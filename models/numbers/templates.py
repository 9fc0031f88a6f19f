"""Keeping each number's templates in step with the platform.

A full sync reads every template of the number's business account and upserts them; the ones
the platform no longer has are kept but marked inactive (a campaign may still reference them).
Template status webhooks update a single template in place, or ask for a full sync when the
template is unknown here or the new status cannot be read from the event alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from messaging.client import template_from_graph
from messaging.webhooks import TemplateStatusUpdate
from models.clock import utcnow
from models.numbers.graph import account_token, graph_client
from models.numbers.tables import MessagingAccount, Template
from models.store.db import atomic

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
}
# Gone from the platform: kept here for history, never listed or sent.
GONE_EVENTS = {"DELETED"}
SYNCED_FIELDS = ("platform_id", "status", "category", "quality_score", "body_text", "header_type",
                 "variable_count", "variables", "components", "active")


@dataclass
class SyncResult:
    account_id: str
    total: int
    approved: int
    deactivated: int

    def as_dict(self) -> dict:
        return {"account_id": self.account_id, "total": self.total, "approved": self.approved,
                "deactivated": self.deactivated}


def sync_templates(account: MessagingAccount) -> SyncResult:
    """Read the business account's templates from the platform and store them for this number.

    Raises `messaging.errors.PlatformError` when the platform cannot be read; nothing changes then.
    """
    token = account_token(account)
    fetched = [template_from_graph(item)
               for item in graph_client().list_templates(account.business_account_id, token)]
    # The table's identity columns are bounded; a template that cannot be stored is skipped
    # rather than failing the sync of all the others.
    rows = {(item["name"], item["language"]): item for item in fetched
            if item["name"] and item["language"] and len(item["name"]) <= 512 and len(item["language"]) <= 20}
    now = utcnow()
    with atomic():
        existing = {(t.name, t.language): t for t in Template.select().where(Template.account == account.id)}
        for key, item in rows.items():
            values = _values(item)
            current = existing.get(key)
            if current is not None and all(getattr(current, name) == values[name] for name in SYNCED_FIELDS):
                continue
            (Template.insert(account=account.id, name=key[0], language=key[1], updated_at=now, **values)
             .on_conflict(conflict_target=[Template.account, Template.name, Template.language],
                          update={**{getattr(Template, name): values[name] for name in SYNCED_FIELDS},
                                  Template.updated_at: now})
             .execute())
        gone = [t.id for key, t in existing.items() if key not in rows and t.active]
        if gone:
            Template.update(active=False, updated_at=now).where(Template.id.in_(gone)).execute()
        MessagingAccount.update(templates_synced_at=now).where(MessagingAccount.id == account.id).execute()
    approved = sum(1 for item in rows.values() if item["status"] == "approved")
    return SyncResult(account.public_id, len(rows), approved, len(gone))


def _values(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "platform_id": _cut(item["id"], 64),
        "status": _cut(item["status"], 32) or "unknown",
        "category": _cut(item["category"], 32),
        "quality_score": _cut(item["quality_score"], 32),
        "body_text": item["body_text"],
        "header_type": _cut(item["header_type"], 16),
        "variable_count": item["variable_count"],
        "variables": item["variables"],
        "components": item["components"],
        "active": True,
    }


def _cut(value: Any, length: int) -> str | None:
    return None if value is None else str(value)[:length]


def apply_template_status(update: TemplateStatusUpdate) -> set[int]:
    """Apply a template status webhook to every number of its business account.

    Returns the ids of the accounts that need a full sync instead (unknown template, or an event
    such as REINSTATED that does not name the resulting status).
    """
    event = update.status.upper()
    resync: set[int] = set()
    numbers = MessagingAccount.select().where(MessagingAccount.business_account_id == update.waba_id)
    for account in numbers:
        template = _find(account.id, update)
        if template is None or (event not in STATUS_EVENTS and event not in GONE_EVENTS):
            resync.add(account.id)
            continue
        if event in GONE_EVENTS:
            changes = {"status": "deleted", "active": False}
        else:
            changes = {"status": STATUS_EVENTS[event], "active": True}
        if any(getattr(template, name) != value for name, value in changes.items()):
            Template.update(updated_at=utcnow(), **changes).where(Template.id == template.id).execute()
    return resync


def _find(account_id: int, update: TemplateStatusUpdate) -> Template | None:
    if update.template_id:
        template = Template.get_or_none((Template.account == account_id)
                                        & (Template.platform_id == update.template_id))
        if template is not None:
            return template
    if update.name and update.language:
        return Template.get_or_none((Template.account == account_id) & (Template.name == update.name)
                                    & (Template.language == update.language))
    return None
