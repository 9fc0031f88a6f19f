"""Keeping each number's templates in step with the platform.

A full sync reads every template of the number's business account and upserts them; the ones
the platform no longer has are kept but marked inactive (a campaign may still reference them).
The platform's template webhooks update a single template in place: template_review.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from messaging.client import template_from_graph
from models.clock import utcnow
from models.numbers.graph import account_token, graph_client
from models.numbers.tables import MessagingAccount, Template
from models.store.db import atomic

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
