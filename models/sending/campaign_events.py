"""The fields of the events a campaign writes: `message.*` for each recipient, `campaign.*` for
the campaign (contract section 6). The outbox writes them (models/events/outbox.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from models.clock import isoformat, utcnow
from models.sending.tables import Campaign


def message_event(campaign_public_id: str, account_public_id: str, recipient: Any, status: str,
                  at: dt.datetime | None, error: dict | None = None) -> dict[str, Any]:
    """The fields of `message.*` events for a campaign recipient (contract section 6).

    `recipient` is anything with the recipient's `wa_id`, `external_contact_id`, `wam_id` and
    `public_id` (a row, or the dispatcher's job).
    """
    fields: dict[str, Any] = {
        "account_id": account_public_id,
        "campaign_id": campaign_public_id,
        "recipient": recipient.wa_id,
        "external_contact_id": recipient.external_contact_id,
        "wam_id": recipient.wam_id,
        "status": status,
        "timestamp": isoformat(at or utcnow()),
        "recipient_id": recipient.public_id,
    }
    if error is not None:
        fields["error"] = error
    return fields


def campaign_event(campaign: Campaign, account_public_id: str) -> dict[str, Any]:
    return {
        "account_id": account_public_id,
        "campaign_id": campaign.public_id,
        "external_reference": campaign.external_reference,
        "status": campaign.status,
        "total_recipients": campaign.total_recipients,
        "timestamp": isoformat(utcnow()),
    }
