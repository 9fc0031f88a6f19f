"""Receivables: find debts by external id or debtor document, read one with its installments,
payments, reminders, what the debtor said (a promise, a dispute) and answered in WhatsApp, record
a manual payment (owners only), and the collection report with its charts (bars drawn here as SVG)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from urllib.parse import urlencode

from config import formats
from config.i18n import N_
from models.errors import NotFound
from models.receivables import debts
from models.receivables.inputs import PAYMENT_METHODS
from models.receivables.money import from_minor, minor_units
from models.receivables.promises import standing
from models.receivables.replies import replies_of
from models.receivables.report import AGING_BUCKETS, FUNNEL, report
from models.receivables.tables import Debt, Reminder
from models.store.db import atomic
from models.tenancy.tables import Tenant
from portal.errors import CHECK_THE_FORM
from portal.web import BASE, Refused, audit, ctx, form, locale_of, page, paginate_by_keyset, redirect, render

MAX_QUERY = 160


class Receivables:
    @page()
    def on_get(self, req, resp):
        query_text = (req.get_param("q") or "").strip()[:MAX_QUERY]
        tenant_id = ctx(req).tenant_id
        query = debts.search_debts(tenant_id, query_text) if query_text else debts.list_debts(tenant_id)
        listing = paginate_by_keyset(req, query)
        for debt in listing.items:
            debt.outstanding = from_minor(debt.saldo_pendiente, debt.moneda)
        render(req, resp, "receivables.html", listing=listing, q=query_text)


def _debt(req) -> Debt:
    external_id = req.get_param("id") or (form(req).get("id") if req.method == "POST" else "")
    if not external_id:
        raise NotFound("no debt named")
    return debts.get_debt(ctx(req).tenant_id, external_id)


class DebtPage:
    @page()
    def on_get(self, req, resp):
        debt = _debt(req)
        reminders = list(Reminder.select().where(Reminder.debt == debt.id).order_by(Reminder.id))
        render(req, resp, "debt.html", debt=debts.debt_detail(debt), reminders=reminders, methods=PAYMENT_METHODS,
               example=_example(req, debt.moneda), replies=replies_of(debt.id),
               said=standing([debt.id])[debt.id])


def _example(req, currency: str) -> str:
    """An amount in the currency, written as the reader's locale writes it: what the form expects."""
    digits = minor_units(currency)
    return formats.amount(Decimal("150000") if digits == 0 else Decimal("1234.5"), digits, locale_of(req).formats)


def _amount(req, currency: str) -> Decimal:
    """The amount typed, read as the reader's locale writes numbers, with no more decimals than the
    currency has: in English formats `150.000` would be 150 pesos where a Chilean meant 150000."""
    try:
        amount = formats.parse_amount(form(req).get("amount"), locale_of(req).formats)
    except ValueError:
        amount = None
    if amount is None or -amount.as_tuple().exponent > minor_units(currency):
        raise Refused(422, CHECK_THE_FORM, N_("Enter the amount as %(example)s (in %(currency)s)."),
                      example=_example(req, currency), currency=currency)
    return amount


class DebtPayment:
    @page(write="receivables")
    def on_post(self, req, resp):
        debt = _debt(req)
        amount, method = _amount(req, debt.moneda), form(req).get("method")
        with atomic():
            payment = debts.record_service_payment(ctx(req).tenant_id, debt.external_id, amount, method)
            audit(req, "debt.payment_recorded", debt.external_id,
                  {"payment_id": payment.public_id, "amount": str(amount), "method": payment.metodo})
        redirect(resp, f"{BASE}/receivables/debt?{urlencode({'id': debt.external_id})}", "payment_recorded")


# The report's figures as the page names them (msgids), in the funnel's order.
FUNNEL_NAMES = dict(zip(FUNNEL, (N_("Reminded"), N_("Delivered"), N_("Read"), N_("Page opened"), N_("Promised"),
                                 N_("Disputed"), N_("Paid within 7 days")), strict=True))
AGING_NAMES = dict(zip((name for name, _ in AGING_BUCKETS),
                       (N_("Current"), N_("1–30 days"), N_("31–60 days"), N_("61–90 days"), N_("Over 90 days")),
                       strict=True))
BAR_WIDTH = 360  # the longest bar of a chart, in the SVG's units


def _day(req, name: str) -> dt.date | None:
    raw = (req.get_param(name) or "").strip()
    if not raw:
        return None
    try:
        return dt.date.fromisoformat(raw)
    except ValueError:
        raise Refused(422, CHECK_THE_FORM, N_("Enter dates as YYYY-MM-DD.")) from None


def bars(values: list[Decimal | int]) -> list[int]:
    """Each value's bar length, the largest BAR_WIDTH long; a value above zero shows at least 1."""
    top = max(values, default=0)
    return [max(1, round(value * BAR_WIDTH / top)) if value > 0 else 0 for value in values]


class ReportPage:
    @page()
    def on_get(self, req, resp):
        since, until = _day(req, "since"), _day(req, "until")
        if since and until and since >= until:
            raise Refused(422, CHECK_THE_FORM, N_("The end date must be after the start date."))
        start = dt.datetime.combine(since, dt.time()) if since else None
        end = dt.datetime.combine(until, dt.time()) if until else None
        data = report(Tenant.get_by_id(ctx(req).tenant_id), start, end).as_dict()
        for row in data["steps"] + data["campaigns"]:
            row["bars"] = list(zip(FUNNEL, bars([row[name] for name in FUNNEL]), strict=True))
        for row in data["aging"]:
            row["bars"] = list(zip((name for name, _ in AGING_BUCKETS),
                                   bars([Decimal(str(row[name])) for name, _ in AGING_BUCKETS]), strict=True))
        render(req, resp, "receivables_report.html", report=data, funnel=FUNNEL_NAMES, buckets=AGING_NAMES,
               since=since, until=until, bar_width=BAR_WIDTH)


ROUTES = [
    ("/receivables/report", ReportPage()),
    ("/receivables", Receivables()),
    ("/receivables/debt", DebtPage()),
    ("/receivables/debt/payments", DebtPayment()),
]
