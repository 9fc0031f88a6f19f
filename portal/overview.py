"""The overview: credits, today's sends by outcome, running campaigns, webhook health."""

from __future__ import annotations

import datetime as dt

from peewee import fn

from models.clock import utcnow
from models.events import webhooks
from models.events.tables import OPEN_STATUSES, WebhookDelivery, WebhookEndpoint
from models.sending import campaign_reads
from models.sending.tables import ACTIVE_STATUSES, Campaign, CampaignRecipient, Message
from models.tenancy import credits
from portal.web import ctx, page, render

OUTCOMES = ("queued", "sent", "delivered", "read", "failed")


def sends_today(tenant_id: int, now: dt.datetime | None = None) -> dict[str, int]:
    """Campaign recipients and single messages handed over since midnight UTC, by their status now."""
    midnight = (now or utcnow()).replace(hour=0, minute=0, second=0, microsecond=0)
    totals = dict.fromkeys(OUTCOMES, 0)
    recipients = (CampaignRecipient.select(CampaignRecipient.status, fn.COUNT(CampaignRecipient.id))
                  .join(Campaign, on=(CampaignRecipient.campaign == Campaign.id))
                  # A campaign that finished before today sent nothing today: only the others' rows are read.
                  .where((Campaign.tenant == tenant_id)
                         & (Campaign.finished_at.is_null() | (Campaign.finished_at >= midnight))
                         & ((CampaignRecipient.sent_at >= midnight) | (CampaignRecipient.failed_at >= midnight)))
                  .group_by(CampaignRecipient.status).tuples())
    messages = (Message.select(Message.status, fn.COUNT(Message.id))
                .where((Message.tenant == tenant_id) & (Message.created_at >= midnight))
                .group_by(Message.status).tuples())
    for status, count in [*recipients, *messages]:
        if status in totals:
            totals[status] += count
    return totals


def webhook_health(tenant_id: int) -> dict:
    failing = list(WebhookEndpoint.select().where((WebhookEndpoint.tenant == tenant_id)
                                                  & (WebhookEndpoint.status == "active")
                                                  & (WebhookEndpoint.failure_count > 0))
                   .order_by(WebhookEndpoint.failure_count.desc()))
    oldest = (WebhookDelivery.select().where((WebhookDelivery.tenant == tenant_id)
                                             & WebhookDelivery.status.in_(OPEN_STATUSES))
              .order_by(WebhookDelivery.id).first())
    active = webhooks.endpoints_of(tenant_id).where(WebhookEndpoint.status == "active").count()
    return {"failing": failing, "oldest": oldest, "active": active}


class Overview:
    @page()
    def on_get(self, req, resp):
        tenant_id = ctx(req).tenant_id
        running = campaign_reads.campaign_dicts(list(
            Campaign.select().where((Campaign.tenant == tenant_id) & Campaign.status.in_(ACTIVE_STATUSES))
            .order_by(Campaign.id.desc()).limit(10)))
        render(req, resp, "overview.html", wallet=credits.wallet_of(tenant_id), sends=sends_today(tenant_id),
               running=running, health=webhook_health(tenant_id))


ROUTES = [("", Overview())]
