"""Campaigns: the list, a campaign's counters, a chart of its sends over time, its recipients
with a status filter, and cancelling a queued one."""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass

import falcon
import orjson

from models.sending import campaign_ends, campaign_reads, recipient_export
from models.sending.tables import CAMPAIGN_STATUSES, COUNTERS, RECIPIENT_STATUSES
from models.store.db import atomic, bound_datetime, execute, fetch_one, is_postgres
from portal.web import BASE, audit, choice, ctx, page, paginate, paginate_by, redirect, render

CHART_WIDTH, CHART_HEIGHT, CHART_BARS = 640, 160, 60


class Campaigns:
    @page()
    def on_get(self, req, resp):
        status = choice(req, "status", CAMPAIGN_STATUSES)
        listing = paginate(req, campaign_reads.campaigns_of(ctx(req).tenant_id, status, source=None))
        listing.items = campaign_reads.campaign_dicts(listing.items)
        render(req, resp, "campaigns.html", listing=listing, chosen=status, statuses=CAMPAIGN_STATUSES)


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    count: int
    start: dt.datetime
    end: dt.datetime


@dataclass
class Chart:
    bars: list[Bar]
    peak: int
    start: dt.datetime
    end: dt.datetime
    total: int


# A campaign's sends are counted in the database through the index on (campaign, sent_at), per
# interval: the page reads at most CHART_BARS + 1 rows, whatever the campaign's size.
SEND_BOUNDS = ('SELECT MIN("sent_at"), MAX("sent_at"), COUNT(*) FROM "campaign_recipient" '
               'WHERE "campaign_id" = ? AND "sent_at" IS NOT NULL')
SENDS_PER_INTERVAL = {
    "sqlite": ('SELECT CAST((julianday("sent_at") - julianday(?)) * 86400.0 / ? AS INTEGER) AS "bar", COUNT(*) '
               'FROM "campaign_recipient" WHERE "campaign_id" = ? AND "sent_at" IS NOT NULL GROUP BY "bar"'),
    "postgres": ('SELECT FLOOR(EXTRACT(EPOCH FROM ("sent_at" - ?)) / ?) AS "bar", COUNT(*) '
                 'FROM "campaign_recipient" WHERE "campaign_id" = ? AND "sent_at" IS NOT NULL GROUP BY "bar"'),
}


def _as_datetime(value) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(value)


def sends_chart(campaign_id: int) -> Chart | None:
    """Recipients handed to the platform per interval, as bars scaled to the chart's box.

    The interval is the campaign's span split into at most CHART_BARS whole seconds or minutes.
    """
    first, last, total = fetch_one(SEND_BOUNDS, (campaign_id,))
    if not total:
        return None
    first, last = _as_datetime(first), _as_datetime(last)
    span = (last - first).total_seconds()
    step = int(span // CHART_BARS) + 1
    if step > 60:
        step = (step + 59) // 60 * 60
    counts = [0] * (int(span // step) + 1)
    statement = SENDS_PER_INTERVAL["postgres" if is_postgres() else "sqlite"]
    for bar, count in execute(statement, (bound_datetime(first), step, campaign_id)).fetchall():
        # Clamped: the database's arithmetic on times may round an edge send one bar out.
        counts[min(max(int(bar), 0), len(counts) - 1)] += count
    peak = max(counts)
    width = CHART_WIDTH / len(counts)
    bars = [Bar(i * width, CHART_HEIGHT - count / peak * CHART_HEIGHT, max(1.0, width - 1), count / peak * CHART_HEIGHT,
                count, first + dt.timedelta(seconds=i * step), first + dt.timedelta(seconds=(i + 1) * step))
            for i, count in enumerate(counts)]
    return Chart(bars, peak, first, last, total)


class Campaign:
    @page()
    def on_get(self, req, resp, campaign_id: str):
        campaign = campaign_reads.get_campaign(ctx(req).tenant_id, campaign_id)
        status = choice(req, "status", RECIPIENT_STATUSES)
        recipients = paginate_by(req, functools.partial(campaign_reads.recipients_page, campaign, status))
        render(req, resp, "campaign.html", campaign=campaign_reads.campaign_dict(campaign),
               chart=sends_chart(campaign.id), recipients=recipients, chosen=status, statuses=RECIPIENT_STATUSES,
               chart_width=CHART_WIDTH, chart_height=CHART_HEIGHT)


class CampaignProgress:
    """The counters alone, for the page's live refresh while the campaign runs."""

    @page()
    def on_get(self, req, resp, campaign_id: str):
        data = campaign_reads.campaign_dict(campaign_reads.get_campaign(ctx(req).tenant_id, campaign_id))
        progress = {name: data[name] for name in ("status", "total_recipients", *COUNTERS)}
        # What the progress bar and the overview's "sent" column show.
        progress["done"] = sum(data[name] for name in ("sent", "delivered", "read", "failed", "cancelled"))
        progress["handed_over"] = data["sent"] + data["delivered"] + data["read"]
        resp.content_type = falcon.MEDIA_JSON
        resp.data = orjson.dumps(progress)


class CampaignRecipientsCsv:
    """Every recipient of the campaign, streamed as it is read (models/sending/recipient_export.py)."""

    @page()
    def on_get(self, req, resp, campaign_id: str):
        campaign = campaign_reads.get_campaign(ctx(req).tenant_id, campaign_id)
        resp.content_type = "text/csv; charset=utf-8"
        resp.downloadable_as = f"{campaign.public_id}-recipients.csv"
        resp.stream = recipient_export.recipients_csv(campaign)


class CampaignCancel:
    @page(write="campaigns")
    def on_post(self, req, resp, campaign_id: str):
        with atomic():
            campaign = campaign_ends.cancel_campaign(ctx(req).tenant_id, campaign_id)
            audit(req, "campaign.cancelled", campaign.public_id)
        redirect(resp, f"{BASE}/campaigns/{campaign.public_id}", "campaign_cancelled")


ROUTES = [
    ("/campaigns", Campaigns()),
    ("/campaigns/{campaign_id}", Campaign()),
    ("/campaigns/{campaign_id}/progress", CampaignProgress()),
    ("/campaigns/{campaign_id}/cancel", CampaignCancel()),
    ("/campaigns/{campaign_id}/recipients.csv", CampaignRecipientsCsv()),
]
