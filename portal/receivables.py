"""Receivables: find debts by external id or debtor document, read one with its installments,
payments and reminders, and record a manual payment (owners only)."""

from __future__ import annotations

from urllib.parse import urlencode

from models.errors import NotFound
from models.receivables import debts
from models.receivables.inputs import PAYMENT_METHODS
from models.receivables.tables import Debt, Debtor, Reminder
from models.store.db import atomic
from portal.web import BASE, audit, ctx, form, page, paginate_by_keyset, redirect, render

MAX_QUERY = 160


class Receivables:
    @page()
    def on_get(self, req, resp):
        query_text = (req.get_param("q") or "").strip()[:MAX_QUERY]
        query = debts.list_debts(ctx(req).tenant_id)
        if query_text:
            query = query.where((Debt.external_id == query_text) | (Debtor.documento == query_text))
        render(req, resp, "receivables.html", listing=paginate_by_keyset(req, query), q=query_text)


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
        render(req, resp, "debt.html", debt=debts.debt_detail(debt), reminders=reminders, methods=PAYMENT_METHODS)


class DebtPayment:
    @page(write="receivables")
    def on_post(self, req, resp):
        debt = _debt(req)
        fields = form(req)
        with atomic():
            payment = debts.record_service_payment(ctx(req).tenant_id, debt.external_id, fields.get("amount"),
                                                   fields.get("method"))
            audit(req, "debt.payment_recorded", debt.external_id,
                  {"payment_id": payment.public_id, "amount": fields.get("amount"), "method": payment.metodo})
        redirect(resp, f"{BASE}/receivables/debt?{urlencode({'id': debt.external_id})}", "payment_recorded")


ROUTES = [
    ("/receivables", Receivables()),
    ("/receivables/debt", DebtPage()),
    ("/receivables/debt/payments", DebtPayment()),
]
