"""Payments through the gateway: credentials, links, notifications, reversals, reconciliation.

The flow (docs/payments.md):
1. a payment link (`plk_`) is made for an amount on a debt, from the API or from the debtor's
   page (debtor_links.py; a collection reminder's `payment_reminder_link` URL button,
   `/pay/{{1}}`, carries the debtor's page token as its suffix); its public URL `/pay/{plk_}`
   sends the payer to the gateway's checkout (links that earlier reminders carried get theirs
   on first use);
2. the gateway's signed notification names a transaction; it is stored once per request id and
   the transaction's state is fetched from the gateway, never taken from the notification;
3. `apply_transaction` records it once: the payment through `debts.record_service_payment`
   (keyed by the gateway's transaction id, emitting `debt.payment_received`; a link for several
   debts records a share on each, keyed by the id and the share's position), and any amount the
   gateway has since given back (refund) or lost (chargeback) as a reversal that restores the
   balance. Reconciliation feeds the gateway's own list through the same function;
4. every payment and reversal originated in the service gets the next number of its tenant's
   export sequence in the transaction that records it (export.py).

Lock order: the debt's row (debts' `_lock_debt`) first, then the tenant's export sequence.
Gateway credentials are stored encrypted (models/store/secrets.py), like platform tokens.
"""

from __future__ import annotations

import datetime as dt
import logging
from decimal import Decimal

from peewee import fn

from config import get_settings
from gateway import CHARGED_BACK, FAILED, PENDING, GatewayError, Notification, Transaction
from gateway.mercadopago import MercadoPago
from models.clock import isoformat, to_utc_naive, utcnow
from models.errors import Conflict, DomainError, Invalid, NotFound
from models.ids import new_id
from models.numbers.tables import MessagingAccount
from models.receivables.debts import get_debt, installments_of, record_service_payment, restate, tenant_today
from models.receivables.export import export_reversal
from models.receivables.money import MoneyError, amount_json, from_minor, to_minor
from models.receivables.quick_replies import quick_reply_buttons
from models.receivables.tables import (
    OPEN_INSTALLMENT,
    PROVIDER,
    RESOLVED_DEBT,
    Allocation,
    Debt,
    GatewayNotification,
    Installment,
    Payment,
    PaymentGateway,
    PaymentLink,
    PaymentLinkPart,
    PaymentReversal,
)
from models.sending.campaign_inputs import ButtonInput
from models.sending.sendable import approved_template, button_mismatch, template_buttons
from models.store import secrets
from models.store.db import atomic
from models.tenancy.tables import Tenant

log = logging.getLogger("payments")

# payment_reminder's words, and a URL button to `{public URL}/pay/{{1}}`: the link's id is the suffix.
LINK_TEMPLATE = "payment_reminder_link"
LINK_TEMPLATE_LANGUAGE = "es"
LINK_TEMPLATE_BODY = "Hola {{1}}, tu saldo pendiente es {{2}}."
LINK_TEMPLATE_VARIABLES = 2
LINK_BUTTON_TEXT = "Pay now"
# The template in the other languages a company may declare it in (the same variables and button).
LINK_TEMPLATE_BODIES = {"es": LINK_TEMPLATE_BODY, "pt_BR": "Olá {{1}}, seu saldo pendente é {{2}}.",
                        "en": "Hello {{1}}, your outstanding balance is {{2}}."}
LINK_BUTTON_TEXTS = {"es": LINK_BUTTON_TEXT, "pt_BR": "Pagar agora", "en": LINK_BUTTON_TEXT}
LINK_TEMPLATE_LANGUAGES = tuple(LINK_TEMPLATE_BODIES)
WEBHOOK_PATH = "/payments/webhook"
PAY_PATH = "/pay"


# -- credentials ------------------------------------------------------------------------------

def connect_gateway(tenant_id: int, access_token: str, webhook_secret: str) -> PaymentGateway:
    """Store (or replace) the company's gateway credentials, encrypted."""
    access_token, webhook_secret = access_token.strip(), webhook_secret.strip()
    if not access_token or not webhook_secret:
        raise Invalid("the access token and the webhook secret are both required")
    with atomic():
        now = utcnow()
        (PaymentGateway.insert(tenant=tenant_id, provider=PROVIDER,
                               access_token_ciphertext=secrets.encrypt(access_token),
                               webhook_secret_ciphertext=secrets.encrypt(webhook_secret), created_at=now,
                               updated_at=now)
         .on_conflict(conflict_target=[PaymentGateway.tenant],
                      preserve=[PaymentGateway.access_token_ciphertext, PaymentGateway.webhook_secret_ciphertext,
                                PaymentGateway.updated_at])
         .execute())
    return PaymentGateway.get(PaymentGateway.tenant == tenant_id)


def _account(tenant_id: int) -> PaymentGateway:
    account = PaymentGateway.get_or_none(PaymentGateway.tenant == tenant_id)
    if account is None:
        raise Conflict("no payment gateway is connected for this company", code="payment_gateway_not_configured")
    return account


def client_for(tenant_id: int) -> MercadoPago:
    account = _account(tenant_id)
    return MercadoPago(secrets.decrypt(account.access_token_ciphertext), get_settings().payments_gateway_url)


def webhook_secret_of(tenant_id: int) -> str | None:
    account = PaymentGateway.get_or_none(PaymentGateway.tenant == tenant_id)
    return secrets.decrypt(account.webhook_secret_ciphertext) if account else None


def _unavailable(error: GatewayError) -> DomainError:
    return DomainError(error.message, code="payment_gateway_unavailable", status=502)


# -- links ------------------------------------------------------------------------------------

def _public_url() -> str:
    return get_settings().public_url


def notification_url(tenant_public_id: str) -> str:
    return f"{_public_url()}{WEBHOOK_PATH}/{tenant_public_id}"


def _expired(link: PaymentLink, now: dt.datetime | None = None) -> bool:
    return link.expires_at <= (now or utcnow())


def link_dict(link: PaymentLink, installment_external_id: str | None = None) -> dict:
    status = "expired" if link.status == "active" and _expired(link) else link.status
    return {"id": link.public_id, "url": f"{_public_url()}{PAY_PATH}/{link.public_id}",
            "checkout_url": link.checkout_url, "monto": amount_json(link.amount, link.currency),
            "moneda": link.currency, "cuota_external_id": installment_external_id, "origin": link.origin,
            "status": status, "expires_at": isoformat(link.expires_at), "paid_at": isoformat(link.paid_at),
            "created_at": isoformat(link.created_at)}


def _check_payable(debt: Debt) -> None:
    if debt.status in RESOLVED_DEBT or debt.saldo_pendiente <= 0:
        raise Conflict(f"debt {debt.external_id} is {debt.status} and takes no payments", code="debt_not_payable",
                       details={"status": debt.status})


def _link_amount(debt: Debt, installment: Installment | None, requested: Decimal | None) -> int:
    """The amount asked: as given (at most the balance), else what the installment still owes,
    else the next open installment's remainder, else the whole balance."""
    if requested is not None:
        try:
            amount = to_minor(requested, debt.moneda)
        except MoneyError as error:
            raise Invalid(str(error), details={"errors": {"monto": [str(error)]}}) from None
        if amount <= 0 or amount > debt.saldo_pendiente:
            message = "must be greater than 0 and at most the open balance"
            raise Invalid(f"monto {message}", details={"errors": {"monto": [message]}})
        return amount
    if installment is None:
        schedule = [item for item in installments_of(debt) if item.status in OPEN_INSTALLMENT]
        installment = min(schedule, key=lambda item: (item.vence, item.numero), default=None)
    if installment is not None:
        return min(installment.monto - installment.amount_paid, debt.saldo_pendiente)
    return debt.saldo_pendiente


def create_link(tenant_id: int, debt_external_id: str, *, amount: Decimal | None = None,
                installment_external_id: str | None = None, origin: str = "api",
                back_url: str | None = None) -> dict:
    """A payment link for a debt (POST .../payment-link, or the debtor's page with `origin`
    "page"): the gateway's checkout is created now, and returns the payer to `back_url`."""
    debt = get_debt(tenant_id, debt_external_id)
    _check_payable(debt)
    installment = None
    if installment_external_id is not None:
        installment = Installment.get_or_none((Installment.debt == debt.id)
                                              & (Installment.external_id == installment_external_id))
        if installment is None:
            raise NotFound(f"no installment {installment_external_id}", code="installment_not_found",
                           details={"cuota_external_id": installment_external_id})
        if installment.status not in OPEN_INSTALLMENT:
            raise Conflict(f"installment {installment_external_id} is {installment.status}", code="debt_not_payable",
                           details={"cuota_estado": installment.status})
    minor = _link_amount(debt, installment, amount)
    client = client_for(tenant_id)
    tenant_public_id = Tenant.select(Tenant.public_id).where(Tenant.id == tenant_id).scalar()
    public_id = new_id("plk_")
    expires_at = utcnow() + dt.timedelta(hours=get_settings().payments_link_ttl_hours)
    # The gateway is called outside any transaction; a link whose checkout was made but whose row
    # failed to save is an orphan preference nobody is sent to.
    try:
        checkout = client.create_link(reference=public_id, title=_title(debt), amount=from_minor(minor, debt.moneda),
                                      currency=debt.moneda, notification_url=notification_url(tenant_public_id),
                                      expires_at=expires_at.replace(tzinfo=dt.UTC), back_url=back_url)
    except GatewayError as error:
        raise _unavailable(error) from None
    with atomic():
        link = PaymentLink.create(public_id=public_id, tenant=tenant_id, debt=debt.id,
                                  installment=installment.id if installment else None, amount=minor,
                                  currency=debt.moneda, origin=origin, checkout_id=checkout.id,
                                  checkout_url=checkout.url, expires_at=expires_at)
    return link_dict(link, installment_external_id)


def create_debts_link(tenant_id: int, debts: list[Debt], *, back_url: str | None = None) -> dict:
    """One payment link for the whole balance of several open debts of one currency (everything a
    debtor owes, from their page, origin "page"): the link names the first debt, and its parts say
    what goes to each. A payment is recorded on each debt in turn (`apply_transaction`)."""
    if len({debt.moneda for debt in debts}) != 1 or len(debts) < 2:
        raise Invalid("a link for several debts takes two or more debts in one currency")
    for debt in debts:
        _check_payable(debt)
    currency, total = debts[0].moneda, sum(debt.saldo_pendiente for debt in debts)
    tenant_public_id = Tenant.select(Tenant.public_id).where(Tenant.id == tenant_id).scalar()
    public_id = new_id("plk_")
    expires_at = utcnow() + dt.timedelta(hours=get_settings().payments_link_ttl_hours)
    title = ", ".join(debt.referencia or debt.external_id for debt in debts)[:250]
    try:
        checkout = client_for(tenant_id).create_link(
            reference=public_id, title=title, amount=from_minor(total, currency), currency=currency,
            notification_url=notification_url(tenant_public_id), expires_at=expires_at.replace(tzinfo=dt.UTC),
            back_url=back_url)
    except GatewayError as error:
        raise _unavailable(error) from None
    with atomic():
        link = PaymentLink.create(public_id=public_id, tenant=tenant_id, debt=debts[0].id, amount=total,
                                  currency=currency, origin="page", checkout_id=checkout.id,
                                  checkout_url=checkout.url, expires_at=expires_at)
        PaymentLinkPart.insert_many([{"link": link.id, "debt": debt.id, "position": position,
                                      "amount": debt.saldo_pendiente}
                                     for position, debt in enumerate(debts, start=1)]).execute()
    return link_dict(link)


def _title(debt: Debt) -> str:
    return (debt.referencia or f"Deuda {debt.external_id}")[:250]


def link_button_url(public_url: str | None = None) -> str:
    """The URL of the reminder template's button: the service's payment page, the link's id the suffix."""
    return f"{public_url or _public_url()}{PAY_PATH}/{{{{1}}}}"


def link_template_definition(public_url: str | None = None, language: str = LINK_TEMPLATE_LANGUAGE) -> dict:
    """`payment_reminder_link` as the business declares it on the platform (WhatsApp Manager; on
    the simulator `POST /_sim/templates`), in `language` (es, pt_BR or en): payment_reminder's
    words, a "Pay now" URL button, then the three quick replies a debtor answers with
    (replies.py; the platform wants quick replies grouped apart from the URL button, and at most
    10 buttons)."""
    base = public_url or _public_url()
    return {"name": LINK_TEMPLATE, "language": language, "category": "UTILITY",
            "body": LINK_TEMPLATE_BODIES.get(language, LINK_TEMPLATE_BODY),
            "buttons": [{"type": "URL", "text": LINK_BUTTON_TEXTS.get(language, LINK_BUTTON_TEXT),
                         "url": link_button_url(base), "example": [f"{base}{PAY_PATH}/plk_0000example"]},
                        *quick_reply_buttons(language)]}


def link_button_index(account: MessagingAccount, suffix: str) -> int | None:
    """The index of the number's `payment_reminder_link` button that opens this service's payment
    page, when the template is approved and a reminder can fill it with `suffix`: its body takes
    payment_reminder's variables, and that button is all it needs. None otherwise (an older
    template with the link in its body, or a button pointing elsewhere), and the reminder goes
    out without a link rather than with one that would not open."""
    account_public_id = account.public_id
    try:
        template = approved_template(account, LINK_TEMPLATE, LINK_TEMPLATE_LANGUAGE)
    except DomainError:
        return None
    if (template.variable_count or 0) != LINK_TEMPLATE_VARIABLES:
        log.warning("%s on %s takes %s variables, not %s: reminders go without a link", LINK_TEMPLATE,
                    account_public_id, template.variable_count, LINK_TEMPLATE_VARIABLES)
        return None
    buttons = template_buttons(template)
    wanted = link_button_url()
    for index, button in enumerate(buttons):
        if str(button.get("type", "")).upper() == "URL" and button.get("url") == wanted \
                and button_mismatch(buttons, [ButtonInput(index=index, type="url", text=suffix)]) is None:
            return index
    log.warning("%s on %s has no URL button to %s that a reminder can fill: reminders go without a link",
                LINK_TEMPLATE, account_public_id, wanted)
    return None


class LinkUnavailable(Exception):
    """A link that cannot be paid now; `reason` is not_found, expired, paid or settled."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def checkout_for(public_id: str) -> str:
    """Where `/pay/{plk_}` sends the payer: the gateway's checkout, made on first use."""
    link = PaymentLink.get_or_none(PaymentLink.public_id == public_id)
    if link is None:
        raise LinkUnavailable("not_found")
    debt = Debt.get_by_id(link.debt_id)
    if link.status == "paid":
        raise LinkUnavailable("paid")
    if debt.status in RESOLVED_DEBT or debt.saldo_pendiente <= 0:
        raise LinkUnavailable("settled")
    if _expired(link):
        raise LinkUnavailable("expired")
    if link.checkout_url:
        return link.checkout_url
    tenant_public_id = Tenant.select(Tenant.public_id).where(Tenant.id == link.tenant_id).scalar()
    checkout = client_for(link.tenant_id).create_link(
        reference=link.public_id, title=_title(debt), amount=from_minor(link.amount, link.currency),
        currency=link.currency, notification_url=notification_url(tenant_public_id),
        expires_at=link.expires_at.replace(tzinfo=dt.UTC))
    # Two first openings at once: the first checkout saved is the one everybody gets.
    (PaymentLink.update(checkout_id=checkout.id, checkout_url=checkout.url)
     .where((PaymentLink.id == link.id) & PaymentLink.checkout_id.is_null()).execute())
    return PaymentLink.select(PaymentLink.checkout_url).where(PaymentLink.id == link.id).scalar()


# -- notifications ----------------------------------------------------------------------------

def store_notification(tenant_id: int, notification: Notification) -> GatewayNotification | None:
    """Keep a verified notification; None when this request id was already received."""
    request_id = notification.request_id[:255]
    claimed = notification.claimed_amount
    with atomic():
        inserted = (GatewayNotification.insert(
            tenant=tenant_id, request_id=request_id, topic=notification.topic[:64],
            action=(notification.action or "")[:64] or None, resource_id=(notification.resource_id or "")[:255] or None,
            claimed_amount=str(claimed)[:64] if claimed is not None else None,
            claimed_currency=(notification.claimed_currency or "")[:3] or None, received_at=utcnow())
            .on_conflict_ignore().as_rowcount().execute())
    if not inserted:
        return None
    return GatewayNotification.get((GatewayNotification.tenant == tenant_id)
                                   & (GatewayNotification.request_id == request_id))


def process_notification(notification_id: int) -> str:
    """Fetch the notified transaction from the gateway and apply it; returns the status stored.

    A gateway that cannot be reached raises (the task retries it); anything else is final.
    """
    note = GatewayNotification.get_or_none(GatewayNotification.id == notification_id)
    if note is None or note.status != "received":
        return note.status if note else "missing"
    GatewayNotification.update(attempts=GatewayNotification.attempts + 1).where(
        GatewayNotification.id == note.id).execute()
    if note.topic != "payment" or not note.resource_id:
        return _finish(note, "ignored", f"topic {note.topic or '(none)'} is not a payment")
    try:
        transaction = client_for(note.tenant_id).get_transaction(note.resource_id)
    except GatewayError as error:
        if error.retryable:
            raise
        return _finish(note, "failed", error.message)
    except Conflict as error:  # the company disconnected its gateway since
        return _finish(note, "failed", error.message)
    mismatch = _claims_mismatch(note, transaction)
    if mismatch:
        return _finish(note, "refused", mismatch)
    status, outcome = apply_transaction(note.tenant_id, transaction)
    return _finish(note, status, outcome)


def _claims_mismatch(note: GatewayNotification, transaction: Transaction) -> str | None:
    """A notification whose body states an amount or currency other than the gateway's record is
    refused whole: it was altered or is not about this transaction. (The transaction itself is
    still recorded from the gateway's record by the next genuine notification or reconciliation.)"""
    if note.claimed_currency is not None and note.claimed_currency != transaction.currency:
        return (f"the notification says {note.claimed_currency}, the gateway records transaction "
                f"{transaction.id} in {transaction.currency}")
    if note.claimed_amount is not None and Decimal(note.claimed_amount) != transaction.amount:
        return (f"the notification says {note.claimed_amount}, the gateway records transaction "
                f"{transaction.id} for {transaction.amount}")
    return None


def unprocessed_notifications(older_than: dt.timedelta = dt.timedelta(minutes=5), limit: int = 500) -> list[int]:
    """Notifications still `received` a while after they arrived: their task was lost (the queue
    was down) or gave up (the gateway was)."""
    return [row for (row,) in GatewayNotification.select(GatewayNotification.id)
            .where((GatewayNotification.status == "received")
                   & (GatewayNotification.received_at < utcnow() - older_than))
            .order_by(GatewayNotification.id).limit(limit).tuples()]


def _finish(note: GatewayNotification, status: str, outcome: str) -> str:
    if status == "refused":
        log.warning("gateway notification %s refused: %s", note.request_id, outcome)
    (GatewayNotification.update(status=status, outcome=outcome[:500], processed_at=utcnow())
     .where(GatewayNotification.id == note.id).execute())
    return status


# -- applying a transaction -------------------------------------------------------------------

def apply_transaction(tenant_id: int, transaction: Transaction) -> tuple[str, str]:
    """Bring the service in line with the gateway's record of one transaction, once.

    Returns (status, what happened): `recorded` when a payment or reversal was written,
    `unchanged` when both were already there, `ignored` (not ours, not paid), `refused` (the
    currency is not the debt's, the debt takes no payments).
    """
    reference = transaction.reference or ""
    link = PaymentLink.get_or_none((PaymentLink.tenant == tenant_id) & (PaymentLink.public_id == reference)) \
        if reference.startswith("plk_") else None
    if link is None:
        return "ignored", f"transaction {transaction.id} is not for a payment link of this company"
    if transaction.state in (PENDING, FAILED):
        return "ignored", f"transaction {transaction.id} is {transaction.status}"
    debt = Debt.get_by_id(link.debt_id)
    if transaction.currency != debt.moneda or transaction.currency != link.currency:
        return "refused", (f"transaction {transaction.id} is in {transaction.currency}, "
                           f"debt {debt.external_id} in {debt.moneda}")
    try:
        to_minor(transaction.amount, debt.moneda)
        reversed_minor = to_minor(transaction.reversed_amount, debt.moneda)
    except MoneyError as error:
        return "refused", f"transaction {transaction.id}: {error}"
    paid_at = transaction.paid_at or transaction.updated_at
    parts = list(PaymentLinkPart.select().where(PaymentLinkPart.link == link.id).order_by(PaymentLinkPart.position))
    if parts:
        return _apply_to_parts(tenant_id, link, parts, transaction, reversed_minor)
    try:
        with atomic():
            # The debt's lock first (debts.py's rule for its writers), so `known` cannot change
            # before this transaction commits.
            Debt.update(row_version=Debt.row_version + 1).where(Debt.id == debt.id).execute()
            known = Payment.select().where((Payment.tenant == tenant_id)
                                           & (Payment.transaction_id == transaction.id)).exists()
            payment = record_service_payment(tenant_id, debt.external_id, transaction.amount, "gateway",
                                             transaction_id=transaction.id,
                                             paid_at=to_utc_naive(paid_at) if paid_at else None)
            if payment.debt_id != link.debt_id:
                raise Conflict("the transaction was recorded on another debt", code="payment_transaction_conflict")
            if link.status != "paid":
                (PaymentLink.update(status="paid", paid_at=payment.pagado_en)
                 .where(PaymentLink.id == link.id).execute())
            reversal = _reverse_up_to(payment, reversed_minor,
                                      "chargeback" if transaction.state == CHARGED_BACK else "refund",
                                      transaction.updated_at)
    except DomainError as error:
        return "refused", f"transaction {transaction.id}: {error.message}"
    done = [] if known else [f"payment {payment.public_id}"]
    if reversal is not None:
        done.append(f"{reversal.kind} {reversal.public_id}")
    if not done:
        return "unchanged", f"transaction {transaction.id} was already recorded"
    return "recorded", f"transaction {transaction.id}: " + ", ".join(done)


def _shares(amount: int, limits: list[int]) -> list[int]:
    """`amount` spread over parts in order, each up to its limit; what is left goes to the last."""
    shares, left = [], amount
    for limit in limits:
        share = min(left, limit)
        shares.append(share)
        left -= share
    shares[-1] += left
    return shares


def _apply_to_parts(tenant_id: int, link: PaymentLink, parts: list[PaymentLinkPart],
                    transaction: Transaction, reversed_minor: int) -> tuple[str, str]:
    """`apply_transaction` for a link that pays several debts: the amount paid goes to the parts
    in order (each up to its amount, any excess to the last), and each share is recorded on its
    debt as a payment of its own, whose transaction id is the gateway's with the part's position
    (`123/2`), so each is recorded once. What the gateway gives back is taken from the last part
    first. The debts' rows are locked in id order, so two such transactions never wait on each other."""
    paid = to_minor(transaction.amount, link.currency)
    shares = _shares(paid, [part.amount for part in parts])
    kept = _shares(paid - min(reversed_minor, paid), shares) if reversed_minor else shares
    paid_at = transaction.paid_at or transaction.updated_at
    kind = "chargeback" if transaction.state == CHARGED_BACK else "refund"
    done = []
    try:
        with atomic():
            for part in sorted(parts, key=lambda item: item.debt_id):
                Debt.update(row_version=Debt.row_version + 1).where(Debt.id == part.debt_id).execute()
            for part, share, keep in zip(parts, shares, kept, strict=True):
                if share <= 0:
                    continue
                transaction_id = f"{transaction.id}/{part.position}"
                known = Payment.select().where((Payment.tenant == tenant_id)
                                               & (Payment.transaction_id == transaction_id)).exists()
                debt_external_id = Debt.select(Debt.external_id).where(Debt.id == part.debt_id).scalar()
                payment = record_service_payment(tenant_id, debt_external_id, from_minor(share, link.currency),
                                                 "gateway", transaction_id=transaction_id,
                                                 paid_at=to_utc_naive(paid_at) if paid_at else None)
                if not known:
                    done.append(f"payment {payment.public_id}")
                reversal = _reverse_up_to(payment, share - keep, kind, transaction.updated_at)
                if reversal is not None:
                    done.append(f"{reversal.kind} {reversal.public_id}")
            if link.status != "paid":
                PaymentLink.update(status="paid", paid_at=utcnow()).where(PaymentLink.id == link.id).execute()
    except DomainError as error:
        return "refused", f"transaction {transaction.id}: {error.message}"
    if not done:
        return "unchanged", f"transaction {transaction.id} was already recorded"
    return "recorded", f"transaction {transaction.id}: " + ", ".join(done)


def _reverse_up_to(payment: Payment, target: int, kind: str, when: dt.datetime | None) -> PaymentReversal | None:
    """Reverse what the gateway took back beyond what is already reversed. The caller holds the
    debt's lock (record_service_payment took it in this transaction).

    The payment's unallocated part goes first (it never lowered the balance), then its
    allocations newest first; the balance rises by the rest and statuses follow.
    """
    previous = list(PaymentReversal.select().where(PaymentReversal.payment == payment.id))
    amount = min(target, payment.monto) - sum(item.amount for item in previous)
    if amount <= 0:
        return None
    from_unassigned = min(amount, payment.unassigned - sum(item.unassigned for item in previous))
    restore = amount - from_unassigned
    debt = Debt.get_by_id(payment.debt_id)
    schedule = {item.id: item for item in installments_of(debt)}
    already_undone = sum(item.amount - item.unassigned for item in previous)
    left = restore
    for allocation in Allocation.select().where(Allocation.payment == payment.id).order_by(Allocation.id.desc()):
        available = allocation.amount - min(already_undone, allocation.amount)
        already_undone = max(0, already_undone - allocation.amount)
        take = min(left, available)
        if take > 0 and allocation.installment_id in schedule:
            installment = schedule[allocation.installment_id]
            installment.amount_paid -= take
            if installment.declared_status == "paid":
                installment.declared_status = "partial"
            left -= take
    debt.saldo_pendiente += restore
    debt.updated_at = utcnow()
    restate(debt, list(schedule.values()), tenant_today(debt.tenant_id))
    debt.save(only=[Debt.saldo_pendiente, Debt.status, Debt.updated_at])
    for installment in schedule.values():
        installment.save(only=[Installment.amount_paid, Installment.status, Installment.declared_status])
    reversal = PaymentReversal.create(
        public_id=new_id("brev_"), tenant=payment.tenant_id, payment=payment.id, kind=kind, amount=amount,
        currency=payment.moneda, unassigned=from_unassigned, balance_after=debt.saldo_pendiente,
        reversed_at=to_utc_naive(when) if when else utcnow())
    export_reversal(reversal)
    log.info("%s of %s on payment %s: debt %s balance back to %s", kind, amount, payment.public_id,
             debt.external_id, debt.saldo_pendiente)
    return reversal


# -- reconciliation ---------------------------------------------------------------------------

def reconcile(tenant_id: int, since: dt.datetime | None = None) -> list[dict]:
    """Compare the gateway's transactions since `since` (default SVC_PAYMENTS_RECONCILE_HOURS ago)
    with what is recorded, and record what is missing; returns what it recorded or refused."""
    start = since or (utcnow() - dt.timedelta(hours=get_settings().payments_reconcile_hours))
    start = start.replace(tzinfo=dt.UTC) if start.tzinfo is None else start
    client = client_for(tenant_id)
    report = []
    try:
        for transaction in client.list_transactions(start):
            if _fully_recorded(tenant_id, transaction):
                continue
            status, outcome = apply_transaction(tenant_id, transaction)
            if status in ("recorded", "refused"):
                report.append({"transaction_id": transaction.id, "status": status, "outcome": outcome})
    except GatewayError as error:
        raise _unavailable(error) from None
    for item in report:
        log.warning("reconciliation %s: %s", item["status"], item["outcome"])
    return report


def _fully_recorded(tenant_id: int, transaction: Transaction) -> bool:
    """Already recorded with every reversal: skipped without taking the debt's lock."""
    payment = Payment.get_or_none((Payment.tenant == tenant_id) & (Payment.transaction_id == transaction.id))
    if payment is None:
        return False
    try:
        target = min(to_minor(transaction.reversed_amount, payment.moneda), payment.monto)
    except MoneyError:
        return False
    reversed_sum = PaymentReversal.select(fn.SUM(PaymentReversal.amount)).where(
        PaymentReversal.payment == payment.id).scalar() or 0
    return reversed_sum >= target


def tenants_with_gateway() -> list[int]:
    return [row for (row,) in PaymentGateway.select(PaymentGateway.tenant).tuples()]
