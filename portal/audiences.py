"""A campaign without code: choose an approved template, upload a CSV or XLSX audience, map its
columns to the template's phone, variables and URL buttons, see the message as it will arrive,
the rows left out and why, and the cost; then send now or at a time of the company's day.

1. GET /campaigns/new: the template and the file; the POST reads the file as it streams in
   (models/sending/audiences.py) and keeps it as a draft (models/sending/audience_drafts.py).
2. GET /campaigns/new/{draft}: the mapping (a GET form: changing it changes only the page) and
   what it makes of the rows.
3. POST /campaigns/new/{draft}/send: the campaign, through the operation the API's
   POST /campaigns uses (its checks, its credit reservation), audited; the draft then keeps only
   the campaign's id, so the same form sent twice leads to the one campaign.
"""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

from config import formats as number_formats
from config.i18n import N_
from jobs.campaigns import enqueue_dispatch
from models.errors import Invalid
from models.numbers.tables import MessagingAccount, Template
from models.sending import audience_drafts, audiences, campaigns
from models.sending.campaign_inputs import DYNAMIC_SUFFIX, MAX_RECIPIENTS, MAX_SCHEDULE_AHEAD
from models.sending.sendable import LOW_QUALITY, template_buttons
from models.store.db import atomic
from models.tenancy import credits
from portal.web import BASE, Refused, audit, ctx, form, locale_of, page, read_upload, redirect, render, say

PREVIEW_ROWS = 3
BAD_ROWS_SHOWN = 100
SENDABLE_STATUSES = ("approved", "paused")  # a paused one is listed to be warned about, not sent
PHONE_NAMES = re.compile(r"phone|tel|fono|celular|movil|móvil|whatsapp|wa_id|número|numero", re.IGNORECASE)
REASONS = {
    audiences.BAD_PHONE: N_("not a phone number (8 to 15 digits with the country code)"),
    audiences.MISSING_VALUE: N_("no value in %(column)s"),
    audiences.TOO_LONG: N_("the value in %(column)s is too long"),
}
MAPPING_MISSING = Refused(422, N_("Check the form"), N_("Choose a column of the file for the phone, each variable "
                                                        "and each URL button."))


def _templates(tenant_id: int) -> list[Template]:
    found = (Template.select(Template, MessagingAccount).join(MessagingAccount)
             .where((MessagingAccount.tenant == tenant_id) & (MessagingAccount.status == "active") & Template.active
                    & Template.status.in_(SENDABLE_STATUSES))
             .order_by(MessagingAccount.id, Template.name, Template.language))
    return [template for template in found if template.account.ready]


def _template(tenant_id: int, template_id: int | str) -> Template:
    try:
        wanted = int(template_id)
    except (TypeError, ValueError):
        wanted = 0
    found = next((t for t in _templates(tenant_id) if t.id == wanted), None)
    if found is None:
        raise Refused(422, N_("Check the form"), N_("Choose an approved template of one of your numbers."))
    return found


class CampaignNew:
    @page()
    def on_get(self, req, resp):
        _show_start(req, resp)

    @page(write="campaigns", upload=audiences.MAX_UPLOAD_BYTES)
    def on_post(self, req, resp):
        context = ctx(req)
        upload = read_upload(req)
        template = _template(context.tenant_id, upload.form.get("template"))
        try:
            audience = audiences.read_audience(upload.stream, upload.filename)
        except Invalid as error:
            _show_start(req, resp, 422, _file_problem(req, error), template.id)
            return
        draft = audience_drafts.save(context.tenant_id, context.user.id, template.id, upload.filename, audience)
        redirect(resp, f"{BASE}/campaigns/new/{draft.id}")


def _file_problem(req, error: Invalid) -> str:
    message = {"audience_file_type": N_("Upload a CSV (.csv) or Excel (.xlsx) file."),
            "audience_too_large": N_("A file may have at most %(max)s rows besides its header: split it."),
            "audience_too_wide": N_("A file may have at most %(max_columns)s columns."),
            "audience_empty": N_("The file has no rows besides its header."),
               }.get(error.code, N_("The file could not be read: save it as CSV in UTF-8 or as .xlsx."))
    formats = locale_of(req).formats
    return say(req, message, max=number_formats.number(MAX_RECIPIENTS, formats), max_columns=audiences.MAX_COLUMNS)


def _show_start(req, resp, status: int = 200, problem: str | None = None, chosen: int | None = None) -> None:
    render(req, resp, "campaign_new.html", status=status, templates=_templates(ctx(req).tenant_id),
           problem=problem, chosen=chosen, max_rows=MAX_RECIPIENTS, max_columns=audiences.MAX_COLUMNS,
           max_mib=audiences.MAX_UPLOAD_BYTES // (1024 * 1024))


def _column(value: str | None, count: int) -> int | None:
    if value is None or not value.isdigit() or int(value) >= count:
        return None
    return int(value)


def _guess(columns: list[str], variable_count: int, url_buttons: list[int]) -> dict[str, int]:
    """A first mapping: the column named like a phone, then the others in order."""
    phone = next((i for i, name in enumerate(columns) if PHONE_NAMES.search(name)), 0)
    others = iter([i for i in range(len(columns)) if i != phone])
    guess = {"phone": phone}
    for n in range(1, variable_count + 1):
        guess[f"var_{n}"] = next(others, phone)
    for index in url_buttons:
        guess[f"button_{index}"] = next(others, phone)
    return guess


def _mapping(get, columns: list[str], template: Template, strict: bool) -> tuple[audiences.Mapping, dict]:
    """The mapping a form names (`phone`, `var_1`..., `button_<index>`), and the same as the
    form's values; missing or unknown columns take the guess, or refuse the form when `strict`."""
    variable_count, url_buttons = audiences.needed(template)
    guess = _guess(columns, variable_count, url_buttons)
    chosen: dict[str, int] = {}
    for name, default in guess.items():
        column = _column(get(name), len(columns))
        if column is None:
            if strict:
                raise MAPPING_MISSING
            column = default
        chosen[name] = column
    mapping = audiences.Mapping(chosen["phone"], [chosen[f"var_{n}"] for n in range(1, variable_count + 1)],
                                {index: chosen[f"button_{index}"] for index in url_buttons})
    return mapping, chosen


def _bubble(template: Template, recipient: dict) -> dict:
    """The message as the phone shows it: header, body with the row's values, footer, buttons."""
    header = footer = None
    for component in template.components or []:
        kind = str(component.get("type", "")).upper()
        if kind == "HEADER" and str(component.get("format", "TEXT")).upper() == "TEXT":
            header = component.get("text")
        elif kind == "FOOTER":
            footer = component.get("text")
    suffixes = {button["index"]: button["text"] for button in recipient.get("buttons", [])}
    buttons = []
    for index, button in enumerate(template_buttons(template)):
        url = str(button.get("url", ""))
        if index in suffixes:
            url = url[:-len(DYNAMIC_SUFFIX)] + suffixes[index]
        buttons.append({"type": str(button.get("type", "")).upper(), "text": button.get("text", ""), "url": url})
    return {"wa_id": recipient["wa_id"], "header": header, "footer": footer, "buttons": buttons,
            "body": audiences.fill(template.body_text, recipient["vars"])}


def _warning(template: Template) -> str | None:
    if template.status == "paused":
        return N_("This template is paused by the platform for its quality: a campaign with it is refused "
                  "until the platform unpauses it.")
    if (template.quality_score or "").upper() == LOW_QUALITY:
        return N_("This template is rated RED for its quality: a campaign with it is refused until the "
                  "rating recovers.")
    return None


def _open_draft(req, resp, draft_id: str) -> audience_drafts.Draft | None:
    """The user's draft, or None once its campaign exists: the form sent again (a double click, the
    back button) is taken to that campaign instead."""
    context = ctx(req)
    draft = audience_drafts.load(context.tenant_id, context.user.id, draft_id)
    if draft.campaign_id:
        redirect(resp, f"{BASE}/campaigns/{draft.campaign_id}")
        return None
    return draft


class CampaignDraft:
    @page()
    def on_get(self, req, resp, draft_id: str):
        context = ctx(req)
        draft = _open_draft(req, resp, draft_id)
        if draft is None:
            return
        template = _template(context.tenant_id, draft.template_id)
        mapping, chosen = _mapping(req.get_param, draft.audience.columns, template, strict=False)
        _show_draft(req, resp, draft, template, mapping, chosen)


def _show_draft(req, resp, draft, template, mapping, chosen, status: int = 200, problem: str | None = None,
                when: dict | None = None) -> None:
    context = ctx(req)
    checked = audiences.check(draft.audience, mapping, template)
    variable_count, url_buttons = audiences.needed(template)
    bad = [{"line": row.line, "phone": row.phone,
            "reason": say(req, REASONS[row.reason], column=row.column or "")} for row in checked.bad[:BAD_ROWS_SHOWN]]
    wallet = credits.wallet_of(context.tenant_id)
    tenant = context.user.tenant
    render(req, resp, "campaign_draft.html", status=status, draft=draft, chosen_template=template,
           columns=draft.audience.columns, chosen=chosen, variable_count=variable_count, url_buttons=url_buttons,
           buttons=template_buttons(template), rows=len(draft.audience.rows), checked=checked, bad=bad,
           previews=[_bubble(template, r) for r in checked.recipients[:PREVIEW_ROWS]],
           cost=len(checked.recipients), available=wallet.balance - wallet.reserved,
           warning=say(req, _warning(template)) if _warning(template) else None,
           problem=say(req, problem) if problem else None, when=when or {"when": "now", "send_at": ""},
           timezone=tenant.timezone)


class CampaignDraftSend:
    @page(write="campaigns")
    def on_post(self, req, resp, draft_id: str):
        context = ctx(req)
        draft = _open_draft(req, resp, draft_id)
        if draft is None:
            return
        fields = form(req)
        template = _template(context.tenant_id, draft.template_id)
        mapping, chosen = _mapping(fields.get, draft.audience.columns, template, strict=True)
        when = {"when": fields.get("when") or "now", "send_at": fields.get("send_at")}
        try:
            send_at = _send_at(when, context.user.tenant.timezone)
        except ValueError as problem:
            _show_draft(req, resp, draft, template, mapping, chosen, 422, str(problem), when)
            return
        checked = audiences.check(draft.audience, mapping, template)
        if not checked.recipients:
            _show_draft(req, resp, draft, template, mapping, chosen, 422,
                        N_("No row of the file can be sent: correct the file or the columns."), when)
            return
        spec = {"account_id": template.account.public_id, "template_name": template.name,
                "language": template.language, "recipients": checked.recipients,
                "external_reference": (fields.get("name") or draft.filename)[:160],
                "send_at": send_at.isoformat() if send_at else None}
        with audience_drafts.claimed(draft) as mine:
            if not mine:
                raise Refused(409, N_("Not possible now"), N_("This campaign is being created already: open the "
                                                              "campaigns list in a moment."))
            with atomic():
                campaign = campaigns.create_campaign(context.tenant_id, spec, source="portal")
                audit(req, "campaign.created", campaign.public_id, {
                    "template": template.name, "language": template.language, "file": draft.filename,
                    "recipients": len(checked.recipients), "left_out": len(checked.bad),
                    "duplicates": checked.duplicates, "send_at": spec["send_at"]})
            audience_drafts.mark_sent(draft, campaign.public_id)
        enqueue_dispatch(campaign.id, campaign.send_at)
        redirect(resp, f"{BASE}/campaigns/{campaign.public_id}",
                 "campaign_scheduled" if send_at else "campaign_created")


def _send_at(when: dict, timezone: str) -> dt.datetime | None:
    """The form's local time (`YYYY-MM-DDTHH:MM`, the company's time zone) as an aware UTC time."""
    if when["when"] != "later":
        return None
    try:
        local = dt.datetime.fromisoformat(when["send_at"])
    except ValueError:
        raise ValueError(N_("Enter the date and time to send at.")) from None
    if local.tzinfo is not None:
        raise ValueError(N_("Enter the date and time to send at."))
    at = local.replace(tzinfo=ZoneInfo(timezone)).astimezone(dt.UTC)
    now = dt.datetime.now(dt.UTC)
    if at < now:
        raise ValueError(N_("Choose a time in the future."))
    if at > now + MAX_SCHEDULE_AHEAD:
        raise ValueError(N_("Choose a time at most 30 days ahead."))
    return at


ROUTES = [
    ("/campaigns/new", CampaignNew()),
    ("/campaigns/new/{draft_id}", CampaignDraft()),
    ("/campaigns/new/{draft_id}/send", CampaignDraftSend()),
]
