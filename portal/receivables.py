"""Receivables: find debts by external id or debtor document, read one with its installments,
payments and reminders, and record a manual payment (owners only)."""

from __future__ import annotations

from decimal import Decimal
from urllib.parse import urlencode

from config import formats
from config.i18n import N_
from models.errors import NotFound
from models.receivables import debts, promises
from models.receivables.inputs import PAYMENT_METHODS
from models.receivables.money import from_minor, minor_units
from models.receivables.tables import Debt, Debtor, Reminder
from models.store.db import atomic
from portal.errors import CHECK_THE_FORM
from portal.web import BASE, Refused, audit, ctx, form, locale_of, page, paginate_by_keyset, redirect, render

MAX_QUERY = 160


class Receivables:
    @page()
    def on_get(self, req, resp):
        query_text = (req.get_param("q") or "").strip()[:MAX_QUERY]
        query = debts.list_debts(ctx(req).tenant_id)
        if query_text:
            query = query.where((Debt.external_id == query_text) | (Debtor.documento == query_text))
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
        dispute = promises.standing([debt.id])[debt.id]["dispute"]
        render(req, resp, "debt.html", debt=debts.debt_detail(debt), reminders=reminders, methods=PAYMENT_METHODS,
               dispute=dispute,
               example=_example(req, debt.moneda))


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


ROUTES = [
    ("/receivables", Receivables()),
    ("/receivables/debt", DebtPage()),
    ("/receivables/debt/payments", DebtPayment()),
]
