"""Dunning plans: each company's collection schedule (docs/receivables.md, "Dunning plans").

A plan has steps relative to an installment's due date (`days`: −3, 0, +3, +10, +30…), each
with its template and language; its sending window (quiet hours); the most reminders a debtor
gets in a week; whether a promise and a dispute pause it; and whether it escalates
(`debt.escalated`) once its last step has gone unpaid.

A plan applies to a segment of the company's debts: a currency, and within it an amount band of
`monto_original` (debts carry no ERP tags). The most specific plan that matches a debt wins:
currency and band, else currency alone, else the company's plan with no segment, else DEFAULT,
today's fixed schedule. Plans of one level never overlap (refused with 409
`plan_segment_conflict`), so exactly one plan wins.

A step's reminder stage (the reminders table's key, with the installment) is named after its
days: −3, 0 and +3 keep the names of the fixed schedule (`before`, `due`, `after`), so a debt
moving to a plan with those steps is not reminded twice; any other step is `d+10`, `d-7`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated

from pydantic import Field, StringConstraints, ValidationError

from models.clock import isoformat, stored_isoformat, utcnow
from models.errors import Conflict, NotFound
from models.ids import new_id
from models.numbers.tables import MessagingAccount, Template
from models.receivables.inputs import ExactInput, NonNegativeAmount, error_map, invalid
from models.receivables.money import MoneyError, amount_json, normalize_currency, to_minor
from models.receivables.tables import STAGES, DunningPlan
from models.sending.sendable import template_buttons
from models.store.db import atomic, execute, fetch_one, lock_rows
from models.tenancy.tables import Tenant

DECLARED_TEMPLATE = "payment_reminder"
DEFAULT_LANGUAGE = "es"
MAX_STEPS = 12
MIN_DAYS, MAX_DAYS = -60, 365
MAX_WEEKLY_CAP = 50
TEMPLATE_VARIABLES = 2  # the debtor's name, the balance with its currency
_FIXED_NAMES = {days: stage for stage, days in STAGES}
_HOUR = r"^([01]\d|2[0-3]):[0-5]\d$|^24:00$"


def stage_name(days: int) -> str:
    return _FIXED_NAMES.get(days, f"d{days:+d}")


@dataclass(frozen=True)
class Step:
    days: int
    template: str
    language: str

    @property
    def stage(self) -> str:
        return stage_name(self.days)


@dataclass(frozen=True)
class Plan:
    """A plan as collection uses it; `public_id` None is DEFAULT."""

    public_id: str | None
    steps: tuple[Step, ...]
    quiet_hours: tuple[tuple[int, int], tuple[int, int]] | None  # None: the installation's setting
    weekly_cap: int | None
    pause_on_promise: bool = True
    pause_on_dispute: bool = True
    escalate: bool = False
    currency: str | None = None
    amount_from: int | None = None
    amount_to: int | None = None

    @property
    def last_stage(self) -> str:
        return self.steps[-1].stage

    def step_for(self, due_date: dt.date, today: dt.date) -> Step | None:
        """The step whose days `today` falls in (from its day until the next step's), or None
        before the first: only that step is sent, never a stale earlier one."""
        offset = (today - due_date).days
        current = None
        for step in self.steps:
            if offset >= step.days:
                current = step
        return current

    @property
    def lookahead(self) -> int:
        return max(0, -self.steps[0].days)

    def matches(self, currency: str, amount: int) -> bool:
        if self.currency is not None and self.currency != currency:
            return False
        if self.amount_from is not None and amount < self.amount_from:
            return False
        return not (self.amount_to is not None and amount >= self.amount_to)

    @property
    def specificity(self) -> int:
        return (self.currency is not None) + (self.amount_from is not None or self.amount_to is not None)


# Today's fixed schedule, what a company without plans gets: no cap, no escalation.
DEFAULT = Plan(None, tuple(Step(days, DECLARED_TEMPLATE, DEFAULT_LANGUAGE) for _stage, days in STAGES),
               None, None)


def choose(plans: list[Plan], currency: str, amount: int) -> Plan:
    """The most specific plan matching a debt (its currency, its `monto_original`), else DEFAULT."""
    best = DEFAULT
    for plan in plans:
        if plan.matches(currency, amount) and (best is DEFAULT or plan.specificity > best.specificity):
            best = plan
    return best


def _hour(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    hours, minutes = text.split(":")
    return int(hours), int(minutes)


def as_plan(row: DunningPlan) -> Plan:
    window = None
    if row.quiet_hours_start is not None:
        window = (_hour(row.quiet_hours_start), _hour(row.quiet_hours_end))
    return Plan(row.public_id, tuple(Step(s["days"], s["template"], s["language"]) for s in row.steps), window,
                row.weekly_cap, row.pause_on_promise, row.pause_on_dispute, row.escalate, row.currency,
                row.amount_from, row.amount_to)


def plans_of(tenant_ids: list[int]) -> dict[int, list[Plan]]:
    found: dict[int, list[Plan]] = {tenant_id: [] for tenant_id in tenant_ids}
    for start in range(0, len(tenant_ids), 500):
        for row in DunningPlan.select().where(DunningPlan.tenant.in_(tenant_ids[start:start + 500])):
            found[row.tenant_id].append(as_plan(row))
    return found


# -- input ------------------------------------------------------------------------------------

Hour = Annotated[str, StringConstraints(pattern=_HOUR)]


class StepInput(ExactInput):
    days: int = Field(alias="dias", ge=MIN_DAYS, le=MAX_DAYS, description="days from the due date (−3: 3 days before)")
    template: Annotated[str, StringConstraints(min_length=1, max_length=512)] = Field(
        DECLARED_TEMPLATE, alias="plantilla",
        description="`payment_reminder` (the declared reminder) or one of the company's approved templates")
    language: Annotated[str, StringConstraints(min_length=2, max_length=20)] = Field(DEFAULT_LANGUAGE, alias="idioma")


class PlanInput(ExactInput):
    name: Annotated[str, StringConstraints(min_length=1, max_length=100, strip_whitespace=True)] = Field(
        alias="nombre")
    currency: Annotated[str, StringConstraints(min_length=3, max_length=3)] | None = Field(None, alias="moneda")
    amount_from: NonNegativeAmount | None = Field(None, alias="monto_desde", description="inclusive; needs `moneda`")
    amount_to: NonNegativeAmount | None = Field(None, alias="monto_hasta", description="exclusive; needs `moneda`")
    steps: list[StepInput] = Field(alias="pasos", min_length=1, max_length=MAX_STEPS)
    quiet_hours_start: Hour | None = Field(None, alias="horario_desde", description="HH:MM, the company's time")
    quiet_hours_end: Hour | None = Field(None, alias="horario_hasta", description="HH:MM, the company's time")
    weekly_cap: int | None = Field(None, alias="maximo_semanal", ge=1, le=MAX_WEEKLY_CAP)
    pause_on_promise: bool = Field(True, alias="pausa_por_promesa")
    pause_on_dispute: bool = Field(True, alias="pausa_por_disputa")
    escalate: bool = Field(True, alias="escalar")


def parse_plan(obj) -> PlanInput:
    try:
        return obj if isinstance(obj, PlanInput) else PlanInput.model_validate(obj)
    except ValidationError as error:
        raise invalid(error_map(error)) from None


def _fields(tenant_id: int, data: PlanInput) -> dict:
    """The columns of a valid plan; raises `Invalid` naming every field that is wrong."""
    errors: dict[str, list[str]] = {}
    currency = None
    if data.currency is not None:
        try:
            currency = normalize_currency(data.currency)
        except MoneyError as error:
            errors["moneda"] = [str(error)]
    bounds: dict[str, int | None] = {"monto_desde": None, "monto_hasta": None}
    for key, amount in (("monto_desde", data.amount_from), ("monto_hasta", data.amount_to)):
        if amount is None:
            continue
        if data.currency is None:
            errors[key] = ["an amount band needs `moneda`"]
        elif currency is not None:
            try:
                bounds[key] = to_minor(Decimal(amount), currency)
            except MoneyError as error:
                errors[key] = [str(error)]
    if None not in bounds.values() and bounds["monto_desde"] >= bounds["monto_hasta"]:
        errors["monto_hasta"] = ["must be more than monto_desde"]
    if (data.quiet_hours_start is None) != (data.quiet_hours_end is None):
        errors["horario_hasta" if data.quiet_hours_end is None else "horario_desde"] = [
            "horario_desde and horario_hasta go together"]
    seen: set[int] = set()
    for index, step in enumerate(data.steps):
        if step.days in seen:
            errors.setdefault(f"pasos.{index}.dias", []).append("two steps on the same day")
        seen.add(step.days)
        problem = template_problem(tenant_id, step.template, step.language)
        if problem:
            errors.setdefault(f"pasos.{index}.plantilla", []).append(problem)
    if errors:
        raise invalid(errors)
    steps = sorted(data.steps, key=lambda step: step.days)
    return {"name": data.name, "currency": currency, "amount_from": bounds["monto_desde"],
            "amount_to": bounds["monto_hasta"],
            "steps": [{"days": s.days, "template": s.template, "language": s.language} for s in steps],
            "quiet_hours_start": data.quiet_hours_start, "quiet_hours_end": data.quiet_hours_end,
            "weekly_cap": data.weekly_cap, "pause_on_promise": data.pause_on_promise,
            "pause_on_dispute": data.pause_on_dispute, "escalate": data.escalate}


def template_problem(tenant_id: int, name: str, language: str) -> str | None:
    """Why a step cannot send `name` in `language`, or None. The declared reminder is always
    fine (collection sends it as today); a company's own template must be approved on one of its
    numbers in that language, take the reminder's two variables and need no URL suffix."""
    if name == DECLARED_TEMPLATE:
        return None
    found = list(Template.select().join(MessagingAccount)
                 .where((MessagingAccount.tenant == tenant_id) & (Template.name == name)
                        & (Template.language == language) & (Template.status == "approved") & Template.active))
    if not found:
        return f"no approved template {name} in {language} on the company's numbers"
    if all(template.variable_count != TEMPLATE_VARIABLES for template in found):
        return f"the template must take {TEMPLATE_VARIABLES} variables: the debtor's name and the balance"
    if all(any(str(button.get("url", "")).endswith("{{1}}") for button in template_buttons(template))
           for template in found):
        return "the template has a URL button that needs a suffix; only payment_reminder carries the debtor's page"
    return None


def _overlaps(first: DunningPlan | dict, second: DunningPlan) -> bool:
    get = (lambda row, key: row[key]) if isinstance(first, dict) else getattr
    if get(first, "currency") != second.currency:
        return False
    banded = get(first, "amount_from") is not None or get(first, "amount_to") is not None
    other_banded = second.amount_from is not None or second.amount_to is not None
    if banded != other_banded:
        return False
    if not banded:
        return True
    low = max(get(first, "amount_from") or 0, second.amount_from or 0)
    high = min(x for x in (get(first, "amount_to"), second.amount_to, 10**20) if x is not None)
    return low < high


def _check_segment(tenant_id: int, fields: dict, exclude: int | None = None) -> None:
    query = DunningPlan.select().where(DunningPlan.tenant == tenant_id)
    if exclude is not None:
        query = query.where(DunningPlan.id != exclude)
    for other in query:
        if other.name == fields["name"]:
            raise Conflict(f"a plan named {fields['name']} exists", code="plan_name_taken",
                           details={"plan_id": other.public_id})
        if _overlaps(fields, other):
            raise Conflict(f"the plan {other.name} already covers this segment", code="plan_segment_conflict",
                           details={"plan_id": other.public_id})


def _lock_plans(tenant_id: int) -> None:
    # Two writes at once must not both find the segment free: they queue on the tenant's row.
    lock_rows(Tenant, [tenant_id])


def create_plan(tenant_id: int, body) -> DunningPlan:
    fields = _fields(tenant_id, parse_plan(body))
    with atomic():
        _lock_plans(tenant_id)
        _check_segment(tenant_id, fields)
        now = utcnow()
        return DunningPlan.create(public_id=new_id("dpl_"), tenant=tenant_id, created_at=now, updated_at=now,
                                  **fields)


def update_plan(tenant_id: int, public_id: str, body) -> DunningPlan:
    """Replace a plan's fields with the body's (a whole plan, as on create)."""
    fields = _fields(tenant_id, parse_plan(body))
    with atomic():
        _lock_plans(tenant_id)
        plan = get_plan(tenant_id, public_id)
        _check_segment(tenant_id, fields, exclude=plan.id)
        DunningPlan.update(updated_at=utcnow(), **fields).where(DunningPlan.id == plan.id).execute()
        return DunningPlan.get_by_id(plan.id)


def delete_plan(tenant_id: int, public_id: str) -> None:
    plan = get_plan(tenant_id, public_id)
    DunningPlan.delete().where(DunningPlan.id == plan.id).execute()


def get_plan(tenant_id: int, public_id: str) -> DunningPlan:
    plan = DunningPlan.get_or_none((DunningPlan.tenant == tenant_id) & (DunningPlan.public_id == public_id))
    if plan is None:
        raise NotFound(f"no plan {public_id}", code="plan_not_found")
    return plan


def list_plans(tenant_id: int) -> list[DunningPlan]:
    return list(DunningPlan.select().where(DunningPlan.tenant == tenant_id).order_by(DunningPlan.id))


def plan_detail(plan: DunningPlan) -> dict:
    """The wire shape of a plan."""
    def amount(minor):
        return None if minor is None else amount_json(minor, plan.currency)
    return {"id": plan.public_id, "nombre": plan.name, "moneda": plan.currency,
            "monto_desde": amount(plan.amount_from), "monto_hasta": amount(plan.amount_to),
            "pasos": [{"dias": s["days"], "plantilla": s["template"], "idioma": s["language"],
                       "etapa": stage_name(s["days"])} for s in plan.steps],
            "horario_desde": plan.quiet_hours_start, "horario_hasta": plan.quiet_hours_end,
            "maximo_semanal": plan.weekly_cap, "pausa_por_promesa": plan.pause_on_promise,
            "pausa_por_disputa": plan.pause_on_dispute, "escalar": plan.escalate,
            "created_at": isoformat(plan.created_at), "updated_at": isoformat(plan.updated_at)}


# The API's reads of plans, written by hand: peewee built the query's SQL and a model object per
# row on every read, more than the database's work. The same rows and order, each as
# `plan_detail` gives it (tests/test_dunning_plans_reads.py).
_PLAN_COLUMNS = ('SELECT "public_id", "name", "currency", "amount_from", "amount_to", "steps", "quiet_hours_start", '
                 '"quiet_hours_end", "weekly_cap", "pause_on_promise", "pause_on_dispute", "escalate", "created_at", '
                 '"updated_at" FROM "dunning_plan" WHERE "tenant_id" = ?')
_PLANS = _PLAN_COLUMNS + ' ORDER BY "id"'
_PLAN = _PLAN_COLUMNS + ' AND "public_id" = ?'
_STEPS = DunningPlan.steps.python_value


def read_plans(tenant_id: int) -> list[dict]:
    """The company's plans as GET /cartera/planes lists them, oldest first."""
    return [_plan_json(row) for row in execute(_PLANS, (tenant_id,)).fetchall()]


def read_plan(tenant_id: int, public_id: str) -> dict:
    """The company's plan `public_id` as GET /cartera/planes/{id} shows it; 404 `plan_not_found`."""
    row = fetch_one(_PLAN, (tenant_id, public_id))
    if row is None:
        raise NotFound(f"no plan {public_id}", code="plan_not_found")
    return _plan_json(row)


def _plan_json(row: tuple) -> dict:
    (public_id, name, currency, amount_from, amount_to, steps, quiet_start, quiet_end, weekly_cap, pause_on_promise,
     pause_on_dispute, escalate, created_at, updated_at) = row
    return {"id": public_id, "nombre": name, "moneda": currency,
            "monto_desde": None if amount_from is None else amount_json(amount_from, currency),
            "monto_hasta": None if amount_to is None else amount_json(amount_to, currency),
            "pasos": [{"dias": s["days"], "plantilla": s["template"], "idioma": s["language"],
                       "etapa": stage_name(s["days"])} for s in _STEPS(steps)],
            "horario_desde": quiet_start, "horario_hasta": quiet_end, "maximo_semanal": weekly_cap,
            "pausa_por_promesa": bool(pause_on_promise), "pausa_por_disputa": bool(pause_on_dispute),
            "escalar": bool(escalate), "created_at": stored_isoformat(created_at),
            "updated_at": stored_isoformat(updated_at)}
