"""Receivables' tables: the replica of the ERP's debtors, debts, installments and payments,
collection's reminders, and the payment gateway's side (credentials, links, notifications,
reversals, the ERP's export), with the statuses that describe them. Amounts are integers in
the currency's minor units (money.py).

A column that stores a field of the contract as the ERP sends it keeps the field's name
(`moneda`, `saldo_pendiente`, `vence`); what the service works out or invented is named in
English (an installment's `status`, a payment's `unassigned`, the gateway's tables)."""

from __future__ import annotations

from peewee import (
    BigIntegerField,
    BooleanField,
    CharField,
    DateField,
    DateTimeField,
    ForeignKeyField,
    IntegerField,
    TextField,
)

from models.clock import utcnow
from models.numbers.tables import MessagingAccount
from models.receivables.money import amount_json
from models.store.base import BaseModel, JSONField
from models.store.secrets import EncryptedText
from models.tenancy.tables import Tenant

# The replica and collection (debts.py, snapshots.py, reminders.py, collection.py).

OPEN_INSTALLMENT = ("pending", "partial", "overdue")
OPEN_DEBT = ("pending", "partial", "overdue")
RESOLVED_DEBT = ("paid", "cancelled", "written_off")
DEBT_STATUSES = OPEN_DEBT + ("paid", "cancelled", "written_off")
# Collection's reminder stages: (stage, days from the due date when it starts), in order.
STAGES = (("before", -3), ("due", 0), ("after", 3))


class Debtor(BaseModel):
    """A person who owes, identified per tenant by document and, second, by phone."""

    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    nombre = CharField(max_length=255)
    documento = CharField(max_length=64, null=True)
    telefono = CharField(max_length=32, null=True)
    created_at = DateTimeField(default=utcnow)
    updated_at = DateTimeField(default=utcnow)

    class Meta:
        # NULLs are distinct in both engines: debtors known by only one key do not collide.
        indexes = ((("tenant", "documento"), True), (("tenant", "telefono"), True))

    def as_dict(self) -> dict:
        return {"nombre": self.nombre, "documento": self.documento, "telefono": self.telefono}


class Debt(BaseModel):
    # Indexed as the first column of (tenant, id) below, not on its own (migration 0020).
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE", index=False)
    external_id = CharField(max_length=160)
    account = ForeignKeyField(MessagingAccount)
    debtor = ForeignKeyField(Debtor)
    moneda = CharField(max_length=3)
    referencia = CharField(max_length=500, null=True)
    monto_original = BigIntegerField()
    saldo_pendiente = BigIntegerField()
    tipo = CharField(max_length=16, default="single")
    auto_send = BooleanField(default=False)
    status = CharField(max_length=16, default="pending")
    external_version = BigIntegerField(null=True)
    external_updated_at = DateTimeField(null=True)
    resolution = CharField(max_length=16, null=True)
    resolution_reason = CharField(max_length=500, null=True)
    resolved_at = DateTimeField(null=True)
    row_version = IntegerField(default=0)
    created_at = DateTimeField(default=utcnow)
    updated_at = DateTimeField(default=utcnow)

    class Meta:
        # (tenant, id): a page of a company's debts newest first is a seek from the last id shown.
        indexes = ((("tenant", "external_id"), True), (("tenant", "status"), False), (("tenant", "id"), False))

    def summary(self) -> dict:
        return debt_summary(self)


def debt_summary(debt) -> dict:
    """What a write answers about a debt (a Debt row, or one just inserted by a batch)."""
    return {"external_id": debt.external_id, "saldo_pendiente": amount_json(debt.saldo_pendiente, debt.moneda),
            "status": debt.status, "external_version": debt.external_version}


class Installment(BaseModel):
    debt = ForeignKeyField(Debt, backref="installments", on_delete="CASCADE")
    external_id = CharField(max_length=160)
    numero = IntegerField()
    monto = BigIntegerField()
    amount_paid = BigIntegerField(default=0)  # allocated by payments recorded here
    vence = DateField()
    # What the ERP last declared in `estado` (pending, partial, paid, overdue, cancelled), or
    # `cancelled` when the service cancelled it; `status`, what the API answers as `estado`, is
    # derived from it, the allocations and the date.
    status = CharField(max_length=16)
    declared_status = CharField(max_length=16, default="pending")

    class Meta:
        table_name = "debt_installment"
        indexes = ((("debt", "external_id"), True), (("status", "vence"), False))


class Payment(BaseModel):
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    debt = ForeignKeyField(Debt, backref="payments", on_delete="CASCADE")
    public_id = CharField(max_length=40, unique=True, null=True)  # bpay_: payments made in the service
    external_id = CharField(max_length=160, null=True)  # the ERP's id: payments it reports
    transaction_id = CharField(max_length=255, null=True)  # the gateway's id, when there is one
    origin = CharField(max_length=8)  # erp or service
    monto = BigIntegerField()
    moneda = CharField(max_length=3)
    metodo = CharField(max_length=16)
    pagado_en = DateTimeField()
    unassigned = BigIntegerField(default=0)  # what no installment took (`monto_sin_asignar`)
    balance_after = BigIntegerField()  # the debt's balance right after: replays answer the original result
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "debt_payment"
        indexes = ((("tenant", "external_id"), True), (("tenant", "transaction_id"), True))


class Allocation(BaseModel):
    payment = ForeignKeyField(Payment, backref="allocations", on_delete="CASCADE")
    installment = ForeignKeyField(Installment, on_delete="CASCADE")
    amount = BigIntegerField()

    class Meta:
        table_name = "payment_allocation"


class Reminder(BaseModel):
    """One collection reminder per installment and stage: the unique key makes a second impossible."""

    debt = ForeignKeyField(Debt, on_delete="CASCADE")
    installment = ForeignKeyField(Installment, on_delete="CASCADE")
    stage = CharField(max_length=8)  # before, due, after
    status = CharField(max_length=16, default="queued")  # queued (handed to a campaign), cancelled
    campaign_id = CharField(max_length=40, null=True)  # the cmp_ id that carries it
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "debt_reminder"
        indexes = ((("installment", "stage"), True),)


# The payment gateway's side (payments.py, export.py).

PROVIDER = "mercadopago"


class PaymentGateway(BaseModel):
    """A company's gateway account: its credentials, encrypted at rest."""

    tenant = ForeignKeyField(Tenant, unique=True, on_delete="CASCADE")
    provider = CharField(max_length=32, default=PROVIDER)
    access_token_ciphertext = EncryptedText()
    webhook_secret_ciphertext = EncryptedText()
    created_at = DateTimeField(default=utcnow)
    updated_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "payment_gateway"


class PaymentLink(BaseModel):
    public_id = CharField(max_length=40, unique=True)  # plk_: also the gateway's external_reference
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    debt = ForeignKeyField(Debt, on_delete="CASCADE")
    installment = ForeignKeyField(Installment, null=True, on_delete="CASCADE")
    amount = BigIntegerField()
    currency = CharField(max_length=3)
    origin = CharField(max_length=16)  # api or reminder
    checkout_id = CharField(max_length=255, null=True)  # the gateway's preference, once created
    checkout_url = TextField(null=True)
    status = CharField(max_length=16, default="active")  # active, paid
    expires_at = DateTimeField()
    paid_at = DateTimeField(null=True)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "payment_link"
        indexes = ((("tenant", "debt"), False),)


class GatewayNotification(BaseModel):
    """A verified notification, kept once per (tenant, request id): redeliveries are dropped."""

    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    request_id = CharField(max_length=255)
    topic = CharField(max_length=64)
    action = CharField(max_length=64, null=True)
    resource_id = CharField(max_length=255, null=True)
    claimed_amount = CharField(max_length=64, null=True)  # what the body said, if anything
    claimed_currency = CharField(max_length=3, null=True)
    # received, then recorded (something written), unchanged, ignored, refused or failed
    status = CharField(max_length=16, default="received")
    outcome = CharField(max_length=500, null=True)
    attempts = IntegerField(default=0)
    received_at = DateTimeField(default=utcnow)
    processed_at = DateTimeField(null=True)

    class Meta:
        table_name = "gateway_notification"
        indexes = ((("tenant", "request_id"), True), (("status", "received_at"), False))


class PaymentReversal(BaseModel):
    """Money the gateway took back from a recorded payment: a refund or a chargeback."""

    public_id = CharField(max_length=40, unique=True)  # brev_
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    payment = ForeignKeyField(Payment, on_delete="CASCADE")
    kind = CharField(max_length=16)  # refund or chargeback
    amount = BigIntegerField()
    currency = CharField(max_length=3)
    unassigned = BigIntegerField(default=0)  # the part taken from the payment's unassigned amount
    balance_after = BigIntegerField()
    reversed_at = DateTimeField()
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "payment_reversal"


class PaymentExport(BaseModel):
    """The ERP's feed: one row per payment or reversal made in the service, numbered per tenant."""

    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    seq = BigIntegerField()
    payment = ForeignKeyField(Payment, on_delete="CASCADE")
    reversal = ForeignKeyField(PaymentReversal, null=True, on_delete="CASCADE")
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "payment_export"
        indexes = ((("tenant", "seq"), True), (("payment", "reversal"), True))


class PaymentExportSequence(BaseModel):
    tenant = ForeignKeyField(Tenant, primary_key=True, on_delete="CASCADE")
    last = BigIntegerField(default=0)

    class Meta:
        table_name = "payment_export_sequence"


# The debtor's page (debtor_links.py).

class DebtorLink(BaseModel):
    """The one link a debtor has to their page with a company. The token is never stored: it is
    derived from the installation's key and `nonce` (so a reminder can send it again), and found
    by its SHA-256, `token_hash`. A new nonce (once the link has expired) makes a new token."""

    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    debtor = ForeignKeyField(Debtor, on_delete="CASCADE")
    nonce = CharField(max_length=64)
    token_hash = CharField(max_length=64, unique=True)
    expires_at = DateTimeField()
    opened_at = DateTimeField(null=True)  # the last time the debtor opened the page
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "debtor_link"
        indexes = ((("tenant", "debtor"), True),)


class DebtorPageOpen(BaseModel):
    """One opening of a debtor's page: the collection report's "page opened" (report.py)."""

    tenant = ForeignKeyField(Tenant, on_delete="CASCADE", index=False)
    debtor = ForeignKeyField(Debtor, on_delete="CASCADE", index=False)
    opened_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "debtor_page_open"
        indexes = ((("tenant", "debtor", "opened_at"), False),)


class DebtPromise(BaseModel):
    """A debtor's promise to pay a debt by a date, made on their page (promises.py)."""

    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    debt = ForeignKeyField(Debt, on_delete="CASCADE")
    promised_date = DateField()
    status = CharField(max_length=16, default="active")  # active, replaced (by a later promise)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "debt_promise"
        indexes = ((("debt", "status"), False),)


class DebtDispute(BaseModel):
    """A debtor's dispute of a debt, with their reason, made on their page (disputes.py)."""

    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    debt = ForeignKeyField(Debt, on_delete="CASCADE")
    reason = CharField(max_length=500)
    status = CharField(max_length=16, default="open")  # open, resolved (by the company)
    created_at = DateTimeField(default=utcnow)
    resolved_at = DateTimeField(null=True)

    class Meta:
        table_name = "debt_dispute"
        indexes = ((("debt", "status"), False),)


class PaymentLinkPart(BaseModel):
    """One debt of a payment link that pays several (everything a debtor owes in a currency, from
    their page): what of the link's amount goes to that debt, in `position` order."""

    link = ForeignKeyField(PaymentLink, backref="parts", on_delete="CASCADE")
    debt = ForeignKeyField(Debt, on_delete="CASCADE")
    position = IntegerField()
    amount = BigIntegerField()

    class Meta:
        table_name = "payment_link_part"
        indexes = ((("link", "position"), True),)


# What debtors answer in WhatsApp (replies.py), and the ERP's feed of what debtors said (responses.py).

class DebtReply(BaseModel):
    """A debtor's WhatsApp message attached to one of their debts: free text (`kind` text, its
    `body`), or a reminder's quick-reply button (`kind` button, `action` paid, promise or dispute).
    One row per debt a message concerns; the unique (debt, wam_id) key keeps a redelivery out."""

    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    debt = ForeignKeyField(Debt, on_delete="CASCADE")
    wam_id = CharField(max_length=255)
    sender = CharField(max_length=160)  # the phone, or the business-scoped id of a user who hides it
    kind = CharField(max_length=16)  # text, button
    action = CharField(max_length=16, null=True)  # a button's: paid, promise, dispute
    body = TextField(null=True)
    received_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "debt_reply"
        indexes = ((("debt", "wam_id"), True), (("tenant", "received_at"), False))


class DebtorResponseExport(BaseModel):
    """The ERP's feed of what debtors said: a promise, a dispute, or a payment claimed (a `paid`
    press: `reply`), numbered per tenant in the transaction that records it."""

    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    seq = BigIntegerField()
    debt = ForeignKeyField(Debt, on_delete="CASCADE")
    promise = ForeignKeyField(DebtPromise, null=True, on_delete="CASCADE")
    dispute = ForeignKeyField(DebtDispute, null=True, on_delete="CASCADE")
    reply = ForeignKeyField(DebtReply, null=True, on_delete="CASCADE")
    origin = CharField(max_length=16)  # page, whatsapp
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "debtor_response_export"
        indexes = ((("tenant", "seq"), True),)


class DebtorResponseExportSequence(BaseModel):
    tenant = ForeignKeyField(Tenant, primary_key=True, on_delete="CASCADE")
    last = BigIntegerField(default=0)

    class Meta:
        table_name = "debtor_response_export_sequence"
# Dunning plans (dunning_plans.py): each company's collection schedule, and what it escalated.

class DunningPlan(BaseModel):
    """A company's collection schedule for a segment of its debts (a currency, and within it an
    amount band of `monto_original`), or for all of them when it names no segment. `steps` is
    `[{"days", "template", "language"}]`, ordered by `days` from the due date."""

    public_id = CharField(max_length=40, unique=True)  # dpl_
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    name = CharField(max_length=100)
    currency = CharField(max_length=3, null=True)
    amount_from = BigIntegerField(null=True)  # minor units, inclusive
    amount_to = BigIntegerField(null=True)  # minor units, exclusive
    steps = JSONField(default=list)
    quiet_hours_start = CharField(max_length=5, null=True)  # HH:MM; null: the installation's window
    quiet_hours_end = CharField(max_length=5, null=True)
    weekly_cap = IntegerField(null=True)  # most reminders a debtor gets in 7 days; null: no cap
    pause_on_promise = BooleanField(default=True)
    pause_on_dispute = BooleanField(default=True)
    escalate = BooleanField(default=True)
    created_at = DateTimeField(default=utcnow)
    updated_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "dunning_plan"
        indexes = ((("tenant", "name"), True),)


class DebtEscalation(BaseModel):
    """A debt whose plan ran out of steps unpaid: `debt.escalated` was sent once, for this debt."""

    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    debt = ForeignKeyField(Debt, unique=True, on_delete="CASCADE")
    plan_public_id = CharField(max_length=40)
    stage = CharField(max_length=8)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "debt_escalation"
