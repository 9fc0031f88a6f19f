"""Credits: the wallet and its ledger, paginated, with a CSV export of the whole ledger."""

from __future__ import annotations

import csv
import functools
import io

import falcon

from models.clock import isoformat
from models.tenancy import credits
from portal.web import ctx, page, paginate_by, render

CSV_COLUMNS = ("id", "created_at", "type", "amount", "balance_after", "reserved_after", "reference", "description")


class Credits:
    @page()
    def on_get(self, req, resp):
        tenant_id = ctx(req).tenant_id
        render(req, resp, "credits.html", wallet=credits.wallet_of(tenant_id),
               listing=paginate_by(req, functools.partial(credits.ledger_page, tenant_id)))


def ledger_csv(tenant_id: int) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for entry in credits.ledger(tenant_id).iterator():
        writer.writerow([entry.id, isoformat(entry.created_at), entry.type, entry.amount, entry.balance_after,
                         entry.reserved_after, _cell(entry.reference), _cell(entry.description)])
    return buffer.getvalue().encode()


def _cell(value: str | None) -> str:
    """A cell a spreadsheet will not run as a formula."""
    if value and value[0] in "=+-@\t\r":
        return "'" + value
    return value or ""


class CreditsCsv:
    @page()
    def on_get(self, req, resp):
        resp.content_type = "text/csv; charset=utf-8"
        resp.downloadable_as = "credits-ledger.csv"
        # Built whole while the request holds its database connection, released when it ends.
        resp.data = ledger_csv(ctx(req).tenant_id)
        resp.status = falcon.HTTP_200


ROUTES = [
    ("/credits", Credits()),
    ("/credits/ledger.csv", CreditsCsv()),
]
