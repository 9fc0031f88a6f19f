"""The debts replica: statuses, reads, payments recorded against a debt, resolutions, overdue.

The ERP is the source of truth. It pushes debt snapshots (snapshots.py), payments it received
(`record_erp_payment`) and resolutions (`resolve_debt`); the service adds payments of its own
(`record_service_payment`, which emits `debt.payment_received`) and keeps statuses current
(`refresh_overdue`). Amounts are integers in the currency's minor units (money.py).

Statuses (docs/receivables.md):
- installment: `cancelled` or `paid` when the ERP says so (or the service cancelled it), `paid`
  when its allocations cover it, else `overdue` past its due date in the tenant's day, else
  `partial` with something allocated (or declared partial), else `pending`;
- debt: a resolution (`paid`, `cancelled`, `written_off`) when resolved; else `paid` at balance 0,
  `overdue` with an open installment past due, `partial` when the balance is below the original
  amount, `pending` otherwise.

Writers to one debt are serialized: each write first bumps the debt's `row_version` with an
UPDATE, which holds the row lock on PostgreSQL until commit (SQLite's IMMEDIATE transactions
already admit one writer at a time). A settled debt's reminders not yet sent are withdrawn in
the transaction that settles it (reminders.py).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from peewee import IntegrityError, fn

from models.clock import isoformat, to_utc_naive, utcnow
from models.errors import Conflict, NotFound
from models.events.outbox import emit
from models.ids import new_id
from models.numbers.tables import MessagingAccount
from models.receivables.export import export_payment
from models.receivables.inputs import PAYMENT_METHODS, RESOLUTIONS, PaymentSpec, invalid, parse_amount
from models.receivables.money import MoneyError, amount_json, to_minor
from models.receivables.reminders import cancel_reminders, stop_collection
from models.receivables.tables import (
    OPEN_DEBT,
    OPEN_INSTALLMENT,
    RESOLVED_DEBT,
    Allocation,
    Debt,
    Debtor,
    Installment,
    Payment,
)
from models.store.db import atomic, execute
from models.store.prepared import Prepared
from models.tenancy.tables import Tenant

# -- time and status --------------------------------------------------------------------------

def zone_of(timezone: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def tenant_today(tenant_id: int, now: dt.datetime | None = None) -> dt.date:
    """The tenant's calendar day (its time zone; UTC unless configured)."""
    # Hand-written: every batch of an import asks (peewee would build the query anew each time).
    row = execute('SELECT "timezone" FROM "tenant" WHERE "id" = ?', [tenant_id]).fetchone()
    return local_day(row[0] if row else None, now or utcnow())


def local_day(timezone: str | None, now: dt.datetime) -> dt.date:
    """The calendar day in `timezone` (UTC when unset or unknown) at `now` (naive UTC)."""
    return now.replace(tzinfo=dt.UTC).astimezone(zone_of(timezone)).date()


def installment_status(declared: str, amount: int, amount_paid: int, due_date: dt.date, today: dt.date) -> str:
    if declared == "cancelled":
        return "cancelled"
    if declared == "paid" or amount_paid >= amount:
        return "paid"
    if due_date < today:
        return "overdue"
    if amount_paid > 0 or declared == "partial":
        return "partial"
    return "pending"


def debt_status(resolution: str | None, balance: int, original_amount: int, overdue: bool) -> str:
    if resolution:
        return resolution
    if balance == 0:
        return "paid"
    if overdue:
        return "overdue"
    if balance < original_amount:
        return "partial"
    return "pending"


def restate(debt: Debt, installments: list[Installment], today: dt.date) -> list[Installment]:
    """Recompute the installments' statuses and the debt's; returns the installments whose status changed."""
    changed = []
    for item in installments:
        status = installment_status(item.declared_status, item.monto, item.amount_paid, item.vence, today)
        if debt.resolution and status in OPEN_INSTALLMENT:
            # A resolved debt keeps nothing open, even when a later sync lists open installments.
            item.declared_status = status = "cancelled"
        if status != item.status:
            item.status = status
            changed.append(item)
    overdue = any(item.status == "overdue" for item in installments)
    debt.status = debt_status(debt.resolution, debt.saldo_pendiente, debt.monto_original, overdue)
    return changed


# -- reads ------------------------------------------------------------------------------------

# The statements of a payment (POST /cartera/pagos runs all of them) and of a debt's reads, built once.
_DEBT = Prepared(lambda tenant_id, external_id: Debt.select()
                 .where((Debt.tenant == tenant_id) & (Debt.external_id == external_id)).limit(1),
                 -7_000_000_001, "\0external_id")
_INSTALLMENTS = Prepared(lambda debt_id: Installment.select().where(Installment.debt == debt_id)
                         .order_by(Installment.numero, Installment.vence, Installment.id), -7_000_000_001)
_PAYMENT_BY_EXTERNAL_ID = Prepared(lambda tenant_id, external_id: Payment.select()
                                   .where((Payment.tenant == tenant_id) & (Payment.external_id == external_id))
                                   .limit(1), -7_000_000_001, "\0external_id")
_LOCK_DEBT = 'UPDATE "debt" SET "row_version" = "row_version" + 1 WHERE "tenant_id" = ? AND "external_id" = ?'


def get_debt(tenant_id: int, external_id: str) -> Debt:
    debt = _DEBT.first(tenant_id, external_id)
    if debt is None:
        raise NotFound(f"no debt {external_id}", code="debt_not_found", details={"external_id": external_id})
    return debt


def list_debts(tenant_id: int, status: str | None = None):
    query = Debt.select(Debt, Debtor).join(Debtor).where(Debt.tenant == tenant_id)
    if status:
        query = query.where(Debt.status == status)
    return query.order_by(Debt.id.desc())


def search_debts(tenant_id: int, text: str):
    """A company's debts whose external id is `text` or whose debtor's document is, newest first
    (a query, for keyset pages). The matches are found first on the unique (tenant, external_id)
    and (tenant, documento) indexes and the debtor's (debtor_id) index, then read by primary key:
    one condition `external_id = ? OR documento = ?` across the join would have the database walk
    every debt of the company newest first, testing each, until it filled a page."""
    matches = [row[0] for row in Debt.select(Debt.id).where(
        (Debt.tenant == tenant_id) & (Debt.external_id == text)).tuples()]
    debtor = Debtor.select(Debtor.id).where((Debtor.tenant == tenant_id) & (Debtor.documento == text)).scalar()
    if debtor is not None:
        matches += [row[0] for row in Debt.select(Debt.id).where(Debt.debtor == debtor).tuples()]
    # The tenant condition stays on the page's query: every row shown is the company's own.
    return list_debts(tenant_id).where(Debt.id.in_(sorted(set(matches))))


def installments_of(debt: Debt) -> list[Installment]:
    return _INSTALLMENTS.rows(debt.id)


def installment_dict(item: Installment, currency: str) -> dict:
    return {"external_id": item.external_id, "numero": item.numero, "monto": amount_json(item.monto, currency),
            "vence": item.vence.isoformat(), "estado": item.status}


def allocations_of(payment_ids: list[int]) -> dict[int, list[dict]]:
    found: dict[int, list[dict]] = {payment_id: [] for payment_id in payment_ids}
    if not payment_ids:
        return found
    query = (Allocation.select(Allocation.payment.alias("payment_id"), Allocation.amount.alias("monto"),
                               Installment.external_id.alias("cuota_external_id"), Installment.numero.alias("numero"))
             .join(Installment).where(Allocation.payment.in_(payment_ids)).order_by(Allocation.id))
    for row in query.dicts():
        payment_id = row.pop("payment_id")
        found[payment_id].append({"cuota_external_id": row["cuota_external_id"], "numero": row["numero"],
                                  "monto": row["monto"]})
    return found


def payment_dict(payment: Payment, allocations: list[dict]) -> dict:
    """A `pagos` item: the ERP's id, ours, where it came from, and how it was allocated."""
    return {
        "external_id": payment.external_id,
        "boty_payment_id": payment.public_id,
        "origin": payment.origin,
        "monto": amount_json(payment.monto, payment.moneda),
        "moneda": payment.moneda,
        "metodo": payment.metodo,
        "pagado_en": isoformat(payment.pagado_en),
        "asignaciones": [dict(item, monto=amount_json(item["monto"], payment.moneda)) for item in allocations],
    }


def debt_detail(debt: Debt) -> dict:
    """The whole debt as GET /cartera/deudas/{external_id} shows it; no internal ids."""
    account_public_id = MessagingAccount.select(MessagingAccount.public_id).where(
        MessagingAccount.id == debt.account_id).scalar()
    debtor = Debtor.get_by_id(debt.debtor_id)
    payments = list(Payment.select().where(Payment.debt == debt.id).order_by(Payment.pagado_en, Payment.id))
    allocations = allocations_of([payment.id for payment in payments])
    return {
        "external_id": debt.external_id,
        "account_id": account_public_id,
        "deudor": debtor.as_dict(),
        "moneda": debt.moneda,
        "referencia": debt.referencia,
        "monto_original": amount_json(debt.monto_original, debt.moneda),
        "saldo_pendiente": amount_json(debt.saldo_pendiente, debt.moneda),
        "status": debt.status,
        "tipo": debt.tipo,
        "auto_send": debt.auto_send,
        "external_version": debt.external_version,
        "external_updated_at": isoformat(debt.external_updated_at),
        "cuotas": [installment_dict(item, debt.moneda) for item in installments_of(debt)],
        "pagos": [payment_dict(payment, allocations[payment.id]) for payment in payments],
    }


# -- payments ---------------------------------------------------------------------------------

@dataclass
class PaymentResult:
    action: str  # applied, already_applied
    payment: Payment
    debt: Debt
    allocations: list[dict] | None = None  # as `allocations_of` gives them; read when not given

    def as_dict(self) -> dict:
        payment = self.payment
        allocations = self.allocations if self.allocations is not None else allocations_of([payment.id])[payment.id]
        return {
            "action": self.action,
            "pago": {"external_id": payment.external_id, "deuda_external_id": self.debt.external_id,
                     "monto": amount_json(payment.monto, payment.moneda),
                     "asignaciones": [dict(item, monto=amount_json(item["monto"], payment.moneda))
                                      for item in allocations]},
            "saldo_pendiente": amount_json(payment.balance_after, payment.moneda),
            "monto_sin_asignar": amount_json(payment.unassigned, payment.moneda),
        }


def _lock_debt(tenant_id: int, external_id: str) -> Debt:
    # The UPDATE takes the row lock on PostgreSQL until commit, so payments and resolutions of one
    # debt run one after another and each sees the balance the previous one left.
    if not execute(_LOCK_DEBT, (tenant_id, external_id)).rowcount:
        raise NotFound(f"no debt {external_id}", code="debt_not_found", details={"external_id": external_id})
    return get_debt(tenant_id, external_id)


def _minor(amount, currency: str, path: str = "monto") -> int:
    try:
        value = to_minor(amount, currency)
    except MoneyError as error:
        raise invalid({path: [str(error)]}) from None
    if value <= 0:
        raise invalid({path: ["must be greater than 0"]})
    return value


def _check_payable(debt: Debt, currency: str) -> None:
    if debt.status in RESOLVED_DEBT:
        raise Conflict(f"debt {debt.external_id} is {debt.status} and takes no payments",
                       code="debt_not_payable", details={"status": debt.status})
    if currency != debt.moneda:
        raise Conflict(f"the debt is in {debt.moneda}, the payment in {currency}",
                       code="payment_currency_mismatch", details={"debt_currency": debt.moneda,
                                                                  "payment_currency": currency})


def _apply_payment(debt: Debt, *, amount: int, currency: str, method: str, paid_at: dt.datetime,
                   origin: str, external_id: str | None = None,
                   transaction_id: str | None = None) -> tuple[Payment, list[dict]]:
    """Allocate first-in-first-out and lower the balance; the caller holds the debt's lock and has
    checked `_check_payable`. Returns the payment and its allocations (as `allocations_of` reads them).

    1. walk the open installments by due date, then number, covering each in turn;
    2. what covers no installment is left unassigned (`monto_sin_asignar`); for a debt without installments the
       balance itself is what gets covered, and only the excess is left unallocated;
    3. the balance drops by the amount (never below 0), statuses follow.
    """
    schedule = installments_of(debt)
    live = [item for item in schedule if item.status != "cancelled"]
    remaining = amount
    allocations: list[tuple[Installment, int]] = []
    for item in sorted((i for i in live if i.status in OPEN_INSTALLMENT), key=lambda i: (i.vence, i.numero, i.id)):
        if remaining == 0:
            break
        share = min(item.monto - item.amount_paid, remaining)
        if share <= 0:
            continue
        item.amount_paid += share
        remaining -= share
        allocations.append((item, share))
    unassigned = remaining if live else max(0, amount - debt.saldo_pendiente)
    debt.saldo_pendiente = max(0, debt.saldo_pendiente - amount)
    debt.updated_at = utcnow()
    changed = {item.id: item for item, _share in allocations}
    changed.update((item.id, item) for item in restate(debt, schedule, tenant_today(debt.tenant_id)))
    debt.save(only=[Debt.saldo_pendiente, Debt.status, Debt.updated_at])
    for item in changed.values():
        item.save(only=[Installment.amount_paid, Installment.status, Installment.declared_status])
    if debt.status == "paid":
        stop_collection([debt.id])
    payment = Payment.create(
        tenant=debt.tenant_id, debt=debt.id, public_id=new_id("bpay_") if origin == "service" else None,
        external_id=external_id, transaction_id=transaction_id, origin=origin, monto=amount, moneda=currency,
        metodo=method, pagado_en=paid_at, unassigned=unassigned, balance_after=debt.saldo_pendiente)
    if allocations:
        Allocation.insert_many([{"payment": payment.id, "installment": item.id, "amount": share}
                                for item, share in allocations]).as_rowcount().execute()
    return payment, [{"cuota_external_id": item.external_id, "numero": item.numero, "monto": share}
                     for item, share in allocations]


def record_erp_payment(tenant_id: int, spec: PaymentSpec) -> PaymentResult:
    """A payment the ERP received (POST /cartera/pagos): applied once per `external_id`, no event.

    The same payment again answers its original result (`already_applied`); the id reused with
    another amount, currency or debt is 409 `payment_external_id_conflict`.
    """
    for attempt in range(2):
        try:
            with atomic():
                debt = _lock_debt(tenant_id, spec.debt_external_id)
                existing = _PAYMENT_BY_EXTERNAL_ID.first(tenant_id, spec.external_id)
                if existing is not None:
                    return _replayed(existing, spec, debt)
                _check_payable(debt, spec.currency)
                amount = _minor(spec.amount, spec.currency)
                payment, allocations = _apply_payment(debt, amount=amount, currency=spec.currency,
                                                      method=spec.method, paid_at=spec.paid_at, origin="erp",
                                                      external_id=spec.external_id)
                return PaymentResult("applied", payment, debt, allocations)
        except IntegrityError:
            # The same external_id was recorded concurrently (for another debt, or this one):
            # the second pass finds it and answers as a replay or a conflict.
            if attempt:
                raise
    raise AssertionError("unreachable")


def _replayed(existing: Payment, spec: PaymentSpec, debt: Debt) -> PaymentResult:
    same_amount = False
    if spec.currency == existing.moneda:
        try:
            same_amount = to_minor(spec.amount, existing.moneda) == existing.monto
        except MoneyError:
            same_amount = False
    if existing.debt_id != debt.id or not same_amount:
        raise Conflict(f"payment {spec.external_id} was already recorded with another amount or debt",
                       code="payment_external_id_conflict", details={"external_id": spec.external_id})
    return PaymentResult("already_applied", existing, debt)


def payment_event_data(payment: Payment, debt: Debt) -> dict:
    """The `data` of `debt.payment_received` (section 6), amounts as JSON numbers."""
    return {
        "deuda_external_id": debt.external_id,
        "pago": {
            "boty_payment_id": payment.public_id,
            "external_id": payment.external_id,
            "transaction_id": payment.transaction_id,
            "monto": amount_json(payment.monto, payment.moneda),
            "moneda": payment.moneda,
            "metodo": payment.metodo,
            "pagado_en": isoformat(payment.pagado_en),
        },
        "saldo_pendiente": amount_json(debt.saldo_pendiente, debt.moneda),
        "status": debt.status,
    }


def record_service_payment(tenant_id: int, debt_external_id: str, amount, method: str,
                           transaction_id: str | None = None, paid_at: dt.datetime | None = None) -> Payment:
    """A payment made inside the service (a gateway's callback, or `svcctl cartera pay`).

    `amount` is an int, a Decimal or a decimal string in the debt's currency. It is applied like
    an ERP payment and emits `debt.payment_received` in the same transaction. A gateway that
    calls back twice with the same `transaction_id` gets the first payment back, applied once.
    After commit (when this call owns the transaction) webhook delivery is nudged.
    """
    if method not in PAYMENT_METHODS:
        raise invalid({"metodo": [f"must be one of {', '.join(PAYMENT_METHODS)}"]})
    if transaction_id is not None and not 1 <= len(transaction_id) <= 255:
        raise invalid({"transaction_id": ["must be 1 to 255 characters"]})
    value = parse_amount(amount)
    when = to_utc_naive(paid_at) if paid_at is not None else utcnow()
    with atomic():
        debt = _lock_debt(tenant_id, debt_external_id)
        if transaction_id is not None:
            existing = Payment.get_or_none((Payment.tenant == tenant_id) & (Payment.transaction_id == transaction_id))
            if existing is not None:
                if existing.debt_id != debt.id or existing.monto != _minor(value, debt.moneda):
                    raise Conflict(f"transaction {transaction_id} was already recorded with another amount or debt",
                                   code="payment_transaction_conflict", details={"transaction_id": transaction_id})
                return existing
        _check_payable(debt, debt.moneda)
        payment, _allocations = _apply_payment(debt, amount=_minor(value, debt.moneda), currency=debt.moneda,
                                               method=method, paid_at=when, origin="service",
                                               transaction_id=transaction_id)
        emit(tenant_id, "debt.payment_received", payment_event_data(payment, debt))
        export_payment(payment)  # numbered for the ERP's export in the same transaction
    return payment


# -- resolution and overdue ---------------------------------------------------------------------

def resolve_debt(tenant_id: int, external_id: str, status: str, reason: str | None = None) -> Debt:
    """Mark a debt paid, cancelled or written off: its open installments are cancelled, and so are
    the reminders they had still to get, so collection stops. Resolving as `paid` clears the
    balance. A resolution sticks: later syncs update the data but not the status."""
    if status not in RESOLUTIONS:
        raise invalid({"status": [f"must be one of {', '.join(RESOLUTIONS)}"]})
    with atomic():
        debt = _lock_debt(tenant_id, external_id)
        schedule = installments_of(debt)
        cancel_reminders(debt.id, [item.id for item in schedule if item.status in OPEN_INSTALLMENT])
        debt.resolution = status
        debt.resolution_reason = reason
        debt.resolved_at = utcnow()
        debt.updated_at = debt.resolved_at
        if status == "paid":
            debt.saldo_pendiente = 0
        for item in restate(debt, schedule, tenant_today(tenant_id)):
            item.save(only=[Installment.status, Installment.declared_status])
        debt.save(only=[Debt.resolution, Debt.resolution_reason, Debt.resolved_at, Debt.saldo_pendiente,
                        Debt.status, Debt.updated_at])
        stop_collection([debt.id])
    return debt


def refresh_overdue(now: dt.datetime | None = None) -> int:
    """Move open installments past due (in each tenant's day) to `overdue`, and their debts with them.

    Idempotent; run hourly so that every tenant's midnight is picked up within the hour, and the
    same rule runs on every write. Returns the installments that changed.
    """
    changed = 0
    zones: dict[str, list[int]] = {}
    for tenant_id, timezone in Tenant.select(Tenant.id, Tenant.timezone).tuples():
        zones.setdefault(timezone or "UTC", []).append(tenant_id)
    moment = (now or utcnow()).replace(tzinfo=dt.UTC)
    for timezone, tenant_ids in zones.items():
        today = moment.astimezone(zone_of(timezone)).date()
        with atomic():
            open_debts = Debt.select(Debt.id).where(Debt.tenant.in_(tenant_ids) & Debt.status.in_(OPEN_DEBT))
            changed += (Installment.update(status="overdue")
                        .where(Installment.status.in_(("pending", "partial")) & (Installment.vence < today)
                               & Installment.debt.in_(open_debts)).execute())
            has_overdue = fn.EXISTS(Installment.select(Installment.id).where(
                (Installment.debt == Debt.id) & (Installment.status == "overdue")))
            (Debt.update(status="overdue", updated_at=utcnow())
             .where(Debt.tenant.in_(tenant_ids) & Debt.status.in_(("pending", "partial"))
                    & Debt.resolution.is_null() & (Debt.saldo_pendiente > 0) & has_overdue)
             .execute())
    return changed


def open_debts_of_phone(tenant_id: int, phone: str) -> list[str]:
    """The external ids of the open debts of the tenant's debtor with this phone (digits): a
    message from that user, by phone or by a business-scoped id linked to it, concerns them."""
    query = (Debt.select(Debt.external_id).join(Debtor)
             .where((Debt.tenant == tenant_id) & (Debtor.tenant == tenant_id) & (Debtor.telefono == phone)
                    & Debt.status.in_(OPEN_DEBT))
             .order_by(Debt.external_id))
    return [row.external_id for row in query]
