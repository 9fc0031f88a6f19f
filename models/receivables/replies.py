"""What a debtor answers a reminder in WhatsApp.

- **Quick replies.** The reminder templates the service declares (payments.py) carry three
  quick-reply buttons, worded in the template's language (quick_replies.py). Each reminder gives
  each button a payload naming the action and the debt (`cartera:promise:F-1001`), so a press
  says which debt it is about without guessing. A press records:
  - `promise`: a promise to pay by today + PROMISE_DAYS (the company's day), through the one
    promise operation the debtor's page uses (promises.py; `debt.promise_made`);
  - `dispute`: a dispute with DISPUTE_REASON, through the one dispute operation (`debt.disputed`);
  - `paid`: a payment claimed, which asks the ERP to check its books: a `pago_informado` line in
    the ERP's feed (responses.py). Nothing is paid until the ERP or the gateway says so.
  The service answers inside the 24-hour window with one text message carrying the debtor's page
  link (a single message of the sending core, charged one credit as any single message is).
- **Free text.** A text from a phone that has open debts with the company is attached to each of
  them (`debt_reply`), and shown on the debt's page in the portal.

Both are applied with the inbound message (models/inbox/updates.py), whose wamid is recorded once:
a redelivered webhook records nothing twice.
"""

from __future__ import annotations

import datetime as dt
import logging

from config import get_settings
from config.i18n import language_of
from models.errors import DomainError
from models.numbers.tables import MessagingAccount
from models.receivables import debtor_links, promises
from models.receivables.debts import tenant_today
from models.receivables.quick_replies import ACTION_OF_TEXT, folded, parse_payload, press_payload
from models.receivables.responses import export_response
from models.receivables.tables import OPEN_DEBT, Debt, Debtor, DebtReply
from models.sending.messages import MessageInput, create_message
from models.sending.sendable import approved_template, template_buttons
from models.store.db import atomic
from models.tenancy.tables import Tenant

log = logging.getLogger("receivables.replies")

PROMISE_DAYS = 7
DISPUTE_REASON = "not recognised via WhatsApp"
# The answer to a press, per language and action: `{link}` is the debtor's page, `{date}` the promised day.
ANSWERS = {
    "es": {"paid": "Gracias. Pedimos a {company} que confirme tu pago. Tus deudas: {link}",
           "promise": "Anotamos tu compromiso de pago para el {date}. Tus deudas: {link}",
           "dispute": "Anotamos que no reconoces esta deuda; {company} la revisará. Tus deudas: {link}"},
    "pt_BR": {"paid": "Obrigado. Pedimos a {company} que confirme seu pagamento. Suas dívidas: {link}",
              "promise": "Anotamos seu compromisso de pagamento para {date}. Suas dívidas: {link}",
              "dispute": "Anotamos que você não reconhece esta dívida; {company} vai revisá-la. Suas dívidas: {link}"},
    "en": {"paid": "Thank you. We asked {company} to check your payment. Your debts: {link}",
           "promise": "We noted your promise to pay by {date}. Your debts: {link}",
           "dispute": "We noted that you don't recognise this debt; {company} will look into it. Your debts: {link}"},
}
DATE_FORMATS = {"es": "%d/%m/%Y", "pt_BR": "%d/%m/%Y", "en": "%Y-%m-%d"}


def reminder_buttons(account: MessagingAccount, template_name: str, language: str,
                     debt_external_ids: dict[int, str]) -> dict[int, list[dict]]:
    """The quick-reply payloads of a reminder about to go out, keyed by debt id: `[{"index": i,
    "type": "quick_reply", "payload": "cartera:paid:F-1001"}, ...]` for each of the template's
    quick-reply buttons whose words are one of QUICK_REPLIES'. {} for a template without them."""
    try:
        template = approved_template(account, template_name, language)
    except DomainError:
        return {}
    actions = [(index, ACTION_OF_TEXT.get(folded(str(button.get("text", "")))))
               for index, button in enumerate(template_buttons(template))
               if str(button.get("type", "")).upper() == "QUICK_REPLY"]
    actions = [(index, action) for index, action in actions if action is not None]
    if not actions:
        return {}
    return {debt_id: [{"index": index, "type": "quick_reply", "payload": press_payload(action, external_id)}
                      for index, action in actions]
            for debt_id, external_id in debt_external_ids.items()}


def apply_reply(account: MessagingAccount, sender: str, wamid: str, kind: str, body: str | None,
                payload: str | None, at: dt.datetime) -> int | None:
    """A debtor's inbound message, applied with it (in its transaction): a press is recorded and
    answered, free text attached to the sender's open debts. Returns the id of the answer queued
    (a single message the caller hands to the sending core once committed), or None."""
    if not sender.isdigit():  # a user who hides their phone is no debtor's phone
        return None
    if kind == "button":
        pressed = parse_payload(payload)
        return _press(account, sender, wamid, at, *pressed) if pressed else None
    if kind == "text" and body:
        _attach_text(account.tenant_id, sender, wamid, body, at)
    return None


def _debts_of_phone(tenant_id: int, phone: str):
    return (Debt.select().join(Debtor)
            .where((Debt.tenant == tenant_id) & (Debtor.tenant == tenant_id) & (Debtor.telefono == phone)
                   & Debt.status.in_(OPEN_DEBT)))


def _attach_text(tenant_id: int, phone: str, wamid: str, body: str, at: dt.datetime) -> None:
    rows = [{"tenant": tenant_id, "debt": debt.id, "wam_id": wamid[:255], "sender": phone, "kind": "text",
             "body": body, "received_at": at} for debt in _debts_of_phone(tenant_id, phone)]
    if rows:
        DebtReply.insert_many(rows).on_conflict_ignore().execute()


def _press(account: MessagingAccount, phone: str, wamid: str, at: dt.datetime, action: str,
           debt_external_id: str) -> int | None:
    # Only the sender's own open debt: a payload naming another's is ignored.
    debt = _debts_of_phone(account.tenant_id, phone).where(Debt.external_id == debt_external_id).first()
    if debt is None:
        log.info("a quick reply on %s names no open debt of its sender: ignored", account.public_id)
        return None
    inserted = (DebtReply.insert(tenant=account.tenant_id, debt=debt.id, wam_id=wamid[:255], sender=phone,
                                 kind="button", action=action, received_at=at)
                .on_conflict_ignore().as_rowcount().execute())
    if not inserted:
        return None  # recorded before
    reply_id = DebtReply.get((DebtReply.debt == debt.id) & (DebtReply.wam_id == wamid[:255])).id
    promised = None
    try:
        with atomic():
            if action == "promise":
                promised = tenant_today(debt.tenant_id) + dt.timedelta(days=PROMISE_DAYS)
                promises.promise(debt, promised, origin="whatsapp")
            elif action == "dispute":
                promises.dispute(debt, DISPUTE_REASON, origin="whatsapp")
            else:
                export_response(debt, "whatsapp", reply_id=reply_id)
    except DomainError as error:  # disputed already: the dispute stands, and the debtor still gets the page
        log.info("a quick reply on debt %s recorded nothing new: %s", debt.id, error.code)
    return _answer(account, phone, debt, action, promised)


def _answer(account: MessagingAccount, phone: str, debt: Debt, action: str, promised: dt.date | None) -> int | None:
    tenant = Tenant.get_by_id(account.tenant_id)
    language = language_of(tenant.locale or "") or "en"
    language = language if language in ANSWERS else "en"
    token = debtor_links.issue(account.tenant_id, debt.debtor_id)
    text = ANSWERS[language][action].format(
        company=tenant.name, link=f"{get_settings().public_url}{debtor_links.PAGE_PATH}/{token}",
        date=promised.strftime(DATE_FORMATS[language]) if promised else "")
    try:
        with atomic():
            message = create_message(account.tenant_id, MessageInput(
                account_id=account.public_id, to=phone, type="text", text={"body": text},
                external_reference=f"cobranza respuesta {debt.external_id}"[:160]))
    except DomainError as error:  # no credits, the number paused: what the debtor said is recorded anyway
        log.warning("the answer to a quick reply on %s was not sent (%s): %s", account.public_id, error.code,
                    error.message)
        return None
    return message.id


def replies_of(debt_id: int, limit: int = 100) -> list[DebtReply]:
    """What the debtor answered about a debt in WhatsApp, newest first."""
    return list(DebtReply.select().where(DebtReply.debt == debt_id)
                .order_by(DebtReply.received_at.desc(), DebtReply.id.desc()).limit(limit))
