"""The debtor's page, `/d/{token}`: what a debtor owes one company, and paying it, without a
session, without JavaScript (models/receivables/debtor_links.py; docs/receivables.md).

Public, outside /portal: the token in the path is the only credential, so it is never logged
(config/access_log.py redacts the path; metrics count the route's template) and never sent on
as a Referer. The page speaks the company's language with its formats. Every request is
counted per token and per client address (429 page past either limit); every POST carries the
form token bound to the link (403 page without it). `/d/back` is where the gateway returns the
payer: the payment link it names leads back to the page, so the token never goes to the gateway.
"""

from __future__ import annotations

import datetime as dt
import logging
from urllib.parse import urlsplit

import falcon

from config import get_settings
from config.client_address import client_ip
from config.i18n import N_, PageLocale, choose
from models.errors import DomainError
from models.receivables import debtor_links, promises
from models.receivables.debtor_links import PAGE_PATH, PageGone
from models.receivables.debts import tenant_today
from models.store.db import storage_unavailable
from models.tenancy.tables import Tenant
from portal import errors
from portal.web import HEADERS, Form, Refused, read_form, templates

log = logging.getLogger(__name__)

ACTIONS = ("pay", "promise", "dispute")
GONE = {
    "not_found": (404, N_("Link not found"), N_("This link does not open any page. Check that it is the whole "
                                                 "link from your message, or ask the company for a new one.")),
    "expired": (410, N_("Link expired"), N_("This link has expired. Your next reminder brings a new one, or ask "
                                            "the company for it.")),
}
NOTICES = {
    "promised": N_("Thank you. The company knows the date you will pay by."),
    "disputed": N_("Thank you. The company will review the debt and answer you."),
    "returned": N_("Thank you. Your payment shows here as soon as the payment gateway confirms it; reload the "
                   "page in a moment."),
}


def _headers() -> dict[str, str]:
    gateway = urlsplit(get_settings().payments_gateway_url)
    policy = HEADERS["Content-Security-Policy"].replace(
        "form-action 'self'", f"form-action 'self' https: {gateway.scheme}://{gateway.netloc}")
    return {**HEADERS, "Content-Security-Policy": policy, "Referrer-Policy": "no-referrer",
            "X-Robots-Tag": "noindex"}


def _locale(req: falcon.Request, company: Tenant | None) -> PageLocale:
    """The company's language and formats; before the company is known, the browser's."""
    if company is not None:
        return choose(None, None, company.locale, company.timezone)
    return choose(None, req.get_header("Accept-Language"), None, None)


def _render(resp: falcon.Response, page_locale: PageLocale, template: str, code: int = 200, **values) -> None:
    resp.status = falcon.code_to_http_status(code)
    resp.content_type = falcon.MEDIA_HTML
    resp.set_header("Content-Language", page_locale.html_lang)
    resp.text = templates.render(page_locale, template, **values)


def _message(resp: falcon.Response, page_locale: PageLocale, status: int, title: str, message: str,
             company: str | None = None, back: str | None = None, **values) -> None:
    _render(resp, page_locale, "debtor_message.html", status, status=status, title=page_locale.gettext(title),
            message=page_locale.gettext(message, **values), company=company, back=back)


def _guarded(handler):
    """Headers, the per-address and per-token limits, and every failure as a page of its own."""

    def responder(resource, req: falcon.Request, resp: falcon.Response, **params) -> None:
        resp.set_headers(_headers())
        token = params.get("token", "")
        company = None
        try:
            wait = debtor_links.throttled(debtor_links.token_hash(token) if token else None, client_ip(req))
            if wait is not None:
                resp.set_header("Retry-After", str(wait))
                raise Refused(429, N_("Too many requests"), N_("Too many requests for this page. Wait %(seconds)s "
                                                               "seconds and try again."), seconds=wait)
            link = debtor_links.open_link(token) if token else None
            company = debtor_links.company_of(link) if link is not None else None
            handler(resource, req, resp, link, _locale(req, company))
        except PageGone as gone:
            if gone.tenant_id is not None:
                company = Tenant.get_or_none(Tenant.id == gone.tenant_id)
            status, title, message = GONE[gone.reason]
            _message(resp, _locale(req, company), status, title, message, company.name if company else None)
        except Refused as refused:
            if company is None and token:  # refused before the link was read: its company's language
                company = debtor_links.company_of_token(token)
            _message(resp, _locale(req, company), refused.status, refused.title, refused.message,
                     company.name if company else None, back=req.path if token else None, **refused.values)
        except DomainError as error:
            page_locale = _locale(req, company)
            said = errors.said(error, page_locale)
            _message(resp, page_locale, said.status, said.title, said.message, company.name if company else None,
                     back=req.path if token else None, **said.values)
        except Exception as error:
            if not storage_unavailable(error):
                # The path holds the token: the route's template is logged instead.
                log.exception("debtor page error on %s %s", req.method, req.uri_template)
            _message(resp, _locale(req, company), 503 if storage_unavailable(error) else 500,
                     N_("Something went wrong"), N_("The request was not completed. Try again in a moment."),
                     company.name if company else None)

    return responder


class DebtorPage:
    """GET: the debtor's debts with the company; POST: an action on them."""

    @_guarded
    def on_get(self, req, resp, link, page_locale) -> None:
        debtor_links.mark_opened(link)
        notice = NOTICES.get(req.get_param("ok") or "")
        shown = debtor_links.statement(link)
        today = tenant_today(link.tenant_id)
        _render(resp, page_locale, "debtor.html", statement=shown, company=shown.company,
                csrf=debtor_links.form_token(link), promise_from=today + dt.timedelta(days=1),
                promise_until=today + dt.timedelta(days=promises.PROMISE_MAX_DAYS),
                action=req.path, notice=page_locale.gettext(notice) if notice else None)

    @_guarded
    def on_post(self, req, resp, link, page_locale) -> None:
        form: Form = read_form(req)
        if not debtor_links.form_token_valid(link, form.get("csrf_token")):
            raise Refused(403, N_("Form expired"), N_("This form is no longer valid (its security token is missing "
                                                      "or wrong). Go back, reload the page and try again."))
        action = form.get("action")
        if action not in ACTIONS:
            raise Refused(422, errors.CHECK_THE_FORM, N_("Choose what to do: pay, promise or dispute."))
        resp.status = falcon.HTTP_303
        if action == "pay":
            resp.location = debtor_links.pay(link, form.get("scope"), form.get("debt"), form.get("installment"),
                                             form.get("currency"))
            return
        debt = debtor_links.own_debt(link, form.get("debt"))
        if action == "promise":
            try:
                promised_date = dt.date.fromisoformat(form.get("date"))
            except ValueError:
                raise Refused(422, errors.CHECK_THE_FORM, N_("Choose the date you will pay by.")) from None
            promises.promise(debt, promised_date)
        else:
            promises.dispute(debt, form.raw("reason")[:2000])
        resp.location = f"{req.path}?ok={'promised' if action == 'promise' else 'disputed'}"


class ReturnPage:
    """GET /d/back?external_reference=plk_…: the gateway sends the payer back here."""

    @_guarded
    def on_get(self, req, resp, link, page_locale) -> None:
        token = debtor_links.page_after_payment(req.get_param("external_reference") or "")
        resp.status = falcon.HTTP_303
        resp.location = f"{PAGE_PATH}/{token}?ok=returned"


ROOT_ROUTES = [(PAGE_PATH + "/back", ReturnPage()), (PAGE_PATH + "/{token}", DebtorPage())]
