"""What an operator watches of the service's state, read from the database at the moment it is
asked for: work in flight, backlogs and their age, per-number pace, credits held, migrations.

Nothing here is counted on the hot path: the metrics that describe state (as opposed to events
such as a request or a send) are these queries, run at scrape time or by `svcctl status`.
"""

from __future__ import annotations

import datetime as dt

from peewee import Case, fn

from models.clock import isoformat, to_utc_naive, utcnow
from models.events.tables import OPEN_STATUSES, Event, WebhookDelivery, WebhookEndpoint
from models.numbers.tables import MessagingAccount, PlatformWebhookBatch
from models.receivables.tables import Debt
from models.sending.tables import ACTIVE_STATUSES, COUNTERS, Campaign, CampaignCounters, CampaignRecipient, Message
from models.tenancy.tables import Tenant, Wallet

PACE_WINDOW_SECONDS = 10


def _age_seconds(oldest: dt.datetime | str | None, now: dt.datetime) -> float:
    """Seconds since `oldest`: an aggregate (MIN) of a timestamp, which SQLite returns as text."""
    if oldest is None:
        return 0.0
    if isinstance(oldest, str):
        oldest = dt.datetime.fromisoformat(oldest)
    return max(0.0, (to_utc_naive(now) - to_utc_naive(oldest)).total_seconds())


def campaigns_by_status() -> dict[str, int]:
    rows = Campaign.select(Campaign.status, fn.COUNT(Campaign.id)).group_by(Campaign.status).tuples()
    return dict(rows)


def active_recipients_by_status() -> dict[str, int]:
    """Recipients of campaigns still running, by status (finished campaigns no longer move): their
    campaigns' counters added up, the statuses no recipient is in left out."""
    active = Campaign.select(Campaign.id).where(Campaign.status.in_(ACTIVE_STATUSES))
    sums = (CampaignCounters.select(*[fn.SUM(getattr(CampaignCounters, status)) for status in COUNTERS])
            .where(CampaignCounters.campaign.in_(active)).tuples().get())
    return {status: n for status, n in zip(COUNTERS, sums, strict=True) if n}


def messages_in_flight() -> dict[str, int]:
    """Single messages not handed to the platform yet: waiting, or claimed by a sender."""
    rows = (Message.select(Message.claim_token.is_null(), fn.COUNT(Message.id)).where(Message.status == "queued")
            .group_by(Message.claim_token.is_null()).tuples())
    counts = {"waiting": 0, "sending": 0}
    for unclaimed, count in rows:
        counts["waiting" if unclaimed else "sending"] += count
    return counts


def credits_reserved_by_tenant() -> dict[str, int]:
    rows = (Wallet.select(Tenant.public_id, Wallet.reserved).join(Tenant)
            .where(Wallet.reserved > 0).order_by(Wallet.reserved.desc()).tuples())
    return dict(rows)


def outbox() -> dict[str, float]:
    """Events not fanned out yet, and deliveries not delivered yet, with the age of the oldest."""
    now = utcnow()
    events, oldest_event = (Event.select(fn.COUNT(Event.id), fn.MIN(Event.created_at))
                            .where(Event.fanned_out_at.is_null()).tuples().get())
    deliveries, oldest_delivery = (WebhookDelivery.select(fn.COUNT(WebhookDelivery.id),
                                                          fn.MIN(WebhookDelivery.created_at))
                                   .where(WebhookDelivery.status.in_(OPEN_STATUSES)).tuples().get())
    return {"events_pending": events or 0, "oldest_event_age_seconds": _age_seconds(oldest_event, now),
            "deliveries_pending": deliveries or 0,
            "oldest_delivery_age_seconds": _age_seconds(oldest_delivery, now)}


def webhook_backlog_by_endpoint() -> list[dict]:
    """Each endpoint with open deliveries: how many, how many failed at least once, the oldest."""
    now = utcnow()
    failing = fn.SUM(Case(None, [(WebhookDelivery.status == "failed", 1)], 0))
    rows = (WebhookDelivery
            .select(WebhookEndpoint.public_id, Tenant.public_id, WebhookEndpoint.url,
                    fn.COUNT(WebhookDelivery.id), failing, fn.MIN(WebhookDelivery.created_at),
                    WebhookEndpoint.last_failure_at)
            .join(WebhookEndpoint).switch(WebhookDelivery).join(Tenant)
            .where(WebhookDelivery.status.in_(OPEN_STATUSES))
            .group_by(WebhookEndpoint.public_id, Tenant.public_id, WebhookEndpoint.url,
                      WebhookEndpoint.last_failure_at)
            .order_by(fn.COUNT(WebhookDelivery.id).desc()).tuples())
    return [{"endpoint": endpoint, "tenant": tenant, "url": url, "pending": pending, "failing": int(failed or 0),
             "oldest_age_seconds": round(_age_seconds(oldest, now), 1),
             "last_failure_at": isoformat(last_failure) if last_failure else None}
            for endpoint, tenant, url, pending, failed, oldest, last_failure in rows]


def number_caps() -> dict[str, int]:
    """Each connected number's send cap (messages per second), by its platform phone number id."""
    return dict(MessagingAccount.select(MessagingAccount.phone_id, MessagingAccount.mps)
                .where(MessagingAccount.phone_id.is_null(False) & (MessagingAccount.status == "active")).tuples())


def number_pace(window_seconds: int = PACE_WINDOW_SECONDS) -> list[dict]:
    """Each number sending a running campaign: messages per second over the last window against
    its cap. (Running campaigns only, so the read stays on the recipients' campaign index.)"""
    since = utcnow() - dt.timedelta(seconds=window_seconds)
    active = Campaign.select(Campaign.id).where(Campaign.status.in_(ACTIVE_STATUSES))
    rows = (CampaignRecipient
            .select(MessagingAccount.public_id, MessagingAccount.phone_id, MessagingAccount.mps,
                    fn.COUNT(CampaignRecipient.id))
            .join(Campaign, on=(CampaignRecipient.campaign == Campaign.id))
            .join(MessagingAccount, on=(Campaign.account == MessagingAccount.id))
            .where(CampaignRecipient.campaign.in_(active) & (CampaignRecipient.sent_at >= since))
            .group_by(MessagingAccount.public_id, MessagingAccount.phone_id, MessagingAccount.mps)
            .order_by(MessagingAccount.public_id).tuples())
    return [{"number": number, "phone_id": phone_id, "rate": round(sent / window_seconds, 2), "cap": cap}
            for number, phone_id, cap, sent in rows]


def running_campaigns(window_seconds: int = PACE_WINDOW_SECONDS) -> list[dict]:
    since = utcnow() - dt.timedelta(seconds=window_seconds)
    recent = (CampaignRecipient.select(fn.COUNT(CampaignRecipient.id))
              .where((CampaignRecipient.campaign == Campaign.id) & (CampaignRecipient.sent_at >= since)))
    done = (CampaignRecipient.select(fn.COUNT(CampaignRecipient.id))
            .where((CampaignRecipient.campaign == Campaign.id)
                   & CampaignRecipient.status.not_in(("pending", "queued"))))
    rows = (Campaign.select(Campaign.public_id, Tenant.public_id, Campaign.status, Campaign.total_recipients,
                            done.alias("done"), recent.alias("recent"))
            .join(Tenant).where(Campaign.status == "processing").order_by(Campaign.id).tuples())
    return [{"campaign": campaign, "tenant": tenant, "status": status, "total": total, "done": done_count,
             "rate": round(recent_count / window_seconds, 2)}
            for campaign, tenant, status, total, done_count, recent_count in rows]


def platform_webhooks() -> dict[str, float]:
    """Batches waiting to be processed (the oldest's age), and apart from them the parked ones
    (models/inbox/batches.py), which wait for an operator, not for a worker."""
    now = utcnow()
    batch = PlatformWebhookBatch
    pending, oldest = (batch.select(fn.COUNT(batch.id), fn.MIN(batch.received_at))
                       .where(batch.waiting()).tuples().get())
    parked = batch.select().where(batch.parked()).count()
    return {"batches_pending": pending or 0, "oldest_batch_age_seconds": _age_seconds(oldest, now),
            "batches_parked": parked}


def debts_by_status() -> dict[str, int]:
    return dict(Debt.select(Debt.status, fn.COUNT(Debt.id)).group_by(Debt.status).tuples())
