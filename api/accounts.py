"""Numbers and templates: the coexistence link, account and template reads, and the onboarding page.

The page (`/onboarding/{attempt_id}`, outside /api/v1) is what `onboarding_url` points at. With
a real platform it runs the platform's embedded signup in the user's browser and posts the
result to `/onboarding/{attempt_id}/complete`; in simulator mode its `connect` button asks the
simulator for a signup instead. Either way the user ends on the company's `redirect_url`.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from string import Template as TextTemplate
from typing import Any
from urllib.parse import parse_qsl

import falcon
import orjson
from pydantic import ConfigDict, Field

from api.errors import ApiError, envelope
from api.operation import Reply, ok, operation
from api.pagination import counted_page, prepared_page
from api.schemas import PAGE_QUERY, DataOnly, HttpsUrl, Input, Output, Page, Success, text
from config import get_settings
from models.clock import isoformat
from models.errors import DomainError
from models.numbers import accounts, onboarding, template_authoring
from models.numbers.tables import PLATFORM_UNAVAILABLE, SIGNUP_CANCELLED, SIGNUP_FAILED
from models.store.db import atomic

log = logging.getLogger(__name__)

CONNECT_RATE_LIMIT = 20
MAX_FORM_BYTES = 64 * 1024
PAGE_TEMPLATE = TextTemplate((Path(__file__).with_name("templates") / "onboarding.html").read_text())
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    # The attempt id in the URL is the page's only credential: keep it out of Referer headers
    # (the platform's SDK is loaded from another origin) and out of frames.
    "Referrer-Policy": "origin",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
}


class CoexistenceLinkInput(Input):
    redirect_url: HttpsUrl
    label: text(120) | None = None
    external_reference: text(120) | None = None


class CoexistenceLink(Output):
    onboarding_url: str
    attempt_id: str
    expires_at: str


class Account(Output):
    id: str
    label: str | None
    external_reference: str | None
    phone_number: str | None
    name: str | None
    status: str
    connection_mode: str
    business_account_id: str | None
    phone_id: str | None
    subscribed_to_webhooks: bool
    quality_rating: str | None
    daily_limit: int | None
    messages_sent_today: int | None
    created_at: str | None
    connected_at: str | None


class Template(Output):
    id: str | None
    name: str
    display_name: str | None
    language: str
    status: str
    category: str | None
    quality_score: str | None
    body_text: str | None
    header_type: str | None
    variable_count: int | None
    variables: list
    components: list
    updated_at: str | None


class TemplateButtonInput(Input):
    """A button as Graph takes it; further Graph fields (OTP buttons' settings) pass through."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: str = Field(description="QUICK_REPLY, URL or PHONE_NUMBER (OTP in an AUTHENTICATION template)")
    text: str | None = Field(None, description="at most 25 characters")
    url: str | None = Field(None, description="http(s); a dynamic URL ends in `{{1}}`")
    phone_number: str | None = None
    example: list[str] | None = Field(None, description="a dynamic URL's full example")


class TemplateComponentInput(Input):
    """A component as Graph takes it (`example` in Graph's shapes: `{body_text: [[...]]}`,
    `{header_text: [...]}`, `{header_handle: [...]}`)."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: str = Field(description="HEADER, BODY, FOOTER or BUTTONS")
    format: str | None = Field(None, description="a HEADER's: TEXT, IMAGE, VIDEO or DOCUMENT")
    text: str | None = None
    example: dict[str, Any] | None = None
    buttons: list[TemplateButtonInput] | None = None


class TemplateInput(Input):
    name: str = Field(description="lowercase letters, digits and underscores; at most 512")
    language: str = Field(description="the platform's language code: es, es_MX, pt_BR, en_US, ...")
    category: str = Field(description="MARKETING, UTILITY or AUTHENTICATION")
    components: list[TemplateComponentInput] = Field(max_length=20)


class ReviewedTemplate(Template):
    rejected_reason: str | None
    status_detail: str | None
    previous_category: str | None


class DeletedTemplates(Output):
    name: str
    deleted: list[ReviewedTemplate]


class CoexistenceLinkResource:
    @operation("Create a link that connects a WhatsApp Business app number (coexistence)",
               scope="accounts:connect", body=CoexistenceLinkInput, rate_limit=CONNECT_RATE_LIMIT,
               responses={201: Success[CoexistenceLink]}, errors=(401, 403, 409, 422, 429, 503),
               tags=("accounts",),
               description="Send the user to `onboarding_url` (valid 1 hour). When they finish, they are "
                           "redirected to `redirect_url` with `success=true&account_id=…&attempt_id=…`, or "
                           "`success=false&error=<code>&attempt_id=…`; `account.connected` is emitted.")
    def on_post(self, req, resp) -> Reply:
        body: CoexistenceLinkInput = req.context.body
        with atomic():
            attempt = onboarding.create_attempt(req.context.tenant_id, body.redirect_url, body.label,
                                                body.external_reference)
        return ok({"onboarding_url": onboarding.onboarding_url(attempt), "attempt_id": attempt.public_id,
                   "expires_at": isoformat(attempt.expires_at)}, status=201)


class AccountsResource:
    @operation("List the company's numbers", scope="accounts:read", responses={200: Page[Account]},
               errors=(401, 403, 422, 429), query=PAGE_QUERY, tags=("accounts",))
    def on_get(self, req, resp) -> Reply:
        count, rows, args = accounts.account_list(req.context.tenant_id)
        return Reply(200, prepared_page(req, count, rows, args, accounts.listed_account,
                                        rows_args=(accounts.sent_since_now(),), driver_rows=True))


class AccountResource:
    @operation("Read one number", scope="accounts:read", responses={200: DataOnly[Account]},
               errors=(401, 403, 404, 429), tags=("accounts",))
    def on_get(self, req, resp, account_id: str) -> Reply:
        return Reply(200, {"data": accounts.read_account(req.context.tenant_id, account_id)})


class AccountTemplatesResource:
    @operation("List a number's approved templates", scope="templates:read", responses={200: Page[Template]},
               errors=(401, 403, 404, 422, 429), query=PAGE_QUERY, tags=("accounts",))
    def on_get(self, req, resp, account_id: str) -> Reply:
        total, rows, args = accounts.templates_of(req.context.tenant_id, account_id)
        return Reply(200, counted_page(req, total, rows, args, accounts.listed_template, driver_rows=True))

    @operation("Create a template and submit it for review", scope="templates:write", body=TemplateInput,
               responses={201: Success[ReviewedTemplate]}, errors=(401, 403, 404, 409, 422, 429, 503),
               tags=("accounts",), calls_out_first=True,
               description="The body is the platform's own `message_templates` shape. It is checked against the "
                           "platform's rules first; each broken rule is named in `error.details.errors` under its "
                           "field's path (`components.1.example.body_text`). The template is then submitted and "
                           "stored `pending`; the platform's review moves it to `approved` or `rejected` (with "
                           "`rejected_reason`), and every change emits `template.status_changed`. 409 "
                           "`template_exists` when the number has the name in that language; 422 "
                           "`template_refused` when the platform refuses it; 503 `platform_unavailable`.")
    def on_post(self, req, resp, account_id: str) -> Reply:
        account = accounts.get_account(req.context.tenant_id, account_id)
        body: TemplateInput = req.context.body
        template = template_authoring.create_template(account, body.model_dump(exclude_unset=True))
        return ok(template.with_review(), status=201)


class AccountTemplateResource:
    @operation("Delete a template, every language of it", scope="templates:write",
               responses={200: Success[DeletedTemplates]}, errors=(401, 403, 404, 409, 422, 429, 503),
               tags=("accounts",), calls_out_first=True,
               description="Deletes the template on the platform and marks it `deleted` here (never listed or "
                           "sent again); `template.status_changed` is emitted for each language. 404 "
                           "`template_not_found` when the number has no template of that name.")
    def on_delete(self, req, resp, account_id: str, name: str) -> Reply:
        account = accounts.get_account(req.context.tenant_id, account_id)
        deleted = template_authoring.delete_template(account, name)
        return ok({"name": name, "deleted": [template.with_review() for template in deleted]})


# The onboarding page and its form posts: reached by the user's browser, not by an API key.

def _wants_html(req: falcon.Request) -> bool:
    return "text/html" in (req.get_header("Accept") or "")


def _page_error(req: falcon.Request, resp: falcon.Response, error: DomainError | ApiError) -> None:
    status = error.status
    resp.status = falcon.code_to_http_status(status)
    resp.set_headers(PAGE_HEADERS)
    if _wants_html(req):
        resp.content_type = falcon.MEDIA_HTML
        resp.text = (f"<!doctype html><html lang=en><meta charset=utf-8><title>Connection link</title>"
                     f"<body style='font-family:system-ui;padding:40px'><h1>{status}</h1>"
                     f"<p>{html.escape(error.message)}</p></body></html>")
    else:
        resp.content_type = falcon.MEDIA_JSON
        resp.data = orjson.dumps(envelope(status, error.code, error.message, getattr(error, "details", None)))


def _redirect(resp: falcon.Response, outcome_or_attempt) -> None:
    attempt = getattr(outcome_or_attempt, "attempt", outcome_or_attempt)
    resp.status = falcon.HTTP_303
    resp.set_headers(PAGE_HEADERS)
    resp.location = attempt.redirect()


def _after(outcome: onboarding.Outcome) -> None:
    if outcome.connected is not None:
        from jobs.accounts import connected

        connected(outcome.connected.id)


def _script(attempt_id: str) -> tuple[str, str]:
    """The page's action area and script: the platform's embedded signup, or the simulator's."""
    settings = get_settings()
    if settings.simulator_mode:
        body = (f'<form method="post" action="{attempt_id}/simulate">'
                '<button id="connect" type="submit">Connect number (simulator)</button></form>')
        return body, ""
    config = orjson.dumps({"appId": settings.app_id, "configId": settings.signup_config_id,
                           "version": settings.graph_version}).decode().replace("<", "\\u003c")
    body = ('<button id="connect" type="button" disabled>Connect with Facebook</button>'
            f'<form id="complete-form" method="post" action="{attempt_id}/complete" hidden>'
            '<input name="code"><input name="waba_id"><input name="phone_number_id">'
            '<input name="error"><input name="detail"></form>')
    return body, SIGNUP_SCRIPT.replace("__CONFIG__", config)


# Embedded signup for coexistence: the code arrives in FB.login's callback, the business account
# and phone number ids in a `message` event (sessionInfoVersion 3), in either order.
SIGNUP_SCRIPT = """<script>
(function () {
  var config = __CONFIG__;
  var state = {code: null, waba_id: null, phone_number_id: null, sent: false};
  var button = document.getElementById('connect');
  function submit(fields) {
    if (state.sent) { return; }
    state.sent = true;
    var form = document.getElementById('complete-form');
    Object.keys(fields).forEach(function (name) {
      if (fields[name] !== null && fields[name] !== undefined) { form.elements[name].value = fields[name]; }
    });
    form.submit();
  }
  function result() { return {code: state.code, waba_id: state.waba_id, phone_number_id: state.phone_number_id}; }
  function maybeFinish() { if (state.code && state.waba_id && state.phone_number_id) { submit(result()); } }
  window.addEventListener('message', function (event) {
    if (!/^https:\\/\\/([a-z0-9-]+\\.)*facebook\\.com$/.test(event.origin)) { return; }
    var data;
    try { data = JSON.parse(event.data); } catch (e) { return; }
    if (!data || data.type !== 'WA_EMBEDDED_SIGNUP') { return; }
    var info = data.data || {};
    if (String(data.event).indexOf('FINISH') === 0) {
      state.waba_id = info.waba_id || null;
      state.phone_number_id = info.phone_number_id || null;
      maybeFinish();
    } else if (data.event === 'CANCEL') {
      submit({error: 'cancelled', detail: info.current_step || ''});
    } else if (data.event === 'ERROR') {
      submit({error: 'failed', detail: info.error_message || ''});
    }
  });
  window.fbAsyncInit = function () {
    FB.init({appId: config.appId, autoLogAppEvents: true, xfbml: true, version: config.version});
    button.disabled = false;
  };
  button.addEventListener('click', function () {
    FB.login(function (response) {
      if (response.authResponse && response.authResponse.code) {
        state.code = response.authResponse.code;
        maybeFinish();
        // The ids normally arrive first; without them the service reports signup_failed.
        setTimeout(function () { submit(result()); }, 15000);
      } else {
        submit({error: 'cancelled'});
      }
    }, {
      config_id: config.configId,
      response_type: 'code',
      override_default_response_type: true,
      extras: {setup: {}, featureType: 'whatsapp_business_app_onboarding', sessionInfoVersion: '3'}
    });
  });
})();
</script>
<script async defer crossorigin="anonymous" src="https://connect.facebook.net/en_US/sdk.js"></script>"""


class OnboardingPage:
    def on_get(self, req, resp, attempt_id: str) -> None:
        try:
            attempt = onboarding.current(attempt_id)
        except DomainError as error:
            _page_error(req, resp, error)
            return
        if attempt.status != "pending":
            # Ended (expired, used, cancelled): back to the company with the outcome.
            _redirect(resp, attempt)
            return
        body, script = _script(attempt.public_id)
        label = f" (<em>{html.escape(attempt.label)}</em>)" if attempt.label else ""
        resp.status = falcon.HTTP_200
        resp.content_type = falcon.MEDIA_HTML
        resp.set_headers(PAGE_HEADERS)
        resp.text = PAGE_TEMPLATE.substitute(
            company=html.escape(attempt.tenant.name), label_text=label, attempt_id=attempt.public_id,
            body=body, script=script, expires_at=isoformat(attempt.expires_at).replace("T", " ").rstrip("Z") + " UTC")


def _form(req: falcon.Request) -> dict[str, str]:
    if req.content_length is not None and req.content_length > MAX_FORM_BYTES:
        raise ApiError(413, "payload_too_large", f"the form is limited to {MAX_FORM_BYTES} bytes")
    raw = req.bounded_stream.read(MAX_FORM_BYTES + 1)
    if len(raw) > MAX_FORM_BYTES:
        raise ApiError(413, "payload_too_large", f"the form is limited to {MAX_FORM_BYTES} bytes")
    try:
        if (req.content_type or "").startswith(falcon.MEDIA_JSON):
            data = orjson.loads(raw or b"{}")
            if not isinstance(data, dict):
                raise ValueError("not an object")
            return {str(k): str(v) for k, v in data.items() if isinstance(v, str | int)}
        return dict(parse_qsl(raw.decode(), keep_blank_values=True))
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "bad_request", "the completion form could not be read") from None


class OnboardingComplete:
    def on_post(self, req, resp, attempt_id: str) -> None:
        try:
            fields = _form(req)
            error = fields.get("error", "").strip()
            detail = fields.get("detail", "").strip()[:1000] or None
            if error == "cancelled":
                outcome = onboarding.cancel(attempt_id, SIGNUP_CANCELLED, detail)
            elif error:
                outcome = onboarding.cancel(attempt_id, SIGNUP_FAILED, detail or error[:200])
            else:
                outcome = onboarding.complete(attempt_id, fields.get("code", "").strip(),
                                              fields.get("waba_id", "").strip(),
                                              fields.get("phone_number_id", "").strip())
        except (DomainError, ApiError) as failure:
            _page_error(req, resp, failure)
            return
        _after(outcome)
        _redirect(resp, outcome)


class OnboardingSimulate:
    """Simulator mode only: what the platform's popup does, done by the service for the user."""

    def on_post(self, req, resp, attempt_id: str) -> None:
        try:
            attempt = onboarding.current(attempt_id)
            if attempt.status != "pending":
                _redirect(resp, attempt)
                return
            try:
                signup = onboarding.simulator_signup()
            except DomainError:
                raise
            except Exception as failure:
                log.warning("simulated signup failed: %s", failure)
                outcome = onboarding.cancel(attempt_id, PLATFORM_UNAVAILABLE, str(failure)[:1000])
            else:
                outcome = onboarding.complete(attempt_id, str(signup.get("code") or ""),
                                              str(signup.get("waba_id") or ""),
                                              str(signup.get("phone_number_id") or ""))
        except DomainError as failure:
            _page_error(req, resp, failure)
            return
        _after(outcome)
        _redirect(resp, outcome)


ROUTES = [
    ("/accounts/coexistence-link", CoexistenceLinkResource()),
    ("/accounts", AccountsResource()),
    ("/accounts/{account_id}", AccountResource()),
    ("/accounts/{account_id}/templates", AccountTemplatesResource()),
    ("/accounts/{account_id}/templates/{name}", AccountTemplateResource()),
]
ROOT_ROUTES = [
    ("/onboarding/{attempt_id}", OnboardingPage()),
    ("/onboarding/{attempt_id}/complete", OnboardingComplete()),
    ("/onboarding/{attempt_id}/simulate", OnboardingSimulate()),
]
