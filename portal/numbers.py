"""Numbers: status, quality and limits; connecting a new one (the onboarding flow); templates."""

from __future__ import annotations

from config import get_settings
from models.numbers import accounts, onboarding
from models.numbers.tables import Template
from models.store.db import atomic
from portal.web import BASE, audit, ctx, form, page, redirect, render


class Numbers:
    @page()
    def on_get(self, req, resp):
        numbers = list(accounts.accounts_of(ctx(req).tenant_id))
        sent = accounts.messages_sent_today_by_account([number.id for number in numbers])
        outcome = None
        if req.get_param("attempt_id"):
            outcome = {"success": req.get_param("success") == "true", "account_id": req.get_param("account_id"),
                       "error": req.get_param("error")}
        render(req, resp, "numbers.html", numbers=numbers, sent=sent, outcome=outcome)


class Connect:
    @page(write="numbers")
    def on_post(self, req, resp):
        label = form(req).get("label")[:120] or None
        with atomic():
            # The onboarding page sends the user back here with the outcome in the query.
            attempt = onboarding.create_attempt(ctx(req).tenant_id, f"{get_settings().public_url}{BASE}/numbers",
                                                label)
            audit(req, "number.connect_started", attempt.public_id, {"label": label})
        redirect(resp, onboarding.onboarding_url(attempt))


class Number:
    @page()
    def on_get(self, req, resp, account_id: str):
        account = accounts.get_account(ctx(req).tenant_id, account_id)
        templates = list(Template.select().where(Template.account == account.id)
                         .order_by(Template.name, Template.language))
        render(req, resp, "number.html", number=account, templates=templates,
               sent_today=accounts.messages_sent_today(account.id))


ROUTES = [
    ("/numbers", Numbers()),
    ("/numbers/connect", Connect()),
    ("/numbers/{account_id}", Number()),
]
