"""Collection: payment reminders for debts with `auto_send`, through the debt's own number.

Each debt follows its company's dunning plan for its segment (dunning_plans.py): the plan's
steps, templates, sending window, weekly cap and pauses; a run first reports the promises broken
and the plans exhausted (dunning_events.py). The default plan, for a debt no plan matches, is
the fixed schedule (docs/receivables.md), per open installment, in the tenant's calendar day:

| stage    | from                | until                       |
|----------|---------------------|-----------------------------|
| `before` | 3 days before `vence` | the day before            |
| `due`    | on `vence`          | 2 days after                |
| `after`  | 3 days after `vence` | while the installment stays open |

Only the stage the day falls in is sent (a debt synced late does not get a stale `before`), and
the reminders table's unique (installment, stage) key means no stage is ever sent twice. Sends
happen only inside the sending window (settings.quiet_hours_start to quiet_hours_end, default
08:00-20:00, in the tenant's time zone). Installments of one debt due the same run share one
message. Reminders go out as campaigns of the `payment_reminder` template (vars: the debtor's
name and the outstanding balance with its currency), one campaign per number and run, so they
reserve and consume credits like any message. A company with a payment gateway whose number has
`payment_reminder_link` sends that one instead: the same words, and a "Pay now" URL button that
opens the debtor's page (debtor_links.py), where the debtor sees and pays their debts. A debt
that settles takes its reminders back (reminders.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass

from peewee import fn

from config import get_settings
from models.clock import utcnow
from models.errors import DomainError
from models.numbers.tables import MessagingAccount
from models.receivables import dunning_plans
from models.receivables.debtor_links import reminder_buttons
from models.receivables.debts import zone_of
from models.receivables.dunning_events import follow_up
from models.receivables.money import format_amount
from models.receivables.payments import LINK_TEMPLATE
from models.receivables.replies import reminder_buttons as quick_reply_buttons
from models.receivables.tables import (
    OPEN_DEBT,
    OPEN_INSTALLMENT,
    Debt,
    DebtDispute,
    Debtor,
    DebtPromise,
    Installment,
    Reminder,
)
from models.sending import work_arrived
from models.sending.campaign_inputs import MAX_RECIPIENTS
from models.sending.campaigns import create_campaign
from models.store.db import atomic, fetch_one, is_postgres
from models.tenancy.tables import Tenant

log = logging.getLogger("receivables.collection")

TEMPLATE_NAME = "payment_reminder"
TEMPLATE_LANGUAGE = "es"


def stage_for(due_date: dt.date, today: dt.date) -> str | None:
    """The fixed schedule's stage an installment due on `due_date` is in on `today`, or None
    before the first (a company without dunning plans)."""
    step = dunning_plans.DEFAULT.step_for(due_date, today)
    return step.stage if step else None


def in_sending_window(local: dt.time, start: tuple[int, int], end: tuple[int, int]) -> bool:
    """Whether `local` is inside [start, end); a window whose end is before its start spans midnight.

    A window with start == end is the whole day (no quiet hours).
    """
    now = local.hour * 60 + local.minute
    first, last = start[0] * 60 + start[1], end[0] * 60 + end[1]
    if first == last:
        return True
    if first < last:
        return first <= now < last
    return now >= first or now < last


@dataclass(frozen=True)
class DueReminder:
    tenant_id: int
    account_public_id: str
    debt_id: int
    debt_external_id: str
    installment_id: int
    installment_external_id: str
    stage: str
    wa_id: str
    debtor_name: str
    balance: int  # minor units
    currency: str
    debtor_id: int = 0
    template: str = TEMPLATE_NAME
    language: str = TEMPLATE_LANGUAGE
    plan_id: str | None = None  # the dunning plan's dpl_ id; None: the fixed schedule


def due_reminders(now: dt.datetime | None = None, settings=None) -> list[DueReminder]:
    """Every reminder due at `now` (naive UTC): open installments of open `auto_send` debts whose
    debtor has a phone, in their plan's current step not yet recorded, inside that plan's sending
    window, neither paused (a promise, a dispute) nor over the debtor's weekly cap."""
    settings = settings or get_settings()
    moment = (now or utcnow()).replace(tzinfo=dt.UTC)
    zones: dict[str, list[int]] = {}
    for tenant_id, timezone in Tenant.select(Tenant.id, Tenant.timezone).where(Tenant.status == "active").tuples():
        zones.setdefault(timezone or "UTC", []).append(tenant_id)
    due: list[DueReminder] = []
    for timezone, tenant_ids in zones.items():
        zone = zone_of(timezone)
        local = moment.astimezone(zone)
        plans = dunning_plans.plans_of(tenant_ids)
        installation = (settings.quiet_hours_start, settings.quiet_hours_end)

        def sending(plan, time=local.time(), installation=installation):
            return in_sending_window(time, *(plan.quiet_hours or installation))
        awake = [tenant_id for tenant_id in tenant_ids
                 if any(sending(plan) for plan in plans[tenant_id] or [dunning_plans.DEFAULT])]
        if awake:
            week_start = dt.datetime.combine(local.date() - dt.timedelta(days=6), dt.time(), zone)
            due.extend(_due_for(awake, plans, sending, local.date(), week_start.astimezone(dt.UTC)
                                .replace(tzinfo=None)))
    return due


def _due_for(tenant_ids: list[int], plans: dict, sending, today: dt.date, week_start: dt.datetime
             ) -> list[DueReminder]:
    # An installment whose last step was recorded is done: when every plan of these tenants ends
    # on the same stage, the query leaves those out (the long tail of old open installments).
    last_stages = {plan.last_stage for tenant_id in tenant_ids for plan in plans[tenant_id] or [dunning_plans.DEFAULT]}
    lookahead = max(plan.lookahead for tenant_id in tenant_ids for plan in plans[tenant_id] or [dunning_plans.DEFAULT])
    # What the debtor said on their page (promises.py): a promise pauses reminders until its day
    # has passed, a dispute until the company resolves it (when the debt's plan says so).
    promised = fn.EXISTS(DebtPromise.select(DebtPromise.id).where(
        (DebtPromise.debt == Debt.id) & (DebtPromise.status == "active") & (DebtPromise.promised_date >= today)))
    disputed = fn.EXISTS(DebtDispute.select(DebtDispute.id).where(
        (DebtDispute.debt == Debt.id) & (DebtDispute.status == "open")))
    condition = (Debt.tenant.in_(tenant_ids) & (Debt.auto_send == True)  # noqa: E712
                 & Debt.status.in_(OPEN_DEBT) & Debt.resolution.is_null() & (Debt.saldo_pendiente > 0)
                 & Installment.status.in_(OPEN_INSTALLMENT)
                 & (Installment.vence <= today + dt.timedelta(days=lookahead)) & Debtor.telefono.is_null(False))
    if len(last_stages) == 1:
        condition &= ~fn.EXISTS(Reminder.select(Reminder.id).where(
            (Reminder.installment == Installment.id) & (Reminder.stage == next(iter(last_stages)))))
    query = (Installment
             .select(Installment.id, Installment.external_id, Installment.vence, Debt.id, Debt.external_id,
                     Debt.tenant, Debt.saldo_pendiente, Debt.moneda, Debt.monto_original, Debtor.id, Debtor.nombre,
                     Debtor.telefono, MessagingAccount.public_id, promised.alias("promised"),
                     disputed.alias("disputed"))
             .join(Debt).join(Debtor).switch(Debt).join(MessagingAccount)
             .where(condition)
             .order_by(Debt.id, Installment.vence, Installment.numero)
             .tuples())
    candidates = []
    for (installment_id, installment_external_id, due_date, debt_id, debt_external_id, tenant_id, balance, currency,
         original, debtor_id, name, phone, account_public_id, is_promised, is_disputed) in query:
        plan = dunning_plans.choose(plans[tenant_id], currency, original)
        if (is_promised and plan.pause_on_promise) or (is_disputed and plan.pause_on_dispute) or not sending(plan):
            continue
        step = plan.step_for(due_date, today)
        if step is not None:
            candidates.append(DueReminder(tenant_id, account_public_id, debt_id, debt_external_id, installment_id,
                                          installment_external_id, step.stage, phone, name, balance, currency,
                                          debtor_id, step.template, step.language, plan.public_id))
    recorded: set[tuple[int, str]] = set()
    ids = [item.installment_id for item in candidates]
    for start in range(0, len(ids), 500):
        recorded.update(Reminder.select(Reminder.installment, Reminder.stage)
                        .where(Reminder.installment.in_(ids[start:start + 500])).tuples())
    fresh = [item for item in candidates if (item.installment_id, item.stage) not in recorded]
    return _within_weekly_caps(fresh, plans, week_start)


def _within_weekly_caps(due: list[DueReminder], plans: dict, week_start: dt.datetime) -> list[DueReminder]:
    """Leave out the debts whose debtor already got their plan's weekly cap of reminders.

    A week is the company's day and the six before it. A reminder is one message: one debt's
    recipient in one campaign, whatever installments it covers; a withdrawn one does not count.
    Debts of one debtor are taken oldest first until the cap is reached.
    """
    capped = {item.debtor_id for item in due if _plan_cap(plans, item) is not None}
    if not capped:
        return due
    sent: dict[int, int] = {}
    debtor_ids = sorted(capped)
    for start in range(0, len(debtor_ids), 500):
        for debtor_id, _debt, _campaign in (
                Reminder.select(Debt.debtor, Reminder.debt, Reminder.campaign_id).join(Debt)
                .where(Debt.debtor.in_(debtor_ids[start:start + 500]) & (Reminder.status == "queued")
                       & Reminder.campaign_id.is_null(False) & (Reminder.created_at >= week_start))
                .distinct().tuples()):
            sent[debtor_id] = sent.get(debtor_id, 0) + 1
    kept = []
    debts_taken: dict[int, set[int]] = {}
    for item in due:
        cap = _plan_cap(plans, item)
        debts = debts_taken.setdefault(item.debtor_id, set())
        if cap is not None and item.debt_id not in debts and sent.get(item.debtor_id, 0) + len(debts) >= cap:
            continue
        debts.add(item.debt_id)
        kept.append(item)
    return kept


def _plan_cap(plans: dict, item: DueReminder) -> int | None:
    for plan in plans[item.tenant_id]:
        if plan.public_id == item.plan_id:
            return plan.weekly_cap
    return None


def recipient_for(reminders: list[DueReminder]) -> dict:
    """One recipient per debt: the template's variables and what the reminder covers."""
    first = reminders[0]
    return {
        "wa_id": first.wa_id,
        "external_contact_id": first.debt_external_id,
        "vars": [first.debtor_name, format_amount(first.balance, first.currency)],
        "payload": {"deuda_external_id": first.debt_external_id,
                    "recordatorios": [{"cuota_external_id": item.installment_external_id, "stage": item.stage}
                                      for item in reminders]},
    }


def send_due_reminders(now: dt.datetime | None = None) -> list[str]:
    """Hand every due reminder to a campaign; returns the campaigns created (their public ids).

    Per (tenant, number), in one transaction: claim the reminders (insert their rows; the unique
    key drops any another run already took), create the campaign for the debts claimed, and
    stamp the rows with it. A refusal (no credits, number paused) undoes the claim, so those
    reminders are tried again on the next run. Creating a campaign wakes the sending engine
    once its transaction commits (`models.sending.work_arrived`).
    """
    follow_up(now)
    due = due_reminders(now)
    groups: dict[tuple[int, str, str, str], dict[int, list[DueReminder]]] = {}
    for item in due:
        key = (item.tenant_id, item.account_public_id, item.template, item.language)
        groups.setdefault(key, {}).setdefault(item.debt_id, []).append(item)
    created = []
    for (tenant_id, account_public_id, template, language), by_debt in groups.items():
        debts = list(by_debt.items())
        # One recipient per debt, and a campaign takes at most MAX_RECIPIENTS.
        for start in range(0, len(debts), MAX_RECIPIENTS):
            chunk = dict(debts[start:start + MAX_RECIPIENTS])
            try:
                with atomic():
                    campaign = _claim_and_create(tenant_id, account_public_id, template, language, chunk, now)
            except DomainError as error:
                log.warning("collection reminders for %s not sent now (%s): %s", account_public_id, error.code,
                            error.message)
                break
            if campaign is not None:
                work_arrived()
                created.append(campaign.public_id)
    return created


# The first key of the company's collection lock (the second is the tenant's id): "coll".
COLLECTION_LOCK = 0x636F6C6C


def _lock_company_collection(tenant_id: int) -> None:
    """Two collection runs claim one company's reminders one after the other (docs/reliability.md,
    "Lock order"): the lock is held until the claim commits, so the run that waited counts the
    other's reminders against the weekly cap. SQLite's `BEGIN IMMEDIATE` already admits one
    writer at a time."""
    if is_postgres():
        fetch_one("SELECT pg_advisory_xact_lock(?, ?)", (COLLECTION_LOCK, tenant_id))


def _still_within_caps(tenant_id: int, by_debt: dict[int, list[DueReminder]], now: dt.datetime
                       ) -> dict[int, list[DueReminder]]:
    """The debts of `by_debt` the weekly cap still allows, counted again under the company's
    collection lock: another run may have reminded the same debtors since `due_reminders` read."""
    plans = dunning_plans.plans_of([tenant_id])
    if not any(plan.weekly_cap for plan in plans[tenant_id]):
        return by_debt
    timezone = Tenant.get_by_id(tenant_id).timezone or "UTC"
    zone = zone_of(timezone)
    local = now.replace(tzinfo=dt.UTC).astimezone(zone)
    week_start = dt.datetime.combine(local.date() - dt.timedelta(days=6), dt.time(), zone)
    items = [item for items in by_debt.values() for item in items]
    kept = _within_weekly_caps(items, plans, week_start.astimezone(dt.UTC).replace(tzinfo=None))
    allowed = {item.debt_id for item in kept}
    return {debt_id: items for debt_id, items in by_debt.items() if debt_id in allowed}


def _claim_and_create(tenant_id: int, account_public_id: str, template: str, language: str,
                      by_debt: dict[int, list[DueReminder]], now: dt.datetime | None):
    token = "claim_" + uuid.uuid4().hex[:24]
    now = now or utcnow()
    _lock_company_collection(tenant_id)
    by_debt = _still_within_caps(tenant_id, by_debt, now)
    if not by_debt:
        return None
    rows = [{"debt": item.debt_id, "installment": item.installment_id, "stage": item.stage, "status": "queued",
             "campaign_id": token, "created_at": now} for items in by_debt.values() for item in items]
    for start in range(0, len(rows), 500):
        Reminder.insert_many(rows[start:start + 500]).on_conflict_ignore().as_rowcount().execute()
    ours = set(Reminder.select(Reminder.installment, Reminder.stage).where(Reminder.campaign_id == token).tuples())
    recipients, balances = [], {}
    for debt_id, items in by_debt.items():
        claimed = [item for item in items if (item.installment_id, item.stage) in ours]
        if claimed:
            recipients.append(recipient_for(claimed))
            balances[debt_id] = (claimed[0].balance, claimed[0].currency)
    if not recipients:
        return None
    # With a payment gateway, the declared reminder's URL button opens the debtor's page
    # (debtor_links.py); a company's own template is sent as it is (dunning_plans.py).
    links = reminder_buttons(tenant_id, account_public_id, list(balances)) if template == TEMPLATE_NAME else {}
    template_name = LINK_TEMPLATE if links else template
    template_language = TEMPLATE_LANGUAGE if links else language
    # The template's quick replies (replies.py) name the debt in their payloads.
    account = MessagingAccount.get((MessagingAccount.tenant == tenant_id)
                                   & (MessagingAccount.public_id == account_public_id))
    presses = quick_reply_buttons(account, template_name, template_language,
                                  {debt_id: recipient["external_contact_id"]
                                   for recipient, debt_id in zip(recipients, balances, strict=True)})
    for recipient, debt_id in zip(recipients, balances, strict=True):
        buttons = links.get(debt_id, []) + presses.get(debt_id, [])
        if buttons:
            recipient["buttons"] = buttons
    local_day = now.date().isoformat()
    spec = {"account_id": account_public_id, "template_name": template_name,
            "language": template_language,
            "recipients": recipients, "external_reference": f"cobranza {local_day}"}
    campaign = create_campaign(tenant_id, spec, source="collection")
    Reminder.update(campaign_id=campaign.public_id).where(Reminder.campaign_id == token).execute()
    return campaign


