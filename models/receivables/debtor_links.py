"""The debtor's page: one link per debtor and company, what the page shows, and paying from it.

The token (`dl_` and 32 URL-safe characters) is an HMAC of the link's random nonce under a key
derived from the installation's master key: the link's row holds the nonce and the token's
SHA-256, never the token, while a reminder can still send the same token again. The messages
that carry it keep it as they were sent (a reminder's button parameter, the text answering a
quick reply), so a copy of the database opens the pages of the debtors those messages reached
for as long as their links live. A link lives LINK_TTL after the last reminder that carried it
(each reminder moves its expiry on); once expired, the next reminder draws a new nonce, and the
old token stays dead. A rotated master key makes new tokens: the old one opens until the next
reminder stores the new one's hash.

The page reads only that debtor's debts with that company. A form on it carries a form token,
an HMAC of the link's token hash under another derived key: a form made for one link is refused
by every other. Requests are counted per link and per client address (PER_LINK_LIMIT,
PER_ADDRESS_LIMIT a minute) in the counters the API's rate limits use.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from decimal import Decimal

from config import get_settings
from config.settings import derive_secret
from models.clock import utcnow
from models.errors import Invalid, NotFound
from models.numbers.tables import MessagingAccount
from models.receivables.debts import allocations_of, installments_of
from models.receivables.money import from_minor
from models.receivables.payments import create_debts_link, create_link, link_button_index
from models.receivables.promises import standing
from models.receivables.tables import (
    OPEN_DEBT,
    OPEN_INSTALLMENT,
    Debt,
    Debtor,
    DebtorLink,
    DebtorPageOpen,
    Payment,
    PaymentGateway,
    PaymentLink,
)
from models.store.counters import counters
from models.store.db import atomic
from models.tenancy.tables import Tenant

PAGE_PATH = "/d"
TOKEN_PREFIX = "dl_"
LINK_TTL = dt.timedelta(days=30)
PER_LINK_LIMIT = 30
PER_ADDRESS_LIMIT = 120
LIMIT_WINDOW = 60
PAY_SCOPES = ("installment", "debt", "all")


class PageGone(Exception):
    """A token that opens no page: `reason` is not_found (unknown, forged, or another
    installation's) or expired (`tenant_id`: whose it was, so the page can speak its language)."""

    def __init__(self, reason: str, tenant_id: int | None = None) -> None:
        super().__init__(reason)
        self.reason, self.tenant_id = reason, tenant_id


def _key(purpose: str) -> bytes:
    return derive_secret(get_settings().secret_key, purpose).encode()


def _token(nonce: str) -> str:
    digest = hmac.new(_key("debtor page token"), nonce.encode(), hashlib.sha256).digest()
    return TOKEN_PREFIX + base64.urlsafe_b64encode(digest[:24]).decode()


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue(tenant_id: int, debtor_id: int, now: dt.datetime | None = None) -> str:
    """The debtor's token with the company, made now or sent again, valid LINK_TTL from now."""
    return issue_many(tenant_id, [debtor_id], now)[debtor_id]


def issue_many(tenant_id: int, debtor_ids: list[int], now: dt.datetime | None = None) -> dict[int, str]:
    """`issue` for several debtors of one company (a reminder run): debtor id -> token."""
    now = now or utcnow()
    expires_at = now + LINK_TTL
    found = {link.debtor_id: link for link in DebtorLink.select().where(
        (DebtorLink.tenant == tenant_id) & DebtorLink.debtor.in_(debtor_ids))}
    tokens = {}
    with atomic():
        for debtor_id in debtor_ids:
            link = found.get(debtor_id)
            if link is None:
                nonce = secrets.token_hex(16)
                inserted = (DebtorLink.insert(tenant=tenant_id, debtor=debtor_id, nonce=nonce,
                                              token_hash=token_hash(_token(nonce)), expires_at=expires_at,
                                              created_at=now)
                            .on_conflict_ignore().as_rowcount().execute())
                if inserted:
                    tokens[debtor_id] = _token(nonce)
                    continue
                # Another run made it meanwhile: theirs is the one.
                link = DebtorLink.get((DebtorLink.tenant == tenant_id) & (DebtorLink.debtor == debtor_id))
            nonce = link.nonce if link.expires_at > now else secrets.token_hex(16)
            token = _token(nonce)
            (DebtorLink.update(nonce=nonce, token_hash=token_hash(token), expires_at=expires_at)
             .where(DebtorLink.id == link.id).execute())
            tokens[debtor_id] = token
    return tokens


def open_link(token: str, now: dt.datetime | None = None) -> DebtorLink:
    """The link a token names; PageGone when it names none or has expired."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 64:
        raise PageGone("not_found")
    link = DebtorLink.get_or_none(DebtorLink.token_hash == token_hash(token))
    if link is None:
        raise PageGone("not_found")
    if link.expires_at <= (now or utcnow()):
        raise PageGone("expired", link.tenant_id)
    return link


def mark_opened(link: DebtorLink) -> None:
    """The debtor opened the page: the link's last opening, and one more in the report's count."""
    now = utcnow()
    with atomic():
        DebtorLink.update(opened_at=now).where(DebtorLink.id == link.id).execute()
        DebtorPageOpen.insert(tenant=link.tenant_id, debtor=link.debtor_id, opened_at=now).execute()


def form_token(link: DebtorLink) -> str:
    """The token a form of this link's page carries (bound to the link, never to another)."""
    return hmac.new(_key("debtor page form"), link.token_hash.encode(), hashlib.sha256).hexdigest()


def form_token_valid(link: DebtorLink, given: str) -> bool:
    return bool(given) and hmac.compare_digest(form_token(link).encode(), given.encode())


def throttled(link_hash: str | None, address: str) -> int | None:
    """Count one request on the link and from the address; the seconds to wait when either is
    over its limit, else None. The link is counted by a prefix of its hash, never its token."""
    keys = {f"debtor-page:a:{address}": PER_ADDRESS_LIMIT}
    if link_hash:
        keys[f"debtor-page:l:{link_hash[:32]}"] = PER_LINK_LIMIT
    now = utcnow().timestamp()
    counts = counters().incr(list(keys), LIMIT_WINDOW, now)
    if any(counts.get(key, 0) > limit for key, limit in keys.items()):
        return LIMIT_WINDOW - int(now % LIMIT_WINDOW)
    return None


# -- what the page shows ----------------------------------------------------------------------

@dataclass(frozen=True)
class Statement:
    company: str
    debtor_name: str
    debts: list[dict]
    can_pay: bool
    totals: dict[str, Decimal]  # currency -> the open balance in it


def statement(link: DebtorLink) -> Statement:
    """Every open debt of the link's debtor with its company, with installments and payments."""
    tenant = Tenant.get_by_id(link.tenant_id)
    debtor = Debtor.get_by_id(link.debtor_id)
    debts = list(Debt.select().where((Debt.tenant == link.tenant_id) & (Debt.debtor == link.debtor_id)
                                     & Debt.status.in_(OPEN_DEBT) & (Debt.saldo_pendiente > 0))
                 .order_by(Debt.created_at, Debt.id))
    payments = list(Payment.select().where(Payment.debt.in_([debt.id for debt in debts]))
                    .order_by(Payment.pagado_en, Payment.id)) if debts else []
    allocations = allocations_of([payment.id for payment in payments])
    said = standing([debt.id for debt in debts])
    shown, totals = [], {}
    for debt in debts:
        currency = debt.moneda
        installments = [{"external_id": item.external_id, "numero": item.numero, "vence": item.vence,
                         "monto": from_minor(item.monto, currency),
                         "saldo": from_minor(max(0, item.monto - item.amount_paid), currency),
                         "status": item.status, "open": item.status in OPEN_INSTALLMENT}
                        for item in installments_of(debt) if item.status != "cancelled"]
        paid = [{"monto": from_minor(payment.monto, currency), "pagado_en": payment.pagado_en,
                 "metodo": payment.metodo,
                 "cuotas": [item["numero"] for item in allocations[payment.id]]}
                for payment in payments if payment.debt_id == debt.id]
        shown.append({"external_id": debt.external_id, "referencia": debt.referencia, "moneda": currency,
                      "monto_original": from_minor(debt.monto_original, currency),
                      "saldo": from_minor(debt.saldo_pendiente, currency), "status": debt.status,
                      "installments": installments, "payments": paid,
                      "promised_date": said[debt.id]["promise"], "dispute": said[debt.id]["dispute"]})
        totals[currency] = totals.get(currency, Decimal(0)) + from_minor(debt.saldo_pendiente, currency)
    can_pay = PaymentGateway.select().where(PaymentGateway.tenant == link.tenant_id).exists()
    return Statement(tenant.name, debtor.nombre, shown, can_pay, totals)


def company_of(link: DebtorLink) -> Tenant:
    return Tenant.get_by_id(link.tenant_id)


def company_of_token(token: str) -> Tenant | None:
    """The company of a token, expired or not (a refusal speaks its language); None for none."""
    return (Tenant.select().join(DebtorLink, on=(DebtorLink.tenant == Tenant.id))
            .where(DebtorLink.token_hash == token_hash(token)).first())


# -- acting from the page ---------------------------------------------------------------------

def own_debt(link: DebtorLink, debt_external_id: str) -> Debt:
    """One of the link's debtor's open debts with its company; another's is not found."""
    debt = Debt.select().where((Debt.tenant == link.tenant_id) & (Debt.debtor == link.debtor_id)
                               & (Debt.external_id == debt_external_id) & Debt.status.in_(OPEN_DEBT)).first()
    if debt is None:
        raise NotFound("no such debt on this page", code="debt_not_found")
    return debt


def pay(link: DebtorLink, scope: str, debt_external_id: str = "", installment_external_id: str = "",
        currency: str = "") -> str:
    """A payment link for what the debtor chose, made through the gateway; returns its checkout URL.

    `scope`: `installment` (what that installment still owes), `debt` (the debt's balance), or
    `all` (every open debt's balance in `currency`, one link that pays them all). Only the link's
    own debts can be named; another's is not found.
    """
    if scope not in PAY_SCOPES:
        raise Invalid("choose what to pay", details={"errors": {"scope": ["must be one of " + ", ".join(PAY_SCOPES)]}})
    if scope == "all":
        debts = list(Debt.select().where((Debt.tenant == link.tenant_id) & (Debt.debtor == link.debtor_id)
                                         & Debt.status.in_(OPEN_DEBT) & (Debt.saldo_pendiente > 0)
                                         & (Debt.moneda == currency)).order_by(Debt.created_at, Debt.id))
        if not debts:
            raise NotFound("no open debt in this currency on this page", code="debt_not_found")
        if len(debts) > 1:
            return create_debts_link(link.tenant_id, debts, back_url=back_url())["checkout_url"]
        debt = debts[0]
    else:
        debt = own_debt(link, debt_external_id)
    if scope == "installment":
        if not installment_external_id:
            raise Invalid("choose an installment", details={"errors": {"installment": ["required"]}})
        made = create_link(link.tenant_id, debt.external_id, installment_external_id=installment_external_id,
                           origin="page", back_url=back_url())
    else:
        made = create_link(link.tenant_id, debt.external_id, amount=from_minor(debt.saldo_pendiente, debt.moneda),
                           origin="page", back_url=back_url())
    return made["checkout_url"]


def back_url() -> str:
    """Where the gateway returns the payer: no token in it (the gateway keeps its URLs); the
    payment link it adds as `external_reference` leads back to the page."""
    return f"{get_settings().public_url}{PAGE_PATH}/back"


def page_after_payment(payment_link_id: str, now: dt.datetime | None = None) -> str:
    """The page a payer returns to from the gateway, by the payment link they paid: its token.
    Only a link made on the page leads back to it, and only while that link is unexpired."""
    now = now or utcnow()
    found = PaymentLink.get_or_none((PaymentLink.public_id == payment_link_id[:64]) & (PaymentLink.origin == "page"))
    if found is None or found.expires_at <= now:
        raise PageGone("not_found")
    debtor_id = Debt.select(Debt.debtor).where(Debt.id == found.debt_id).scalar()
    link = DebtorLink.get_or_none((DebtorLink.tenant == found.tenant_id) & (DebtorLink.debtor == debtor_id))
    if link is None:
        raise PageGone("not_found")
    token = _token(link.nonce)
    # A master key rotated since the last reminder: the stored hash is the old token's.
    if link.expires_at <= now or token_hash(token) != link.token_hash:
        raise PageGone("expired", link.tenant_id)
    return token


def reminder_buttons(tenant_id: int, account_public_id: str, debt_ids: list[int]) -> dict[int, list[dict]]:
    """The URL button of a reminder about to go out, keyed by debt id: `[{"index": i, "type":
    "url", "text": "dl_..."}]`, the debtor's token as the suffix of the `payment_reminder_link`
    template's `/pay/{{1}}` button, which leads to the debtor's page. {} when the company has no
    gateway or the number no `payment_reminder_link` template a reminder can fill."""
    if not debt_ids or not PaymentGateway.select().where(PaymentGateway.tenant == tenant_id).exists():
        return {}
    account = MessagingAccount.get_or_none((MessagingAccount.tenant == tenant_id)
                                           & (MessagingAccount.public_id == account_public_id))
    index = link_button_index(account, TOKEN_PREFIX) if account is not None else None
    if index is None:
        return {}
    debtors = dict(Debt.select(Debt.id, Debt.debtor).where(Debt.id.in_(debt_ids)).tuples())
    tokens = issue_many(tenant_id, sorted(set(debtors.values())))
    return {debt_id: [{"index": index, "type": "url", "text": tokens[debtor_id]}]
            for debt_id, debtor_id in debtors.items()}
