"""What a debtor says about a debt, on their page or with a reminder's quick reply: a promise to
pay it by a date, or a dispute. One operation each, whoever calls it.

- A promise names a day after today (the company's day) and at most PROMISE_MAX_DAYS ahead; a
  later promise on the same debt replaces the active one (the same day again changes nothing).
  Until the promised day has passed, collection sends the debt no reminder (collection.py).
- A dispute carries the debtor's reason (1 to 500 characters); a debt has at most one open
  dispute, and collection sends it no reminder until the company resolves it.

Each one recorded writes its event (`debt.promise_made`, `debt.disputed`) and its line of the
ERP's feed (responses.py) in the same transaction.
"""

from __future__ import annotations

import datetime as dt

from models.clock import isoformat, utcnow
from models.errors import Conflict, Invalid
from models.events.outbox import emit
from models.receivables.debts import get_debt, tenant_today
from models.receivables.money import amount_json
from models.receivables.responses import export_response
from models.receivables.tables import Debt, DebtDispute, DebtPromise
from models.store.db import atomic

PROMISE_MAX_DAYS = 30
MAX_REASON = 500
ORIGINS = ("page", "whatsapp")


def promise(debt: Debt, promised_date: dt.date, today: dt.date | None = None, origin: str = "page") -> DebtPromise:
    """Record the debtor's promise to pay `debt` by `promised_date`."""
    today = today or tenant_today(debt.tenant_id)
    if not today < promised_date <= today + dt.timedelta(days=PROMISE_MAX_DAYS):
        raise Invalid(f"the date must be after today and at most {PROMISE_MAX_DAYS} days ahead",
                      code="promise_date_out_of_range", details={"max_days": PROMISE_MAX_DAYS})
    with atomic():
        # The debt's row first, so two promises sent at once are taken one after the other.
        Debt.update(row_version=Debt.row_version + 1).where(Debt.id == debt.id).execute()
        active = DebtPromise.get_or_none((DebtPromise.debt == debt.id) & (DebtPromise.status == "active"))
        if active is not None and active.promised_date == promised_date:
            return active
        if active is not None:
            DebtPromise.update(status="replaced").where(DebtPromise.id == active.id).execute()
        made = DebtPromise.create(tenant=debt.tenant_id, debt=debt.id, promised_date=promised_date,
                                  created_at=utcnow())
        emit(debt.tenant_id, "debt.promise_made", {
            "deuda_external_id": debt.external_id, "promised_date": promised_date.isoformat(),
            "amount": amount_json(debt.saldo_pendiente, debt.moneda), "moneda": debt.moneda, "origin": origin})
        export_response(debt, origin, promise_id=made.id)
        return made


def dispute(debt: Debt, reason: str, origin: str = "page") -> DebtDispute:
    """Record the debtor's dispute of `debt`; one open dispute a debt."""
    reason = reason.strip()
    if not 1 <= len(reason) <= MAX_REASON:
        raise Invalid(f"the reason is 1 to {MAX_REASON} characters", code="dispute_reason_invalid",
                      details={"max": MAX_REASON})
    with atomic():
        # The debt's row first, so two disputes sent at once cannot both find none open.
        Debt.update(row_version=Debt.row_version + 1).where(Debt.id == debt.id).execute()
        if DebtDispute.select().where((DebtDispute.debt == debt.id) & (DebtDispute.status == "open")).exists():
            raise Conflict("this debt is disputed already", code="debt_already_disputed")
        made = DebtDispute.create(tenant=debt.tenant_id, debt=debt.id, reason=reason, created_at=utcnow())
        emit(debt.tenant_id, "debt.disputed", {"deuda_external_id": debt.external_id, "reason": reason,
                                               "origin": origin})
        export_response(debt, origin, dispute_id=made.id)
        return made


def standing(debt_ids: list[int]) -> dict[int, dict]:
    """The active promise and the open dispute of each debt: debt id -> {promise, dispute}."""
    found: dict[int, dict] = {debt_id: {"promise": None, "dispute": None} for debt_id in debt_ids}
    if not debt_ids:
        return found
    for row in DebtPromise.select().where(DebtPromise.debt.in_(debt_ids) & (DebtPromise.status == "active")):
        found[row.debt_id]["promise"] = row.promised_date
    for row in DebtDispute.select().where(DebtDispute.debt.in_(debt_ids) & (DebtDispute.status == "open")):
        found[row.debt_id]["dispute"] = row.reason
    return found


def resolve_dispute(tenant_id: int, external_id: str) -> DebtDispute:
    """The company has dealt with the debt's open dispute: it is `resolved`, and collection
    reminds the debt again from its plan's current step. 409 `debt_not_disputed` without one."""
    debt = get_debt(tenant_id, external_id)
    with atomic():
        Debt.update(row_version=Debt.row_version + 1).where(Debt.id == debt.id).execute()
        dispute = DebtDispute.get_or_none((DebtDispute.debt == debt.id) & (DebtDispute.status == "open"))
        if dispute is None:
            raise Conflict("this debt has no open dispute", code="debt_not_disputed",
                           details={"external_id": external_id})
        dispute.status, dispute.resolved_at = "resolved", utcnow()
        dispute.save()
        return dispute


def dispute_detail(debt_external_id: str, dispute: DebtDispute) -> dict:
    return {"deuda_external_id": debt_external_id, "reason": dispute.reason, "status": dispute.status,
            "created_at": isoformat(dispute.created_at), "resolved_at": isoformat(dispute.resolved_at)}
