"""What the reminders recovered: a company's collection report (docs/receivables.md).

- The funnel, per reminder step (the `stage` stored on the reminder, so any plan's step takes
  its own row) and per collection campaign: reminders sent, delivered, read, and how many of
  them led to a page opening, a promise, a dispute and a payment, with the amount recovered by
  currency. A reminder is one message: a message that reminds of installments in two steps
  counts once in each step's row and once in its campaign's.
- Attribution: a page opening, promise, dispute or payment counts for the last reminder its
  debtor received (sent_at) within ATTRIBUTION_WINDOW before it, and for no other; a reminder
  counts at most once per kind of event. A payment counts with its whole amount.
- Aging: what the open installments still owe, by currency, in buckets of days past due on the
  company's calendar day.
- DSO (days sales outstanding), per currency: open receivables / credit sales of the last
  DSO_DAYS days x DSO_DAYS, where credit sales are the original amounts of the debts that
  entered the service in those days; None without such sales.

Everything is counted by SQL aggregates, one statement per figure and company.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from models.clock import utcnow
from models.receivables.debts import local_day, tenant_today
from models.receivables.money import amount_json
from models.receivables.tables import OPEN_DEBT, OPEN_INSTALLMENT, STAGES
from models.store.db import bound_datetime, execute, fetch_one, is_postgres
from models.tenancy.tables import Tenant

ATTRIBUTION_DAYS = 7
ATTRIBUTION_WINDOW = dt.timedelta(days=ATTRIBUTION_DAYS)
DSO_DAYS = 90
# (bucket, the fewest days past due in it), in order; `current` is not past due yet.
AGING_BUCKETS = (("current", None), ("days_1_30", 1), ("days_31_60", 31), ("days_61_90", 61), ("days_over_90", 91))
FUNNEL = ("reminded", "delivered", "read", "opened", "promised", "disputed", "paid")
STAGE_OFFSETS = dict(STAGES)


@dataclass
class FunnelRow:
    key: str  # the step's name, or the campaign's public id
    offset: int | None = None  # a step's days from the due date, when known
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FUNNEL, 0))
    recovered: dict[str, int] = field(default_factory=dict)  # currency -> minor units

    def as_dict(self, key_name: str) -> dict:
        row = {key_name: self.key}
        if key_name == "step":
            row["offset_days"] = self.offset
        return {**row, **self.counts,
                "recovered": [{"currency": currency, "amount": amount_json(amount, currency)}
                              for currency, amount in sorted(self.recovered.items())]}


@dataclass
class Report:
    tenant: str  # the company's public id
    since: dt.datetime | None
    until: dt.datetime | None
    today: dt.date
    steps: list[FunnelRow]
    campaigns: list[FunnelRow]
    aging: dict[str, dict[str, int]]  # currency -> bucket -> minor units
    dso: dict[str, dict]  # currency -> receivables, credit sales, days

    def as_dict(self) -> dict:
        return {
            "tenant": self.tenant,
            "since": _iso(self.since), "until": _iso(self.until), "as_of": self.today.isoformat(),
            "attribution_days": ATTRIBUTION_DAYS,
            "steps": [row.as_dict("step") for row in self.steps],
            "campaigns": [row.as_dict("campaign_id") for row in self.campaigns],
            "aging": [{"currency": currency, **{bucket: amount_json(amount, currency)
                                                for bucket, amount in buckets.items()},
                       "total": amount_json(sum(buckets.values()), currency)}
                      for currency, buckets in sorted(self.aging.items())],
            "dso": [{"currency": currency, "receivables": amount_json(item["receivables"], currency),
                     "credit_sales": amount_json(item["credit_sales"], currency), "days": item["days"]}
                    for currency, item in sorted(self.dso.items())],
        }


def _iso(moment: dt.datetime | None) -> str | None:
    return None if moment is None else moment.replace(tzinfo=dt.UTC).isoformat().replace("+00:00", "Z")


def report(tenant: Tenant, since: dt.datetime | None = None, until: dt.datetime | None = None,
           now: dt.datetime | None = None) -> Report:
    """The company's report: reminders sent in [since, until) (naive UTC; open ends when None),
    and aging and DSO as of `now`."""
    now = now or utcnow()
    return _report(tenant.id, tenant.public_id, tenant_today(tenant.id, now), since, until, now)


def report_of(tenant_id: int, since: dt.datetime | None = None, until: dt.datetime | None = None) -> Report:
    """`report` for the company of this id (GET /cartera/reporte), whose public id and time zone
    come from one statement written once: building the company's model through peewee cost as
    much as the report's own statements."""
    public_id, timezone = fetch_one('SELECT "public_id", "timezone" FROM "tenant" WHERE "id" = ?', (tenant_id,))
    now = utcnow()
    return _report(tenant_id, public_id, local_day(timezone, now), since, until, now)


def _report(tenant_id: int, public_id: str, today: dt.date, since: dt.datetime | None, until: dt.datetime | None,
            now: dt.datetime) -> Report:
    return Report(public_id, since, until, today,
                  steps=_funnel(tenant_id, "stage", since, until),
                  campaigns=_funnel(tenant_id, "campaign", since, until),
                  aging=aging(tenant_id, today), dso=dso(tenant_id, now))


# -- the funnel ---------------------------------------------------------------------------------

def _within_window(sent: str, at: str) -> str:
    """SQL: `sent` is at most ATTRIBUTION_DAYS before `at` (engines spell date arithmetic apart)."""
    if is_postgres():
        return f"{sent} >= {at} - INTERVAL '{ATTRIBUTION_DAYS} days'"
    return f"julianday({sent}) >= julianday({at}) - {ATTRIBUTION_DAYS}"


# Every reminder message sent to the company's debtors, with its step and campaign: a reminder
# row names its campaign, whose recipient for the debt is the message.
_SENT = """
SELECT DISTINCT cr."id" AS message, r."stage" AS stage, c."public_id" AS campaign, d."debtor_id" AS debtor,
       cr."sent_at" AS sent_at, cr."delivered_at" AS delivered_at, cr."read_at" AS read_at
FROM "debt_reminder" r
JOIN "debt" d ON d."id" = r."debt_id"
JOIN "campaign" c ON c."public_id" = r."campaign_id"
JOIN "campaign_recipient" cr ON cr."campaign_id" = c."id" AND cr."external_contact_id" = d."external_id"
WHERE d."tenant_id" = ? AND c."tenant_id" = ? AND cr."sent_at" IS NOT NULL
"""

# What a debtor did after a reminder, each row one event with its time.
_EVENTS = """
SELECT 'opened' AS kind, o."id" AS event, o."debtor_id" AS debtor, o."opened_at" AS at,
       0 AS amount, NULL AS currency
FROM "debtor_page_open" o WHERE o."tenant_id" = ?
UNION ALL
SELECT 'promised', p."id", d."debtor_id", p."created_at", 0, NULL
FROM "debt_promise" p JOIN "debt" d ON d."id" = p."debt_id" WHERE p."tenant_id" = ?
UNION ALL
SELECT 'disputed', x."id", d."debtor_id", x."created_at", 0, NULL
FROM "debt_dispute" x JOIN "debt" d ON d."id" = x."debt_id" WHERE x."tenant_id" = ?
UNION ALL
SELECT 'paid', y."id", d."debtor_id", y."pagado_en", y."monto", y."moneda"
FROM "debt_payment" y JOIN "debt" d ON d."id" = y."debt_id" WHERE y."tenant_id" = ?
"""


def _attribution_sql(key: str, since: dt.datetime | None, until: dt.datetime | None) -> str:
    """The WITH clause: `credited`, each event with the one message it counts for (the debtor's
    last before it, within the window, among all their reminders, not only the period's), and
    `period`, the messages sent in [since, until) with `key` (stage or campaign) as `grp`."""
    window = _within_window("m.sent_at", "e.at")
    bounds = [condition for condition, moment in (("sent_at >= ?", since), ("sent_at < ?", until)) if moment]
    return f"""
WITH sent AS ({_SENT}),
messages AS (SELECT DISTINCT message, debtor, sent_at FROM sent),
events AS ({_EVENTS}),
ranked AS (
  SELECT e.kind AS kind, e.amount AS amount, e.currency AS currency, m.message AS message,
         ROW_NUMBER() OVER (PARTITION BY e.kind, e.event ORDER BY m.sent_at DESC, m.message DESC) AS place
  FROM events e JOIN messages m ON m.debtor = e.debtor AND m.sent_at <= e.at AND {window}
),
credited AS (SELECT kind, amount, currency, message FROM ranked WHERE place = 1),
period AS (
  SELECT DISTINCT {key} AS grp, message, delivered_at, read_at FROM sent
  {"WHERE " + " AND ".join(bounds) if bounds else ""}
)"""


def _funnel(tenant_id: int, key: str, since: dt.datetime | None, until: dt.datetime | None) -> list[FunnelRow]:
    head = _attribution_sql(key, since, until)
    params: list = [tenant_id, tenant_id] + [tenant_id] * 4 + [bound_datetime(moment) for moment in (since, until)
                                                                if moment]
    counted = {kind: f"COUNT(DISTINCT CASE WHEN k.kind = '{kind}' THEN p.message END)"
               for kind in ("opened", "promised", "disputed", "paid")}
    rows = execute(f"""{head}
SELECT p.grp, COUNT(DISTINCT p.message),
       COUNT(DISTINCT CASE WHEN p.delivered_at IS NOT NULL OR p.read_at IS NOT NULL THEN p.message END),
       COUNT(DISTINCT CASE WHEN p.read_at IS NOT NULL THEN p.message END),
       {counted['opened']}, {counted['promised']}, {counted['disputed']}, {counted['paid']}
FROM period p LEFT JOIN credited k ON k.message = p.message
GROUP BY p.grp""", params).fetchall()
    found: dict[str, FunnelRow] = {}
    for grp, *counts in rows:
        found[grp] = FunnelRow(grp, STAGE_OFFSETS.get(grp) if key == "stage" else None,
                               dict(zip(FUNNEL, (int(count) for count in counts), strict=True)))
    recovered = execute(f"""{head}
SELECT p.grp, k.currency, SUM(k.amount)
FROM (SELECT DISTINCT grp, message FROM period) p JOIN credited k ON k.message = p.message AND k.kind = 'paid'
GROUP BY p.grp, k.currency""", params).fetchall()
    for grp, currency, amount in recovered:
        found[grp].recovered[currency] = int(amount)
    if key == "stage":
        order = {stage: index for index, (stage, _offset) in enumerate(STAGES)}
        return sorted(found.values(), key=lambda row: (row.offset is None, row.offset or 0,
                                                       order.get(row.key, 0), row.key))
    return sorted(found.values(), key=lambda row: row.key)


# -- aging and DSO ------------------------------------------------------------------------------

def aging(tenant_id: int, today: dt.date) -> dict[str, dict[str, int]]:
    """What the company's open installments still owe, by currency and bucket of days past due."""
    cases, params = [], []
    for bucket, fewest in AGING_BUCKETS[:-1]:
        # Due on or after this day: at most its bucket's days past due.
        latest_days = 0 if fewest is None else (fewest + 29)
        cases.append(f"WHEN i.\"vence\" >= ? THEN '{bucket}'")
        params.append(today - dt.timedelta(days=latest_days))
    open_debt = ", ".join("?" * len(OPEN_DEBT))
    open_installment = ", ".join("?" * len(OPEN_INSTALLMENT))
    rows = execute(f"""
SELECT d."moneda", CASE {' '.join(cases)} ELSE '{AGING_BUCKETS[-1][0]}' END AS bucket,
       SUM(i."monto" - i."amount_paid")
FROM "debt_installment" i JOIN "debt" d ON d."id" = i."debt_id"
WHERE d."tenant_id" = ? AND d."status" IN ({open_debt}) AND d."resolution" IS NULL
  AND i."status" IN ({open_installment}) AND i."monto" > i."amount_paid"
GROUP BY d."moneda", bucket""", [*params, tenant_id, *OPEN_DEBT, *OPEN_INSTALLMENT]).fetchall()
    found: dict[str, dict[str, int]] = {}
    for currency, bucket, amount in rows:
        found.setdefault(currency, dict.fromkeys((name for name, _ in AGING_BUCKETS), 0))[bucket] = int(amount)
    return found


def dso(tenant_id: int, now: dt.datetime) -> dict[str, dict]:
    """Per currency: open receivables, credit sales of the last DSO_DAYS days, and DSO in days
    (one decimal), or None when there were no such sales."""
    open_debt = ", ".join("?" * len(OPEN_DEBT))
    receivables = dict(execute(f"""
SELECT "moneda", SUM("saldo_pendiente") FROM "debt"
WHERE "tenant_id" = ? AND "status" IN ({open_debt}) AND "resolution" IS NULL GROUP BY "moneda" """,
                               [tenant_id, *OPEN_DEBT]).fetchall())
    sales = dict(execute("""
SELECT "moneda", SUM("monto_original") FROM "debt"
WHERE "tenant_id" = ? AND "created_at" > ? AND "created_at" <= ? GROUP BY "moneda" """,
                         [tenant_id, bound_datetime(now - dt.timedelta(days=DSO_DAYS)),
                          bound_datetime(now)]).fetchall())
    found = {}
    for currency in sorted(set(receivables) | set(sales)):
        owed, sold = int(receivables.get(currency) or 0), int(sales.get(currency) or 0)
        found[currency] = {"receivables": owed, "credit_sales": sold,
                           "days": round(owed / sold * DSO_DAYS, 1) if sold else None}
    return found
