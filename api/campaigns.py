"""POST/GET /campaigns, GET /campaigns/{id}, GET /campaigns/{id}/recipients(.csv), POST /campaigns/{id}/cancel."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from api.errors import validation_error
from api.operation import Reply, operation
from api.pagination import page_envelope, page_params, prepared_page
from api.schemas import PAGE_QUERY, DataOnly, Output, Page
from jobs.campaigns import enqueue_dispatch
from models.sending import campaign_ends, campaign_reads, campaigns, recipient_export
from models.sending.campaign_inputs import CampaignInput
from models.sending.tables import CAMPAIGN_STATUSES, RECIPIENT_STATUSES


class Campaign(Output):
    id: str
    external_reference: str | None
    account_id: str | None
    template_name: str | None
    template_language: str | None
    status: str
    total_recipients: int
    reserved_credits: int
    consumed_credits: int
    released_credits: int
    refunded_credits: int
    queued: int
    sent: int
    delivered: int
    read: int
    failed: int
    pending: int
    cancelled: int
    skipped: int
    hold_reason: str | None = Field(description="why a `pending` campaign is held; null otherwise")
    source: str = Field(description="`api`, or `collection` for the service's payment reminders")
    created_at: str | None
    send_at: str | None = Field(description="when a scheduled campaign starts (it stays `queued` until then); "
                                            "null: sent at once")
    started_at: str | None
    finished_at: str | None


class RecipientButton(Output):
    index: int
    type: Literal["url", "quick_reply"]
    text: str | None = Field(None, description="a URL button's suffix")
    payload: str | None = Field(None, description="a quick-reply button's payload")


class CampaignRecipient(Output):
    id: str
    wa_id: str
    external_contact_id: str | None
    status: str
    attempts: int
    last_error: str | None
    message_id: str | None
    sent_at: str | None
    created_at: str | None
    wam_id: str | None
    error_code: str | None
    delivered_at: str | None
    read_at: str | None
    payload: dict[str, Any] | None
    buttons: list[RecipientButton] | None


STATUS_QUERY = ("status", {"type": "string", "enum": list(CAMPAIGN_STATUSES)}, "only campaigns in this status")
RECIPIENT_QUERY = (
    PAGE_QUERY[0],
    ("per_page", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}, "items per page"),
    ("status", {"type": "string", "enum": list(RECIPIENT_STATUSES)}, "only recipients in this status"),
)
ERRORS = (401, 403, 404, 429)


def _status_param(req, allowed: tuple[str, ...]) -> str | None:
    status = req.get_param("status")
    if status is not None and status not in allowed:
        raise validation_error({"status": [f"status must be one of {', '.join(allowed)}"]})
    return status


class CampaignsResource:
    @operation("Create a campaign", scope="campaigns:write", body=CampaignInput,
               responses={201: DataOnly[Campaign]}, errors=(401, 403, 404, 409, 422, 429), rate_limit=60,
               tags=("campaigns",),
               description="Reserves one credit per recipient and queues the campaign; with `send_at` it "
                           "stays `queued` until then and can be cancelled meanwhile. 422 codes: "
                           "`account_inactive`, `account_not_ready`, `template_not_approved`, "
                           "`variable_count_mismatch` (details name the recipient index), "
                           "`insufficient_credits`, `wallet_paused`, `validation_failed`.")
    def on_post(self, req, resp) -> Reply:
        campaign = campaigns.create_campaign(req.context.tenant_id, req.context.body)
        data = campaign_reads.campaign_dict(campaign)
        enqueue_dispatch(campaign.id, campaign.send_at)
        return Reply(201, {"data": data})

    @operation("List campaigns created through the API, newest first", scope="campaigns:read",
               responses={200: Page[Campaign]}, errors=(401, 403, 422, 429), query=(STATUS_QUERY, *PAGE_QUERY),
               tags=("campaigns",))
    def on_get(self, req, resp) -> Reply:
        count, rows, args = campaign_reads.campaign_list(req.context.tenant_id, _status_param(req, CAMPAIGN_STATUSES))
        return Reply(200, prepared_page(req, count, rows, args, campaign_reads.listed_campaign, driver_rows=True))


class CampaignResource:
    @operation("Read a campaign with its counters and credits", scope="campaigns:read",
               responses={200: DataOnly[Campaign]}, errors=ERRORS, tags=("campaigns",))
    def on_get(self, req, resp, campaign_id: str) -> Reply:
        return Reply(200, {"data": campaign_reads.read_campaign(req.context.tenant_id, campaign_id)})


class RecipientsResource:
    @operation("List a campaign's recipients", scope="campaigns:read", responses={200: Page[CampaignRecipient]},
               errors=(401, 403, 404, 422, 429), query=RECIPIENT_QUERY, tags=("campaigns",))
    def on_get(self, req, resp, campaign_id: str) -> Reply:
        found, total = campaign_reads.campaign_size(req.context.tenant_id, campaign_id)
        status = _status_param(req, RECIPIENT_STATUSES)
        if status is not None:
            count, rows, args = campaign_reads.recipients_in(found, status)
            return Reply(200, prepared_page(req, count, rows, args, campaign_reads.listed_recipient, max_per_page=200,
                                            driver_rows=True))
        # Unfiltered, page N is the positions ((N-1)*per_page, N*per_page]: an index seek whatever
        # the page, and the total is the campaign's own (`recipients_page`).
        page, per_page = page_params(req, max_per_page=200)
        first = (page - 1) * per_page
        items = campaign_reads.recipients_at(found, first + 1, first + per_page) if first < total else []
        return Reply(200, page_envelope(req, page, per_page, total, items))


class RecipientsCsvResource:
    @operation("Every recipient of a campaign as CSV", scope="campaigns:read", responses={200: "text/csv"},
               errors=(401, 403, 404, 429), tags=("campaigns",),
               description="One row a recipient in the order they were listed: `wa_id, external_contact_id, "
                           "status, error_code, error_title, sent_at, delivered_at, read_at, failed_at, "
                           "message_id` (times RFC 3339 UTC). Written while it is read, 1000 rows at a time, "
                           "whatever the campaign's size.")
    def on_get(self, req, resp, campaign_id: str) -> Reply:
        campaign = campaign_reads.get_campaign(req.context.tenant_id, campaign_id)
        return Reply(200, None, {"Content-Disposition": f'attachment; filename="{campaign.public_id}-recipients.csv"'},
                     stream=recipient_export.recipients_csv(campaign), media_type="text/csv; charset=utf-8")


class CancelResource:
    @operation("Cancel a queued campaign", scope="campaigns:cancel", responses={200: DataOnly[Campaign]},
               errors=(401, 403, 404, 409, 429), tags=("campaigns",),
               description="Only while the campaign is `queued` (nothing sent yet); otherwise 409 "
                           "`campaign_not_cancellable`. The reserved credits are released.")
    def on_post(self, req, resp, campaign_id: str) -> Reply:
        campaign = campaign_ends.cancel_campaign(req.context.tenant_id, campaign_id)
        return Reply(200, {"data": campaign_reads.campaign_dict(campaign)})


ROUTES = [
    ("/campaigns", CampaignsResource()),
    ("/campaigns/{campaign_id}", CampaignResource()),
    ("/campaigns/{campaign_id}/recipients", RecipientsResource()),
    ("/campaigns/{campaign_id}/recipients.csv", RecipientsCsvResource()),
    ("/campaigns/{campaign_id}/cancel", CancelResource()),
]
