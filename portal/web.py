"""What every portal page shares: templates, the session cookie, CSRF, roles, forms and errors.

`@page(...)` wraps a responder the way `@operation` wraps an API one:
1. security headers on every answer (no caching, no framing, a strict Content-Security-Policy);
2. the session from its cookie (no session: to the sign-in page), a pending two-factor session
   only reaches the code page, and a company that requires two-factor sends a user without it
   to the security page;
3. every POST carries the CSRF token of its session (or, before sign-in, of the pre-session
   cookie) or is refused with 403;
4. the role: a write needs the area in the user's role (else the 403 page);
5. the handler; a domain error becomes a page with its status (404 for a foreign or unknown id).

Every page is written in its reader's language (`locale_of`: the user's choice, the browser's,
the company's; config/i18n.py). Text written here before that is known (a notice, a refusal) is
a msgid marked with `N_`, translated when the page is rendered.
"""

from __future__ import annotations

import functools
import hmac
import logging
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import falcon

from config import get_settings
from config.client_address import client_ip
from config.i18n import LANGUAGES, N_, PageLocale, choose
from config.pages import Pages
from models.errors import DomainError
from models.store.db import storage_unavailable
from models.tenancy import portal
from models.tenancy.tables import PortalSession, PortalUser, Tenant
from portal import errors
from portal.labels import label, label_in

log = logging.getLogger(__name__)

BASE = "/portal"
COOKIE = "svc_portal"
# Before sign-in there is no session to hold a CSRF token: the login and invitation forms use a
# random value kept in this cookie and echoed by the form (double submit).
PRE_COOKIE = "svc_portal_pre"
MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 200
PER_PAGE = 50
HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                                "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
}

templates = Pages(Path(__file__).with_name("templates"), globals={"label": label, "LANGUAGES": LANGUAGES})


class Refused(Exception):
    """An answer that is a page of its own: 403 (role, CSRF), 413, 422 (a form the portal itself
    checks), 429 (throttled). `title` and `message` are msgids; `values` fill the message."""

    def __init__(self, status: int, title: str, message: str, headers: dict[str, str] | None = None,
                 **values):
        super().__init__(message)
        self.status, self.title, self.message = status, title, message
        self.headers, self.values = headers or {}, values


class Form:
    def __init__(self, fields: dict[str, list[str]]):
        self.fields = fields

    def get(self, name: str, default: str = "") -> str:
        values = self.fields.get(name)
        return values[0].strip() if values else default

    def raw(self, name: str) -> str:
        """Unstripped (passwords)."""
        values = self.fields.get(name)
        return values[0] if values else ""

    def getlist(self, name: str) -> list[str]:
        return [value.strip() for value in self.fields.get(name, []) if value.strip()]


TOO_LARGE = Refused(413, N_("Form too large"), N_("Forms are limited to %(size)s KiB."), size=MAX_FORM_BYTES // 1024)
UNREADABLE = Refused(400, N_("Unreadable form"), N_("The form could not be read."))


def read_form(req: falcon.Request) -> Form:
    if req.content_length is not None and req.content_length > MAX_FORM_BYTES:
        raise TOO_LARGE
    raw = req.bounded_stream.read(MAX_FORM_BYTES + 1)
    if len(raw) > MAX_FORM_BYTES:
        raise TOO_LARGE
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise UNREADABLE from None
    try:
        fields = parse_qs(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:
        raise Refused(400, N_("Unreadable form"), N_("A form has at most %(fields)s fields."),
                      fields=MAX_FORM_FIELDS) from None
    # PostgreSQL text cannot hold NUL: refused for every field, on every engine.
    if any("\x00" in value for values in fields.values() for value in values):
        raise UNREADABLE
    return Form(fields)


@dataclass
class Context:
    user: PortalUser | None
    session: PortalSession | None
    csrf: str
    ip: str

    @property
    def tenant_id(self) -> int:
        return self.user.tenant_id


def set_session_cookie(resp: falcon.Response, token: str) -> None:
    secure = get_settings().public_url.startswith("https://")
    resp.set_cookie(COOKIE, token, path=BASE, secure=secure, http_only=True, same_site="Lax",
                    max_age=int(portal.SESSION_TTL.total_seconds()))


def clear_session_cookie(resp: falcon.Response) -> None:
    resp.unset_cookie(COOKIE, path=BASE, same_site="Lax")


def _pre_token(req: falcon.Request, resp: falcon.Response) -> str:
    token = req.cookies.get(PRE_COOKIE)
    if not token or len(token) > 100:
        token = secrets.token_urlsafe(32)
        resp.set_cookie(PRE_COOKIE, token, path=BASE, secure=get_settings().public_url.startswith("https://"),
                        http_only=True, same_site="Strict")
    return token


def _check_csrf(expected: str | None, form: Form) -> None:
    given = form.get("csrf_token")
    if not expected or not given or not hmac.compare_digest(expected.encode(), given.encode()):
        raise Refused(403, N_("Form expired"), N_("This form is no longer valid (its security token is missing "
                                                  "or wrong). Go back, reload the page and try again."))


def locale_of(req: falcon.Request, company: Tenant | None = None) -> PageLocale:
    """The reader's locale, worked out once a request: the user's choice (a session's user, even
    halfway through two-factor), the browser's Accept-Language, the company's locale (the user's,
    or `company` on a page before sign-in: an invitation)."""
    if (found := getattr(req.context, "page_locale", None)) is not None:
        return found
    context: Context | None = getattr(req.context, "portal", None)
    user = context.session.user if context is not None and context.session is not None else None
    company = user.tenant if user is not None else company
    req.context.page_locale = choose(user.language if user else None, req.get_header("Accept-Language"),
                                     company.locale if company else None, company.timezone if company else None)
    return req.context.page_locale


def render(req: falcon.Request, resp: falcon.Response, template: str, status: int = 200,
           company: Tenant | None = None, **values) -> None:
    ctx: Context | None = getattr(req.context, "portal", None)
    resp.status = falcon.code_to_http_status(status)
    resp.content_type = falcon.MEDIA_HTML
    page_locale = locale_of(req, company)
    resp.set_header("Content-Language", page_locale.html_lang)
    resp.append_header("Vary", "Accept-Language")
    # Halfway through a two-factor sign-in the user is not shown as signed in.
    signed_in = ctx is not None and ctx.session is not None and not ctx.session.pending_totp
    notice = NOTICES.get(req.get_param("ok") or "")
    resp.text = templates.render(
        page_locale, template, user=ctx.user if signed_in else None, csrf=ctx.csrf if ctx else "", path=req.path,
        notice=page_locale.gettext(notice) if notice else None, **values)


def say(req: falcon.Request, message: str, /, **values) -> str:
    """A message of a page's handler (a msgid marked with N_) in the reader's language."""
    return locale_of(req).gettext(message, **values)


def say_error(req: falcon.Request, error: DomainError) -> str:
    """A domain error as a form says it, in the reader's language."""
    said = errors.said(error, locale_of(req))
    return say(req, said.message, **said.values)


def choice(req: falcon.Request, name: str, allowed: tuple[str, ...]) -> str | None:
    """A filter's value from the query: one of `allowed`, or None when not given."""
    value = req.get_param(name) or None
    if value is not None and value not in allowed:
        raise Refused(422, errors.CHECK_THE_FORM, N_("Choose a value from the list."))
    return value


def redirect(resp: falcon.Response, location: str, notice: str | None = None) -> None:
    resp.status = falcon.HTTP_303
    resp.location = f"{location}{'&' if '?' in location else '?'}ok={notice}" if notice else location


def error_page(req: falcon.Request, resp: falcon.Response, status: int, title: str, message: str, /,
               **values) -> None:
    """A page of its own for a refusal or an error: `title` and `message` are msgids."""
    page_locale = locale_of(req)
    render(req, resp, "error.html", status=status, title=page_locale.gettext(title),
           message=page_locale.gettext(message, **values))


def page(write: str | None = None, public: bool = False, pending: bool = False, setup: bool = False,
         upload: int | None = None):
    """Declare a portal responder.

    `public`: no session needed (sign-in, invitations); `pending`: a session still waiting for its
    two-factor code may reach it; `setup`: reachable before a required two-factor is set up;
    `write`: the area a POST changes (keys, webhooks, ...), checked against the user's role;
    `upload`: the most bytes a multipart POST (a file) may carry, read by the handler with
    `read_upload`, which checks its CSRF token before the file.
    """

    def decorate(handler: Callable) -> Callable:
        @functools.wraps(handler)
        def responder(resource, req: falcon.Request, resp: falcon.Response, **params):
            resp.set_headers(HEADERS)
            try:
                if _admit(req, resp, write, public, pending, setup, upload):
                    handler(resource, req, resp, **params)
            except Refused as refused:
                resp.set_headers(refused.headers)
                error_page(req, resp, refused.status, refused.title, refused.message, **refused.values)
            except DomainError as error:
                said = errors.said(error, locale_of(req))
                error_page(req, resp, said.status, said.title, said.message, **said.values)
            except Exception as error:
                if not storage_unavailable(error):
                    log.exception("portal error on %s %s", req.method, req.path)
                error_page(req, resp, 503 if storage_unavailable(error) else 500, N_("Something went wrong"),
                           N_("The request was not completed. Try again in a moment."))

        return responder

    return decorate


def _admit(req, resp, write, public, pending, setup, upload=None) -> bool:
    ip = client_ip(req)
    session = portal.session_for(req.cookies.get(COOKIE))
    if public:
        req.context.portal = Context(session.user if session and not session.pending_totp else None, session,
                                     _pre_token(req, resp), ip)
        if req.method == "POST":
            req.context.form = read_form(req)
            _check_csrf(req.cookies.get(PRE_COOKIE), req.context.form)
        return True
    if session is None or (session.pending_totp and not pending):
        if session is None and req.cookies.get(COOKIE):
            clear_session_cookie(resp)
        target = req.path + (f"?{req.query_string}" if req.query_string and req.method == "GET" else "")
        redirect(resp, f"{BASE}/login?{urlencode({'next': target})}")
        return False
    req.context.portal = Context(session.user, session, session.csrf_token, ip)
    if req.method == "POST" and upload and _multipart(req):
        if req.content_length is None or req.content_length > upload:
            raise Refused(413, N_("File too large"), N_("A file is limited to %(size)s MiB."),
                          size=upload // (1024 * 1024))
        req.context.form = None  # read by the handler: read_upload
    elif req.method == "POST":
        req.context.form = read_form(req)
        _check_csrf(session.csrf_token, req.context.form)
    if pending:
        return True
    if not setup and not session.user.has_totp and portal.policy_of(session.user.tenant_id).require_totp:
        redirect(resp, f"{BASE}/security", "two_factor_required")
        return False
    if write and req.method == "POST" and not session.user.may(write):
        page_locale = locale_of(req)
        raise Refused(403, N_("Not allowed"), N_("Your role (%(role)s) cannot change %(area)s. Ask an owner of "
                                                 "your company."),
                      role=label_in(page_locale, "role", session.user.role), area=label_in(page_locale, "area", write))
    return True


def _multipart(req: falcon.Request) -> bool:
    return (req.content_type or "").lower().startswith("multipart/form-data")


@dataclass
class Upload:
    """A multipart form's text fields and its file: `stream` reads the file as it arrives."""

    form: Form
    filename: str
    stream: object


NO_FILE = Refused(422, N_("Check the form"), N_("Choose a file to upload."))


def read_upload(req: falcon.Request, file_field: str = "file") -> Upload:
    """The fields before the file (the CSRF token first among them, checked here before a byte of
    the file is read) and the file's part; the file is the form's last field."""
    if req.context.form is not None or not _multipart(req):
        raise NO_FILE
    fields: dict[str, list[str]] = {}
    try:
        for part in req.get_media():
            if part.name == file_field:
                form = Form(fields)
                _check_csrf(ctx(req).csrf, form)
                if not part.filename:
                    raise NO_FILE
                return Upload(form, part.filename, part.stream)
            if len(fields) >= MAX_FORM_FIELDS:
                raise UNREADABLE
            text = part.get_text() or ""
            if "\x00" in text:
                raise UNREADABLE
            fields.setdefault(part.name or "", []).append(text)
    except falcon.HTTPError:
        raise UNREADABLE from None
    _check_csrf(ctx(req).csrf, Form(fields))
    raise NO_FILE


def ctx(req: falcon.Request) -> Context:
    return req.context.portal


def form(req: falcon.Request) -> Form:
    return req.context.form


def audit(req: falcon.Request, action: str, target: str | None = None, details: dict | None = None) -> None:
    context = ctx(req)
    portal.audit(context.tenant_id, context.user, action, target, details, context.ip)


def require(req: falcon.Request, area: str) -> None:
    """For GET pages that only a role may see (users, the audit log)."""
    if not ctx(req).user.may(area):
        raise Refused(403, N_("Not allowed"), N_("Your role (%(role)s) cannot see this page."),
                      role=label_in(locale_of(req), "role", ctx(req).user.role))


@dataclass
class Paged:
    items: list
    page: int
    pages: int
    total: int
    prev_url: str | None
    next_url: str | None


# One page of a list and the list's length: (page number from 1, rows a page) -> (rows, total).
# A page past the end answers no rows and the total, as the model's page functions do.
PageOf = Callable[[int, int], tuple[list, int]]


def paginate(req: falcon.Request, query, per_page: int = PER_PAGE) -> Paged:
    """Pages of a query by COUNT and OFFSET, whose cost grows with the page number: for the short
    lists (campaigns, users, keys, numbers); the lists that grow without bound page by keyset."""

    def page_of(number: int, size: int) -> tuple[list, int]:
        total = query.count()
        if (number - 1) * size >= total:
            return [], total
        return list(query.paginate(number, size)), total

    return paginate_by(req, page_of, per_page)


def paginate_by(req: falcon.Request, page_of: PageOf, per_page: int = PER_PAGE) -> Paged:
    """The page the request names, read by `page_of` (a model's page function, the one its API
    list uses too): a page number that is not one is page 1, one past the end is the last page."""
    try:
        number = max(1, int(req.get_param("page") or 1))
    except ValueError:
        number = 1
    items, total = page_of(number, per_page)
    pages = max(1, math.ceil(total / per_page))
    if number > pages:
        # Only a page past the end pays for a second read; the total came with the first.
        number = pages
        items, _ = page_of(number, per_page)
    others = {name: value for name, value in req.params.items() if name not in {"page", "ok"} and value}

    def link(target: int) -> str:
        return f"{req.path}?{urlencode({**others, 'page': target})}"

    return Paged(items, number, pages, total, link(number - 1) if number > 1 else None,
                 link(number + 1) if number < pages else None)


# The largest id a cursor may name: both engines' BIGINT. A larger number would make PostgreSQL
# compare the key as NUMERIC, and no index serves that.
MAX_CURSOR = 2 ** 63 - 1


@dataclass
class Keyset:
    """A page of a list walked by id, newest first. No count: a link is there only when a row
    lies beyond it, and `newest_url` (on an empty page a cursor led to) leads back to the start."""

    items: list
    newer_url: str | None
    older_url: str | None
    newest_url: str | None


def _cursor(req: falcon.Request, name: str) -> int | None:
    digits = (req.get_param(name) or "").lstrip("0")
    if not digits.isascii() or not digits.isdigit():
        return None  # not a positive whole number (zero included): as if no cursor were given
    # Measured before it is read: Python refuses to read an integer of thousands of digits.
    return MAX_CURSOR if len(digits) > len(str(MAX_CURSOR)) else min(int(digits), MAX_CURSOR)


def paginate_by_keyset(req: falcon.Request, query, per_page: int = PER_PAGE) -> Keyset:
    """The page of `query` (its tenant condition and filters already in it) that the request's
    cursor names, newest first by primary key, whatever the list's length:
    1. `?before=<id>` reads the rows with a smaller id, largest first; `?after=<id>` the rows with
       a larger id, smallest first (then reversed); no cursor (or one that is not a positive whole
       number) is the first page. `before` wins when both are given.
    2. Each is an index seek on the key plus LIMIT per_page + 1: the extra row only tells whether a
       further page exists in that direction, and is not shown.
    3. A cursor page probes the other direction for one row, so its back link is there only when
       something lies behind it.
    4. A cursor past either end reads no rows: an empty page with a link back to the newest.
    The ORDER BY is set here, on the key, so a page holds the rows the list shows in its order."""
    key = query.model._meta.primary_key

    def id_of(row) -> int:
        return getattr(row, key.name)

    before, after = _cursor(req, "before"), _cursor(req, "after")
    if before is None and after is not None:
        rows = list(query.where(key > after).order_by(key.asc()).limit(per_page + 1))
        newer_beyond = len(rows) > per_page
        items = rows[:per_page][::-1]
        older_beyond = bool(items) and query.where(key < id_of(items[-1])).order_by(key.desc()).exists()
    else:
        seek = query if before is None else query.where(key < before)
        rows = list(seek.order_by(key.desc()).limit(per_page + 1))
        older_beyond = len(rows) > per_page
        items = rows[:per_page]
        newer_beyond = before is not None and bool(items) and \
            query.where(key > id_of(items[0])).order_by(key.asc()).exists()
    others = {name: value for name, value in req.params.items()
              if name not in {"before", "after", "page", "ok"} and value}

    def link(**cursor: int) -> str:
        query_string = urlencode({**others, **cursor})
        return f"{req.path}?{query_string}" if query_string else req.path

    past_the_end = not items and (before is not None or after is not None)
    return Keyset(items, link(after=id_of(items[0])) if newer_beyond else None,
                  link(before=id_of(items[-1])) if older_beyond else None, link() if past_the_end else None)


NOTICES = {
    "key_revoked": N_("The key is revoked: the API refuses it from now on."),
    "endpoint_disabled": N_("The endpoint is disabled; deliveries still pending for it are cancelled."),
    "replayed": N_("Replay queued: the deliveries appear in the log below."),
    "campaign_cancelled": N_("The campaign is cancelled and its reserved credits released."),
    "payment_recorded": N_("The payment is recorded and debt.payment_received emitted."),
    "plan_created": N_("Plan created: it applies from the next collection run."),
    "plan_deleted": N_("Plan deleted: its debts follow the next most specific plan."),
    "dispute_resolved": N_("Dispute resolved: reminders resume from the plan's current step."),
    "template_submitted": N_("Template submitted: it stays pending until the platform reviews it."),
    "template_deleted": N_("Template deleted on the platform and here."),
    "campaign_created": N_("Campaign created: its credits are reserved and sending starts now."),
    "campaign_scheduled": N_("Campaign scheduled: its credits are reserved until it starts."),
    "invited": N_("Invitation created."),
    "role_changed": N_("Role changed."),
    "user_removed": N_("User removed; their sessions ended."),
    "two_factor_on": N_("Two-factor sign-in is on for your user."),
    "two_factor_off": N_("Two-factor sign-in is off for your user."),
    "policy_saved": N_("Company sign-in policy saved."),
    "two_factor_required": N_("Your company requires two-factor sign-in: set it up to continue."),
    "password_changed": N_("Password changed; your other sessions have ended."),
    "language_saved": N_("Language saved."),
    "signed_out": N_("Signed out."),
    "signed_out_everywhere": N_("Every session of your user has ended; sign in again."),
}
