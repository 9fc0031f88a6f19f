"""What the calendar decides about a debt besides reminders: a promise broken, a plan exhausted.

Run at the start of every collection run (collection.py), in each company's day:

- `debt.promise_broken`: a promise (promises.py) whose day has passed while its debt is still
  open with a balance (a partial payment does not keep it) is marked `broken` and reported, once:
  the conditional UPDATE `active → broken` lets one run win. From then on the debt is reminded
  again by its plan. A promise whose debt was paid or resolved is left alone.
- `debt.escalated`: when the last step of a debt's plan was sent (its reminder handed to a
  campaign and not withdrawn) on an earlier day than today and the debt is still open with a
  balance, the plan has nothing left to try: the debt is recorded in `debt_escalation` (one row
  per debt, a unique key) and reported once, for that debt, whatever installments it has. Only
  plans with `escalar` escalate; the fixed schedule does not.
"""

from __future__ import annotations

import datetime as dt

from peewee import fn

from models.clock import isoformat, utcnow
from models.events.outbox import emit
from models.receivables import dunning_plans
from models.receivables.debts import zone_of
from models.receivables.money import amount_json
from models.receivables.tables import OPEN_DEBT, Debt, DebtEscalation, DebtPromise, Reminder
from models.store.db import atomic
from models.tenancy.tables import Tenant


def follow_up(now: dt.datetime | None = None) -> tuple[int, int]:
    """Report the promises broken and the debts escalated as of `now` (naive UTC); returns how
    many of each were reported by this call."""
    moment = (now or utcnow()).replace(tzinfo=dt.UTC)
    zones: dict[str, list[int]] = {}
    for tenant_id, timezone in Tenant.select(Tenant.id, Tenant.timezone).where(Tenant.status == "active").tuples():
        zones.setdefault(timezone or "UTC", []).append(tenant_id)
    broken = escalated = 0
    for timezone, tenant_ids in zones.items():
        zone = zone_of(timezone)
        today = moment.astimezone(zone).date()
        day_start = dt.datetime.combine(today, dt.time(), zone).astimezone(dt.UTC).replace(tzinfo=None)
        broken += _break_promises(tenant_ids, today)
        escalated += _escalate(tenant_ids, day_start)
    return broken, escalated


def _still_owed():
    return Debt.status.in_(OPEN_DEBT) & Debt.resolution.is_null() & (Debt.saldo_pendiente > 0)


def _break_promises(tenant_ids: list[int], today: dt.date) -> int:
    rows = list(DebtPromise.select(DebtPromise.id, DebtPromise.promised_date, Debt.tenant, Debt.external_id,
                                   Debt.saldo_pendiente, Debt.moneda)
                .join(Debt)
                .where(Debt.tenant.in_(tenant_ids) & (DebtPromise.status == "active")
                       & (DebtPromise.promised_date < today) & _still_owed())
                .tuples())
    reported = 0
    for promise_id, promised_date, tenant_id, external_id, balance, currency in rows:
        with atomic():
            won = (DebtPromise.update(status="broken")
                   .where((DebtPromise.id == promise_id) & (DebtPromise.status == "active")).execute())
            if won:
                emit(tenant_id, "debt.promise_broken", {
                    "deuda_external_id": external_id, "promised_date": promised_date.isoformat(),
                    "saldo_pendiente": amount_json(balance, currency), "moneda": currency})
                reported += 1
    return reported


def _escalate(tenant_ids: list[int], day_start: dt.datetime) -> int:
    plans = dunning_plans.plans_of(tenant_ids)
    # Only companies with a plan that escalates are looked at: the default plan never does.
    tenant_ids = [tenant_id for tenant_id, found in plans.items() if any(plan.escalate for plan in found)]
    last_stages = {plan.last_stage for tenant_id in tenant_ids for plan in plans[tenant_id] if plan.escalate}
    if not last_stages:
        return 0
    escalated = DebtEscalation.select(DebtEscalation.id).where(DebtEscalation.debt == Debt.id)
    rows = list(Reminder.select(Debt.id, Debt.tenant, Debt.external_id, Debt.saldo_pendiente, Debt.moneda,
                                Debt.monto_original, Reminder.stage, Reminder.created_at)
                .join(Debt)
                .where(Debt.tenant.in_(tenant_ids) & Reminder.stage.in_(sorted(last_stages))
                       & (Reminder.status == "queued") & Reminder.campaign_id.is_null(False)
                       & (Reminder.created_at < day_start) & _still_owed() & ~fn.EXISTS(escalated))
                .order_by(Reminder.created_at)
                .tuples())
    reported = 0
    for debt_id, tenant_id, external_id, balance, currency, original, stage, sent_at in rows:
        plan = dunning_plans.choose(plans[tenant_id], currency, original)
        if not plan.escalate or plan.last_stage != stage:
            continue
        with atomic():
            won = (DebtEscalation.insert(tenant=tenant_id, debt=debt_id, plan_public_id=plan.public_id, stage=stage,
                                         created_at=utcnow())
                   .on_conflict_ignore().as_rowcount().execute())
            if won:
                emit(tenant_id, "debt.escalated", {
                    "deuda_external_id": external_id, "plan_id": plan.public_id,
                    "dias": plan.steps[-1].days, "last_reminder_at": isoformat(sent_at),
                    "saldo_pendiente": amount_json(balance, currency), "moneda": currency})
                reported += 1
    return reported
