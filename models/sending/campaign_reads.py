"""What a client reads of campaigns: one campaign, the list, and a campaign's recipients, as the
contract's dicts. The hot reads (GET /campaigns/{id}, GET /campaigns, a page of recipients) run
statements built once and make their dicts straight from the driver's rows."""

from __future__ import annotations

import datetime as dt
from typing import Any

from peewee import fn

from models.clock import isoformat, stored_isoformat
from models.errors import NotFound
from models.numbers.tables import MessagingAccount
from models.sending.campaign_counters import counters_of
from models.sending.tables import COUNTERS, Campaign, CampaignCounters, CampaignRecipient
from models.store.db import fetch_one
from models.store.prepared import Prepared


def get_campaign(tenant_id: int, public_id: str) -> Campaign:
    campaign = Campaign.get_or_none((Campaign.public_id == public_id) & (Campaign.tenant == tenant_id))
    if campaign is None:
        raise NotFound(f"no campaign {public_id}", code="campaign_not_found")
    return campaign


def find_campaign(public_id: str) -> Campaign:
    """Any tenant's campaign: for administrators (svcctl) only."""
    campaign = Campaign.get_or_none(Campaign.public_id == public_id)
    if campaign is None:
        raise NotFound(f"no campaign {public_id}", code="campaign_not_found")
    return campaign


def scheduled_until(until: dt.datetime) -> list[tuple[int, str, dt.datetime]]:
    """Scheduled campaigns still `queued` whose `send_at` comes by `until` (naive UTC), soonest
    first: (id, public id, send_at)."""
    return list(Campaign.select(Campaign.id, Campaign.public_id, Campaign.send_at)
                .where((Campaign.status == "queued") & Campaign.send_at.is_null(False) & (Campaign.send_at <= until))
                .order_by(Campaign.send_at).tuples())


def campaigns_of(tenant_id: int, status: str | None = None, source: str | None = "api"):
    """A tenant's campaigns, newest first (a query, for pagination)."""
    query = Campaign.select().where(Campaign.tenant == tenant_id)
    if source is not None:
        query = query.where(Campaign.source == source)
    if status is not None:
        query = query.where(Campaign.status == status)
    return query.order_by(Campaign.id.desc())


def recipients_page(campaign: Campaign, status: str | None, page: int, per_page: int) -> \
        tuple[list[CampaignRecipient], int]:
    """One page of the campaign's recipients in the order they were listed, and their number.

    Unfiltered, page N is the positions ((N-1)*per_page, N*per_page]: an index seek on
    (campaign, position), and the total is the campaign's own count, so neither the page number
    nor the campaign's size changes the cost. Filtered by status, the page's ids come from the
    (campaign, status, id) index alone and only those rows are read.
    """
    first = (page - 1) * per_page
    if status is None:
        total = campaign.total_recipients
        if first >= total:
            return [], total
        rows = (CampaignRecipient.select()
                .where((CampaignRecipient.campaign == campaign.id)
                       & CampaignRecipient.position.between(first + 1, first + per_page))
                .order_by(CampaignRecipient.position))
        return list(rows), total
    matching = CampaignRecipient.select(CampaignRecipient.id).where(
        (CampaignRecipient.campaign == campaign.id) & (CampaignRecipient.status == status))
    total = matching.count()
    if first >= total:
        return [], total
    ids = [row[0] for row in matching.order_by(CampaignRecipient.id).limit(per_page).offset(first).tuples()]
    return list(CampaignRecipient.select().where(CampaignRecipient.id.in_(ids)).order_by(CampaignRecipient.id)), total


# GET /campaigns/{id}/recipients: the campaign found by one statement built once, and its page
# by another, each row made the contract's dict straight from the driver's row.
_RECIPIENT_COLUMNS = (CampaignRecipient.public_id, CampaignRecipient.wa_id, CampaignRecipient.external_contact_id,
                      CampaignRecipient.status, CampaignRecipient.attempts, CampaignRecipient.last_error,
                      CampaignRecipient.message_id, CampaignRecipient.sent_at, CampaignRecipient.created_at,
                      CampaignRecipient.wam_id, CampaignRecipient.error_code, CampaignRecipient.delivered_at,
                      CampaignRecipient.read_at, CampaignRecipient.payload, CampaignRecipient.buttons)
# Example arguments of the statements built once: values no constant of theirs takes.
_TENANT, _STATUS, _LIMIT, _OFFSET = -7_000_000_001, "\0status", -7_000_000_002, -7_000_000_003
_PUBLIC_ID, _CAMPAIGN, _FIRST, _LAST = "\0public_id", -7_000_000_004, -7_000_000_005, -7_000_000_006
_CAMPAIGN_SIZE = Prepared(lambda public_id, tenant_id: Campaign.select(Campaign.id, Campaign.total_recipients)
                          .where((Campaign.public_id == public_id) & (Campaign.tenant == tenant_id)).limit(1)
                          .tuples(), _PUBLIC_ID, _TENANT)
_RECIPIENTS_AT = Prepared(lambda campaign_id, first, last: CampaignRecipient.select(*_RECIPIENT_COLUMNS)
                          .where((CampaignRecipient.campaign == campaign_id)
                                 & CampaignRecipient.position.between(first, last))
                          .order_by(CampaignRecipient.position).tuples(), _CAMPAIGN, _FIRST, _LAST)
_RECIPIENTS_COUNT_IN = Prepared(lambda campaign_id, status: CampaignRecipient.select(fn.COUNT(CampaignRecipient.id))
                                .where((CampaignRecipient.campaign == campaign_id)
                                       & (CampaignRecipient.status == status)).tuples(), _CAMPAIGN, _STATUS)
# The page's ids from the (campaign, status, id) index alone, and only their rows read.
_MATCHING = CampaignRecipient.alias("matching")
_RECIPIENTS_IN = Prepared(lambda campaign_id, status, limit, offset: CampaignRecipient.select(*_RECIPIENT_COLUMNS)
                          .where(CampaignRecipient.id.in_(
                              _MATCHING.select(_MATCHING.id)
                              .where((_MATCHING.campaign == campaign_id) & (_MATCHING.status == status))
                              .order_by(_MATCHING.id).limit(limit).offset(offset)))
                          .order_by(CampaignRecipient.id).tuples(), _CAMPAIGN, _STATUS, _LIMIT, _OFFSET)


def campaign_size(tenant_id: int, public_id: str) -> tuple[int, int]:
    """The tenant's campaign's id and number of recipients; 404 `campaign_not_found` as
    `get_campaign`."""
    row = _CAMPAIGN_SIZE.driver_row(public_id, tenant_id)
    if row is None:
        raise NotFound(f"no campaign {public_id}", code="campaign_not_found")
    return row


def recipients_at(campaign_id: int, first: int, last: int) -> list[dict]:
    """The campaign's recipients at positions `first` to `last` (as `recipients_page` reads an
    unfiltered page), each as `CampaignRecipient.as_dict`."""
    return [listed_recipient(row) for row in _RECIPIENTS_AT.driver_rows(campaign_id, first, last)]


def recipients_in(campaign_id: int, status: str) -> tuple[Prepared, Prepared, tuple]:
    """The two statements of a page of the campaign's recipients in `status`, in the order they
    were listed (as `recipients_page` reads a filtered page), and their arguments (the page's
    LIMIT and OFFSET follow them in the rows' statement); `listed_recipient` makes a row the
    contract's dict."""
    return _RECIPIENTS_COUNT_IN, _RECIPIENTS_IN, (campaign_id, status)


_JSON = CampaignRecipient.payload.python_value  # a driver's JSON text as the model reads it


def listed_recipient(row: tuple) -> dict:
    """`CampaignRecipient.as_dict` of a row of `_RECIPIENT_COLUMNS`."""
    (public_id, wa_id, external_contact_id, status, attempts, last_error, message_id, sent_at, created_at, wam_id,
     error_code, delivered_at, read_at, payload, buttons) = row
    return {
        "id": public_id,
        "wa_id": wa_id,
        "external_contact_id": external_contact_id,
        "status": status,
        "attempts": attempts,
        "last_error": last_error,
        "message_id": message_id,
        "sent_at": stored_isoformat(sent_at),
        "created_at": stored_isoformat(created_at),
        "wam_id": wam_id,
        "error_code": error_code,
        "delivered_at": stored_isoformat(delivered_at),
        "read_at": stored_isoformat(read_at),
        "payload": _JSON(payload),
        "buttons": _JSON(buttons),
    }


def campaign_dicts(campaigns: list[Campaign]) -> list[dict]:
    """The contract's Campaign for each, counters included, in two queries whatever the number."""
    counters = counters_of(c.id for c in campaigns)
    account_ids = {c.account_id for c in campaigns}
    accounts = dict(MessagingAccount.select(MessagingAccount.id, MessagingAccount.public_id)
                    .where(MessagingAccount.id.in_(list(account_ids))).tuples()) if account_ids else {}
    return [_as_dict(c, accounts.get(c.account_id), counters[c.id]) for c in campaigns]


def campaign_dict(campaign: Campaign) -> dict:
    return campaign_dicts([campaign])[0]


# GET /campaigns/{id}, the read a client polls while its campaign runs: its SQL written once
# (peewee builds a query's text anew on every call, which cost more than the statement) and its row
# read as a tuple: the campaign, its number's public id and its counters, in the columns of a row
# of the list (`listed_campaign`).
_CAMPAIGN_READ = (
    'SELECT c."public_id", c."external_reference", a."public_id", c."template_name", '
    'c."template_language", c."status", c."total_recipients", m."reserved", m."consumed", m."released", '
    'm."refunded", ' + "".join(f'm."{name}", ' for name in COUNTERS) +
    'c."hold_reason", c."source", c."created_at", c."send_at", c."started_at", c."finished_at" '
    'FROM "campaign" AS c JOIN "messaging_account" AS a ON a."id" = c."account_id" '
    'JOIN "campaign_counters" AS m ON m."campaign_id" = c."id" '
    'WHERE c."public_id" = ? AND c."tenant_id" = ?')
_FIRST_COUNTER = 11  # where the counters per status start in such a row
_AFTER_COUNTERS = _FIRST_COUNTER + len(COUNTERS)


def read_campaign(tenant_id: int, public_id: str) -> dict:
    """The contract's Campaign of the tenant's campaign `public_id` (what `campaign_dict` gives
    for it, in one statement); 404 `campaign_not_found` when the tenant has none by that id."""
    row = fetch_one(_CAMPAIGN_READ, (public_id, tenant_id))
    if row is None:
        raise NotFound(f"no campaign {public_id}", code="campaign_not_found")
    return listed_campaign(row)


def listed_campaign(row: tuple) -> dict:
    """The contract's Campaign from a statement's columns as the driver gives them (a row of
    `campaign_list`'s statement, or of `read_campaign`'s): from its public id to its refunded
    credits, then its counters per status, then from its hold reason to its finish time."""
    (public_id, external_reference, account_public_id, template_name, template_language, status, total, reserved,
     consumed, released, refunded) = row[:_FIRST_COUNTER]
    hold_reason, source, created_at, send_at, started_at, finished_at = row[_AFTER_COUNTERS:]
    return {
        "id": public_id,
        "external_reference": external_reference,
        "account_id": account_public_id,
        "template_name": template_name,
        "template_language": template_language,
        "status": status,
        "total_recipients": total,
        "reserved_credits": reserved,
        "consumed_credits": consumed,
        "released_credits": released,
        "refunded_credits": refunded,
        **dict(zip(COUNTERS, row[_FIRST_COUNTER:_AFTER_COUNTERS], strict=True)),
        "hold_reason": hold_reason if status == "pending" else None,
        "source": source,
        "created_at": stored_isoformat(created_at),
        "send_at": stored_isoformat(send_at),
        "started_at": stored_isoformat(started_at),
        "finished_at": stored_isoformat(finished_at),
    }


# GET /campaigns, a page of the list: its count and its rows are statements built once
# (models/store/prepared.py), each row the campaign joined with its number's public id and its
# counters; made into the contract's dict straight from the driver's row.


def _listed(tenant_id: int, status: str | None) -> Any:
    condition = (Campaign.tenant == tenant_id) & (Campaign.source == "api")
    return condition if status is None else condition & (Campaign.status == status)


def _listed_rows(tenant_id: int, status: str | None, limit: int, offset: int) -> Any:
    counters = [getattr(CampaignCounters, name) for name in COUNTERS]
    return (Campaign.select(Campaign.public_id, Campaign.external_reference, MessagingAccount.public_id,
                            Campaign.template_name, Campaign.template_language, Campaign.status,
                            Campaign.total_recipients, CampaignCounters.reserved, CampaignCounters.consumed,
                            CampaignCounters.released, CampaignCounters.refunded, *counters, Campaign.hold_reason,
                            Campaign.source, Campaign.created_at, Campaign.send_at, Campaign.started_at,
                            Campaign.finished_at)
            .join(MessagingAccount, on=MessagingAccount.id == Campaign.account)
            .switch(Campaign).join(CampaignCounters, on=CampaignCounters.campaign == Campaign.id)
            .where(_listed(tenant_id, status)).order_by(Campaign.id.desc()).limit(limit).offset(offset).tuples())


_LIST_COUNT = Prepared(lambda tenant_id: Campaign.select(fn.COUNT(Campaign.id)).where(_listed(tenant_id, None))
                       .tuples(), _TENANT)
_LIST_ROWS = Prepared(lambda tenant_id, limit, offset: _listed_rows(tenant_id, None, limit, offset),
                      _TENANT, _LIMIT, _OFFSET)
_LIST_COUNT_IN = Prepared(lambda tenant_id, status: Campaign.select(fn.COUNT(Campaign.id))
                          .where(_listed(tenant_id, status)).tuples(), _TENANT, _STATUS)
_LIST_ROWS_IN = Prepared(lambda tenant_id, status, limit, offset: _listed_rows(tenant_id, status, limit, offset),
                         _TENANT, _STATUS, _LIMIT, _OFFSET)


def campaign_list(tenant_id: int, status: str | None) -> tuple[Prepared, Prepared, tuple]:
    """GET /campaigns' two statements and their arguments (the page's LIMIT and OFFSET follow them
    in the rows' statement): the tenant's API campaigns, in `status` if given, newest first, as
    `campaigns_of` finds them. `listed_campaign` makes a row the contract's dict."""
    if status is None:
        return _LIST_COUNT, _LIST_ROWS, (tenant_id,)
    return _LIST_COUNT_IN, _LIST_ROWS_IN, (tenant_id, status)


def _as_dict(campaign: Campaign, account_public_id: str | None, counters: CampaignCounters) -> dict:
    return {
        "id": campaign.public_id,
        "external_reference": campaign.external_reference,
        "account_id": account_public_id,
        "template_name": campaign.template_name,
        "template_language": campaign.template_language,
        "status": campaign.status,
        "total_recipients": campaign.total_recipients,
        "reserved_credits": counters.reserved,
        "consumed_credits": counters.consumed,
        "released_credits": counters.released,
        "refunded_credits": counters.refunded,
        **{name: getattr(counters, name) for name in COUNTERS},
        "hold_reason": campaign.hold_reason if campaign.status == "pending" else None,
        "source": campaign.source,
        "created_at": isoformat(campaign.created_at),
        "send_at": isoformat(campaign.send_at),
        "started_at": isoformat(campaign.started_at),
        "finished_at": isoformat(campaign.finished_at),
    }
