"""Numbers: status, quality and limits; connecting a new one (the onboarding flow); templates,
with the platform's review of each (status, a rejection's reason, quality, a pause), and a form
that writes one through the same operation as the API."""

from __future__ import annotations

from config import get_settings
from config.i18n import N_
from models.errors import Invalid
from models.numbers import accounts, onboarding, template_authoring
from models.numbers.tables import Template
from models.numbers.template_rules import CATEGORIES
from models.store.db import atomic
from portal.web import BASE, Form, audit, ctx, form, locale_of, page, redirect, render

BUTTON_ROWS = 3
BUTTON_TYPES = ("QUICK_REPLY", "URL", "PHONE_NUMBER")
# Where a rule's field path points on the form: the component's kind, or the top-level field.
FORM_FIELDS = {
    "name": N_("Name"), "language": N_("Language"), "category": N_("Category"), "components": N_("Body"),
    "HEADER": N_("Header"), "BODY": N_("Body"), "FOOTER": N_("Footer"), "BUTTONS": N_("Buttons"),
}
# The form's own fields, kept to fill it again after a refusal.
TEMPLATE_FORM_FIELDS = ("name", "language", "category", "header", "header_example", "body", "body_examples",
                        "footer", *(f"button_{part}_{row}" for row in range(BUTTON_ROWS)
                                    for part in ("type", "text", "value", "example")))


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


def _show_number(req, resp, account, status: int = 200, draft: dict | None = None,
                 problems: list[str] | None = None) -> None:
    templates = list(Template.select().where(Template.account == account.id)
                     .order_by(Template.name, Template.language))
    render(req, resp, "number.html", status=status, number=account, templates=templates,
           sent_today=accounts.messages_sent_today(account.id),
           draft={**dict.fromkeys(TEMPLATE_FORM_FIELDS, ""), **(draft or {"language": "es"})},
           problems=problems or [], categories=CATEGORIES, button_types=BUTTON_TYPES, button_rows=BUTTON_ROWS,
           variables=("{{1}}", "{{2}}"))


class Number:
    @page()
    def on_get(self, req, resp, account_id: str):
        _show_number(req, resp, accounts.get_account(ctx(req).tenant_id, account_id))


class NumberTemplates:
    @page(write="numbers")
    def on_post(self, req, resp, account_id: str):
        account = accounts.get_account(ctx(req).tenant_id, account_id)
        fields = form(req)
        template, kinds = template_from_form(fields)
        try:
            created = template_authoring.create_template(account, template)
        except Invalid as error:
            draft = {name: fields.get(name) for name in TEMPLATE_FORM_FIELDS}
            _show_number(req, resp, account, 422, draft, _problems(req, error, kinds))
            return
        with atomic():
            audit(req, "template.created", account.public_id, {"name": created.name, "language": created.language,
                                                               "category": created.category})
        redirect(resp, f"{BASE}/numbers/{account.public_id}", "template_submitted")


class NumberTemplateDelete:
    @page(write="numbers")
    def on_post(self, req, resp, account_id: str, name: str):
        account = accounts.get_account(ctx(req).tenant_id, account_id)
        template_authoring.delete_template(account, name)
        with atomic():
            audit(req, "template.deleted", account.public_id, {"name": name})
        redirect(resp, f"{BASE}/numbers/{account.public_id}", "template_deleted")


def template_from_form(fields: Form) -> tuple[dict, list[str]]:
    """The form as the platform's `message_templates` shape, and the kind of each component (to
    say which part of the form a rule's path points at)."""
    components: list[dict] = []
    header = fields.get("header")
    if header:
        component: dict = {"type": "HEADER", "format": "TEXT", "text": header}
        if fields.get("header_example"):
            component["example"] = {"header_text": [fields.get("header_example")]}
        components.append(component)
    body: dict = {"type": "BODY", "text": fields.get("body")}
    examples = [line.strip() for line in fields.raw("body_examples").splitlines() if line.strip()]
    if examples:
        body["example"] = {"body_text": [examples]}
    components.append(body)
    if fields.get("footer"):
        components.append({"type": "FOOTER", "text": fields.get("footer")})
    buttons = [button for row in range(BUTTON_ROWS) if (button := _button(fields, row))]
    if buttons:
        components.append({"type": "BUTTONS", "buttons": buttons})
    template = {"name": fields.get("name"), "language": fields.get("language"), "category": fields.get("category"),
                "components": components}
    return template, [component["type"] for component in components]


def _button(fields: Form, row: int) -> dict | None:
    kind = fields.get(f"button_type_{row}")
    if not kind:
        return None
    button = {"type": kind, "text": fields.get(f"button_text_{row}")}
    value = fields.get(f"button_value_{row}")
    if kind == "URL":
        button["url"] = value
        if fields.get(f"button_example_{row}"):
            button["example"] = [fields.get(f"button_example_{row}")]
    elif kind == "PHONE_NUMBER":
        button["phone_number"] = value
    return button


def _problems(req, error: Invalid, kinds: list[str]) -> list[str]:
    """Each broken rule as `part of the form: the rule` (the rule in the domain's English)."""
    page_locale = locale_of(req)
    problems = []
    for path, messages in (error.details.get("errors") or {}).items():
        parts = path.split(".")
        where = parts[0]
        if where == "components" and len(parts) > 1 and parts[1].isdigit() and int(parts[1]) < len(kinds):
            where = kinds[int(parts[1])]
        field = page_locale.gettext(FORM_FIELDS.get(where, N_("Template")))
        problems += [page_locale.gettext(N_("%(field)s: %(problem)s"), field=field, problem=message)
                     for message in messages]
    return problems


ROUTES = [
    ("/numbers", Numbers()),
    ("/numbers/connect", Connect()),
    ("/numbers/{account_id}", Number()),
    ("/numbers/{account_id}/templates", NumberTemplates()),
    ("/numbers/{account_id}/templates/{name}/delete", NumberTemplateDelete()),
]
