"""The words pages show for the service's values: statuses, roles, kinds of entries, reasons.

A value stays what it is on the wire and in a CSS class; the page shows `label(kind, value)`, the
English word of LABELS (the value itself, or the value said plainly) in the reader's language.
The kind is the catalog's context (msgctxt): Spanish and Portuguese agree with what they describe
(una campaña cancelada, un destinatario cancelado). A value without a word here (a platform
status added later) is shown as it is.
"""

from __future__ import annotations

import jinja2

from config.i18n import NC_, PageLocale

LABELS: dict[str, dict[str, str]] = {
    "campaign": {
        "queued": NC_("campaign", "queued"),
        "pending": NC_("campaign", "pending"),
        "processing": NC_("campaign", "processing"),
        "completed": NC_("campaign", "completed"),
        "failed": NC_("campaign", "failed"),
        "cancelled": NC_("campaign", "cancelled"),
    },
    "recipient": {
        "pending": NC_("recipient", "pending"),
        "queued": NC_("recipient", "queued"),
        "sent": NC_("recipient", "sent"),
        "delivered": NC_("recipient", "delivered"),
        "read": NC_("recipient", "read"),
        "failed": NC_("recipient", "failed"),
        "cancelled": NC_("recipient", "cancelled"),
        "skipped": NC_("recipient", "skipped"),
    },
    # Counters of recipients by status (a campaign's, today's sends): the word for several.
    "recipients": {
        "pending": NC_("recipients", "pending"),
        "queued": NC_("recipients", "queued"),
        "sent": NC_("recipients", "sent"),
        "delivered": NC_("recipients", "delivered"),
        "read": NC_("recipients", "read"),
        "failed": NC_("recipients", "failed"),
        "cancelled": NC_("recipients", "cancelled"),
        "skipped": NC_("recipients", "skipped"),
    },
    "hold": {
        "account_paused": NC_("hold", "number paused"),
        "wallet_paused": NC_("hold", "wallet paused"),
        "daily_limit": NC_("hold", "daily limit reached"),
        "throttled": NC_("hold", "throttled by the platform"),
    },
    "source": {
        "api": NC_("source", "API"),
        "collection": NC_("source", "collection"),
        "portal": NC_("source", "portal"),
    },
    "delivery": {
        "pending": NC_("delivery", "pending"),
        "failed": NC_("delivery", "failed"),
        "delivered": NC_("delivery", "delivered"),
        "exhausted": NC_("delivery", "exhausted"),
        "cancelled": NC_("delivery", "cancelled"),
    },
    "attempt": {
        "delivered": NC_("attempt", "delivered"),
        "failed": NC_("attempt", "failed"),
    },
    "endpoint": {
        "active": NC_("endpoint", "active"),
        "inactive": NC_("endpoint", "inactive"),
    },
    "key": {
        "active": NC_("key", "active"),
        "revoked": NC_("key", "revoked"),
    },
    "number": {
        "active": NC_("number", "active"),
        "paused": NC_("number", "paused"),
    },
    "pause": {
        "administrator": NC_("pause", "paused by an administrator"),
        "platform_blocked": NC_("pause", "blocked by the platform"),
        "quality_flagged": NC_("pause", "quality rated low by the platform"),
        "account_restricted": NC_("pause", "restricted by the platform"),
        "account_disabled": NC_("pause", "disabled by the platform"),
    },
    "mode": {
        "coexistence": NC_("mode", "coexistence"),
    },
    "quality": {
        "GREEN": NC_("quality", "green"),
        "YELLOW": NC_("quality", "yellow"),
        "RED": NC_("quality", "red"),
        "UNKNOWN": NC_("quality", "unknown"),
    },
    "template": {
        "approved": NC_("template", "approved"),
        "pending": NC_("template", "pending"),
        "rejected": NC_("template", "rejected"),
        "paused": NC_("template", "paused"),
        "disabled": NC_("template", "disabled"),
        "flagged": NC_("template", "flagged"),
        "in_appeal": NC_("template", "in appeal"),
        "pending_deletion": NC_("template", "pending deletion"),
        "limit_exceeded": NC_("template", "limit exceeded"),
        "archived": NC_("template", "archived"),
        "deleted": NC_("template", "deleted"),
    },
    "button": {
        "QUICK_REPLY": NC_("button", "quick reply"),
        "URL": NC_("button", "link (URL)"),
        "PHONE_NUMBER": NC_("button", "phone number"),
    },
    "category": {
        "MARKETING": NC_("category", "marketing"),
        "UTILITY": NC_("category", "utility"),
        "AUTHENTICATION": NC_("category", "authentication"),
    },
    "debt": {
        "pending": NC_("debt", "pending"),
        "partial": NC_("debt", "partial"),
        "overdue": NC_("debt", "overdue"),
        "paid": NC_("debt", "paid"),
        "cancelled": NC_("debt", "cancelled"),
        "written_off": NC_("debt", "written off"),
    },
    "installment": {
        "pending": NC_("installment", "pending"),
        "partial": NC_("installment", "partial"),
        "paid": NC_("installment", "paid"),
        "overdue": NC_("installment", "overdue"),
        "cancelled": NC_("installment", "cancelled"),
    },
    "reminder": {
        "queued": NC_("reminder", "queued"),
        "cancelled": NC_("reminder", "cancelled"),
    },
    "stage": {
        "before": NC_("stage", "before the due date"),
        "due": NC_("stage", "on the due date"),
        "after": NC_("stage", "after the due date"),
    },
    "method": {
        "cash": NC_("method", "cash"),
        "transfer": NC_("method", "transfer"),
        "card": NC_("method", "card"),
        "deposit": NC_("method", "deposit"),
        "check": NC_("method", "check"),
        "gateway": NC_("method", "gateway"),
        "other": NC_("method", "other"),
    },
    "origin": {
        "erp": NC_("origin", "ERP"),
        "service": NC_("origin", "service"),
    },
    "wallet": {
        "active": NC_("wallet", "active"),
        "paused": NC_("wallet", "paused"),
    },
    "ledger": {
        "purchase": NC_("ledger", "purchase"),
        "manual_grant": NC_("ledger", "manual grant"),
        "manual_adjust": NC_("ledger", "manual adjustment"),
        "reserve": NC_("ledger", "reserve"),
        "consume": NC_("ledger", "consume"),
        "release": NC_("ledger", "release"),
        "refund": NC_("ledger", "refund"),
    },
    "role": {
        "owner": NC_("role", "owner"),
        "developer": NC_("role", "developer"),
        "viewer": NC_("role", "viewer"),
    },
    "area": {
        "keys": NC_("area", "API keys"),
        "webhooks": NC_("area", "webhooks"),
        "numbers": NC_("area", "numbers"),
        "campaigns": NC_("area", "campaigns"),
        "receivables": NC_("area", "receivables"),
        "users": NC_("area", "users"),
        "security": NC_("area", "the company's sign-in policy"),
    },
}


def label_in(page_locale: PageLocale, kind: str, value: str | None) -> str:
    if value is None:
        return ""
    word = LABELS[kind].get(value)
    return value if word is None else page_locale.pgettext(kind, word)


@jinja2.pass_context
def label(context: jinja2.runtime.Context, kind: str, value: str | None) -> str:
    """For templates: `{{ label("campaign", c.status) }}`."""
    return label_in(context["page_locale"], kind, value)
