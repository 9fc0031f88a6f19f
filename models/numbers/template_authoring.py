"""Templates written through the service (API, `svcctl templates`, the portal's form): checked
against the platform's rules, submitted to its `message_templates` endpoint, kept `pending`
until its review says otherwise (template_review.py); and deleted.

Creating one, in steps:
1. check it (template_rules.py): every broken rule is a 422 naming its field, nothing is sent;
2. claim its name and language on the number with a `pending` row, so that two requests for the
   same template cannot both reach the platform (the second is a 409 `template_exists`), and a
   review webhook that overtakes the platform's answer finds the template by name;
3. submit it; the platform's id and status are stored, and `template.status_changed` emitted.
   When the platform refuses it, or cannot be reached, the claim is withdrawn: nothing stays
   behind that the platform does not have.
"""

from __future__ import annotations

from typing import Any

from messaging.client import template_from_graph
from messaging.errors import PermanentPlatformError, PlatformError, without_url_secrets
from models.clock import utcnow
from models.errors import Conflict, DomainError, Invalid, NotFound
from models.numbers.graph import account_token, graph_client
from models.numbers.tables import MessagingAccount, Template
from models.numbers.template_review import template_changed
from models.numbers.template_rules import checked_template
from models.store.db import atomic

# A template in one of these may be written again under its name: it is not on the platform.
GONE_STATUSES = ("deleted",)
STORED_FIELDS = ("status", "category", "quality_score", "body_text", "header_type", "variable_count", "variables",
                 "components", "active", "rejected_reason", "status_detail", "previous_category", "platform_id")


class PlatformUnavailable(DomainError):
    status = 503
    code = "platform_unavailable"


def create_template(account: MessagingAccount, data: Any) -> Template:
    """Check, claim and submit a template for `account`'s business account (steps above)."""
    template = checked_template(data)
    _require_ready(account)
    row, before = _claim(account, template)
    try:
        answer = graph_client().create_template(account.business_account_id, account_token(account), template)
    except PlatformError as error:
        _withdraw(row, before)
        raise _refusal(error, "submit the template") from None
    status = str(answer.get("status") or "PENDING").lower()
    with atomic():
        row = Template.get_by_id(row.id)
        previous = row.status
        row.platform_id = str(answer["id"])[:64] if answer.get("id") is not None else row.platform_id
        # A review webhook may already have moved it on; the platform's answer is then older news.
        if previous == "pending":
            row.status = status[:32]
        if answer.get("category") and not row.previous_category:
            row.category = str(answer["category"])[:32]
        row.updated_at = utcnow()
        row.save()
        template_changed(account, row, "submitted", None)
    return row


def delete_template(account: MessagingAccount, name: str) -> list[Template]:
    """Delete every language of the template `name`, on the platform and here (kept as `deleted`,
    never listed or sent). 404 when the number has no such template."""
    _require_ready(account)
    rows = list(Template.select().where((Template.account == account.id) & (Template.name == name)
                                        & (Template.status.not_in(GONE_STATUSES))))
    if not rows:
        raise NotFound(f"no template {name!r} on account {account.public_id}", code="template_not_found")
    try:
        graph_client().delete_template(account.business_account_id, account_token(account), name)
    except PlatformError as error:
        raise _refusal(error, "delete the template") from None
    with atomic():
        for row in rows:
            previous = row.status
            row.status, row.active, row.updated_at = "deleted", False, utcnow()
            row.save()
            template_changed(account, row, "deleted", previous)
    return rows


def _require_ready(account: MessagingAccount) -> None:
    if not account.access_token or not account.business_account_id:
        raise Invalid(f"account {account.public_id} has not finished onboarding", code="account_not_ready")


def _claim(account: MessagingAccount, template: dict[str, Any]) -> tuple[Template, dict[str, Any] | None]:
    """The pending row for the template, and what a row it replaces held before (None: a new row)."""
    values = _values(template)
    with atomic():
        existing = Template.get_or_none((Template.account == account.id) & (Template.name == template["name"])
                                        & (Template.language == template["language"]))
        if existing is None:
            inserted = (Template.insert(account=account.id, name=template["name"], language=template["language"],
                                        updated_at=utcnow(), **values)
                        .on_conflict_ignore().as_rowcount().execute())
            existing = Template.get_or_none((Template.account == account.id) & (Template.name == template["name"])
                                            & (Template.language == template["language"]))
            if inserted == 1 and existing is not None:
                return existing, None
        if existing is None or existing.status not in GONE_STATUSES:
            # (None: another request wrote the name and withdrew it between our two statements.)
            raise Conflict(f"account {account.public_id} already has the template {template['name']!r} in "
                           f"{template['language']}; delete it first to write it again",
                           code="template_exists",
                           details={"name": template["name"], "language": template["language"],
                                    "status": existing.status if existing else None})
        before = {name: getattr(existing, name) for name in STORED_FIELDS}
        # A conditional update: of two requests for a deleted template's name, one gets it.
        claimed = (Template.update(updated_at=utcnow(), **values)
                   .where((Template.id == existing.id) & Template.status.in_(GONE_STATUSES)).execute())
        if claimed != 1:
            raise Conflict(f"the template {template['name']!r} is being written by another request",
                           code="template_exists", details={"name": template["name"],
                                                            "language": template["language"]})
        return Template.get_by_id(existing.id), before


def _withdraw(row: Template, before: dict[str, Any] | None) -> None:
    with atomic():
        if before is None:
            Template.delete().where((Template.id == row.id) & (Template.status == "pending")).execute()
        else:
            Template.update(**before).where(Template.id == row.id).execute()


def _values(template: dict[str, Any]) -> dict[str, Any]:
    shaped = template_from_graph({**template, "status": "PENDING"})
    return {"status": "pending", "category": template["category"], "quality_score": None,
            "body_text": shaped["body_text"], "header_type": (shaped["header_type"] or None),
            "variable_count": shaped["variable_count"], "variables": shaped["variables"],
            "components": shaped["components"], "active": True, "rejected_reason": None,
            "status_detail": None, "previous_category": None, "platform_id": None}


def _refusal(error: PlatformError, doing: str) -> DomainError:
    message = without_url_secrets(error.message)[:300]
    if isinstance(error, PermanentPlatformError):
        return Invalid(f"the platform refused to {doing}: {message}", code="template_refused",
                       details={"platform_code": error.code})
    return PlatformUnavailable(f"the platform could not be reached to {doing}; retry shortly",
                               details={"platform_code": error.code})
