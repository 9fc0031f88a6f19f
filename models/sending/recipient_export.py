"""A campaign's recipients as CSV, every one of them, written as it is read: pages of EXPORT_PAGE
rows by position on the (campaign, position) index, so neither the campaign's size nor how far
the export has got changes the cost of a page, and no more than a page is held at once."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from models.clock import isoformat
from models.sending.tables import Campaign, CampaignRecipient

EXPORT_PAGE = 1000
COLUMNS = ("wa_id", "external_contact_id", "status", "error_code", "error_title", "sent_at", "delivered_at",
           "read_at", "failed_at", "message_id")
_FIELDS = (CampaignRecipient.position, CampaignRecipient.wa_id, CampaignRecipient.external_contact_id,
           CampaignRecipient.status, CampaignRecipient.error_code, CampaignRecipient.last_error,
           CampaignRecipient.sent_at, CampaignRecipient.delivered_at, CampaignRecipient.read_at,
           CampaignRecipient.failed_at, CampaignRecipient.message_id)


def recipient_rows(campaign: Campaign) -> Iterator[tuple]:
    after = 0
    while True:
        page = list(CampaignRecipient.select(*_FIELDS)
                    .where((CampaignRecipient.campaign == campaign.id) & (CampaignRecipient.position > after))
                    .order_by(CampaignRecipient.position).limit(EXPORT_PAGE).tuples())
        yield from page
        if len(page) < EXPORT_PAGE:
            return
        after = page[-1][0]


def _cell(value) -> str:
    """A cell a spreadsheet will not run as a formula; a time in RFC 3339."""
    if value is None:
        return ""
    if not isinstance(value, str):
        return isoformat(value)
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def recipients_csv(campaign: Campaign) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    for count, row in enumerate(recipient_rows(campaign), start=1):
        writer.writerow([_cell(value) for value in row[1:]])
        if count % EXPORT_PAGE == 0:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode()
