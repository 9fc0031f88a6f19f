"""Receivables (section 4, `/cartera`): debt sync from the ERP, payments, resolution.

Every write requires an Idempotency-Key (`receivables=True`). Bodies are parsed with exact
decimals (models.receivables.inputs), and the handlers call the same domain operations as
`svcctl cartera import`, so the API and the importer cannot disagree on a rule.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import Field

from api.errors import validation_error
from api.operation import Reply, ok, operation
from api.payments import EXPORT_QUERY, ExportMeta, ExportPage, PaymentLinkItem, export_page, export_query
from api.schemas import Output, Success
from models.clock import to_utc_naive
from models.errors import DomainError
from models.receivables import debt_reads, debts, responses, snapshots
from models.receivables.inputs import (
    DebtBatchInput,
    DebtInput,
    PaymentInput,
    ResolveInput,
    debt_spec,
    parse_debt,
    payment_spec,
)
from models.receivables.report import report_of
from models.store.db import outlast_outage

TAGS = ("cartera",)
WRITE_ERRORS = (401, 403, 404, 409, 422, 429)


class DebtSummary(Output):
    external_id: str
    saldo_pendiente: float
    status: str
    external_version: int | None


class DebtWritten(Output):
    action: str
    deuda: DebtSummary


class BatchSummary(Output):
    created: int
    updated: int
    ignored_stale: int
    errors: int


class BatchError(Output):
    code: str
    message: str
    details: dict[str, Any]


class BatchItem(Output):
    external_id: str | None
    success: bool
    action: str | None = None
    error: BatchError | None = None


class BatchWritten(Output):
    summary: BatchSummary
    results: list[BatchItem]


class Allocation(Output):
    cuota_external_id: str
    numero: int
    monto: float


class PaymentItem(Output):
    external_id: str | None
    boty_payment_id: str | None
    origin: str
    monto: float
    moneda: str
    metodo: str
    pagado_en: str
    asignaciones: list[Allocation]


class InstallmentItem(Output):
    external_id: str
    numero: int
    monto: float
    vence: str
    estado: str


class DebtorItem(Output):
    nombre: str
    documento: str | None
    telefono: str | None


class DebtDetail(Output):
    external_id: str
    account_id: str
    deudor: DebtorItem
    moneda: str
    referencia: str | None
    monto_original: float
    saldo_pendiente: float
    status: str
    tipo: str
    auto_send: bool
    external_version: int | None
    external_updated_at: str | None
    cuotas: list[InstallmentItem]
    pagos: list[PaymentItem]
    links_de_pago: list[PaymentLinkItem]


class DebtRead(Output):
    deuda: DebtDetail


class PaymentApplied(Output):
    external_id: str
    deuda_external_id: str
    monto: float
    asignaciones: list[Allocation]


class PaymentWritten(Output):
    action: str
    pago: PaymentApplied
    saldo_pendiente: float
    monto_sin_asignar: float


class ResolvedDebt(Output):
    external_id: str
    saldo_pendiente: float
    status: str


class DebtResolved(Output):
    deuda: ResolvedDebt


# An ERP write that another writer's locks made PostgreSQL roll back (a deadlock's victim) is
# written again, whole, rather than answered 503; so is one that met the storage restarting,
# for as long as a client would wait for an answer (docs/reliability.md, "Lock order").
WRITE_AGAIN_SECONDS = 5.0


def _error_body(error: DomainError) -> dict:
    return {"code": error.code, "message": error.message, "details": error.details}


class DebtsResource:
    @operation("Create or update a debt from the ERP", scope="cartera:write", body=DebtInput, receivables=True,
               responses={200: Success[DebtWritten], 201: Success[DebtWritten]}, errors=WRITE_ERRORS, tags=TAGS,
               description="201 when created, 200 when updated. A snapshot older than the stored one "
                           "(lower external_version, else older external_updated_at) is not applied: 200 with "
                           "action `ignored_stale` and the stored state.")
    def on_post(self, req, resp) -> Reply:
        spec = debt_spec(req.context.body)
        result = outlast_outage(lambda: snapshots.upsert_debt(req.context.tenant_id, spec),
                                seconds=WRITE_AGAIN_SECONDS, what=f"the debt {spec.external_id}")
        return ok({"action": result.action, "deuda": result.debt.summary()},
                  status=201 if result.action == "created" else 200)


class DebtBatchResource:
    @operation("Create or update up to 500 debts", scope="cartera:write", body=DebtBatchInput, receivables=True,
               responses={200: Success[BatchWritten]}, errors=(401, 403, 409, 422, 429), tags=TAGS,
               description="Each element succeeds or fails on its own: valid elements are saved even when "
                           "others fail. A failed element reads {external_id, success: false, error: "
                           "{code, message, details}}.")
    def on_post(self, req, resp) -> Reply:
        elements = req.context.body.debts
        results: list[dict | None] = [None] * len(elements)
        specs, positions = [], []
        for index, element in enumerate(elements):
            try:
                specs.append(parse_debt(element))
                positions.append(index)
            except DomainError as error:
                external_id = element.get("external_id") if isinstance(element, dict) else None
                results[index] = {"external_id": external_id if isinstance(external_id, str) else None,
                                  "success": False, "error": _error_body(error)}
        written = outlast_outage(lambda: snapshots.upsert_debts(req.context.tenant_id, specs),
                                 seconds=WRITE_AGAIN_SECONDS, what=f"a batch of {len(specs)} debts")
        for index, outcome in zip(positions, written, strict=True):
            if outcome.error is not None:
                results[index] = {"external_id": outcome.external_id, "success": False,
                                  "error": _error_body(outcome.error)}
            else:
                results[index] = {"external_id": outcome.external_id, "success": True, "action": outcome.action}
        summary = {"created": 0, "updated": 0, "ignored_stale": 0, "errors": 0}
        for item in results:
            summary[item["action"] if item["success"] else "errors"] += 1
        return ok({"summary": summary, "results": results})


class DebtResource:
    @operation("Read a debt with its debtor, installments and payments", scope="cartera:read",
               responses={200: Success[DebtRead]}, errors=(401, 403, 404, 429), tags=TAGS)
    def on_get(self, req, resp, external_id: str) -> Reply:
        return ok({"deuda": debt_reads.read_debt(req.context.tenant_id, external_id)})


class PaymentsResource:
    @operation("Record a payment the ERP received", scope="cartera:write", body=PaymentInput, receivables=True,
               responses={200: Success[PaymentWritten], 201: Success[PaymentWritten]}, errors=WRITE_ERRORS,
               tags=TAGS,
               description="Applied once per external_id, first-in-first-out over the open installments. "
                           "201 with action `applied`; the same payment again: 200 with action "
                           "`already_applied` and the original result. No webhook is sent for it.")
    def on_post(self, req, resp) -> Reply:
        result = debts.record_erp_payment(req.context.tenant_id, payment_spec(req.context.body))
        return ok(result.as_dict(), status=201 if result.action == "applied" else 200)

    @operation("List the payments and reversals made in the service, for the ERP", scope="cartera:read",
               responses={200: ExportPage}, errors=(401, 403, 422, 429), query=EXPORT_QUERY, tags=TAGS,
               description="Gateway and manual payments recorded by the service, and the refunds and chargebacks "
                           "that reversed them (`tipo` `reverso`, negative `monto`), oldest first. Pass "
                           "`meta.next_cursor` back as `cursor` to get only what is new; `svcctl cartera payments "
                           "export` gives the same rows as CSV or JSON Lines.")
    def on_get(self, req, resp) -> Reply:
        return export_page(req)


class ResponseItem(Output):
    cursor: int
    tipo: str = Field(description="`promesa` (a promise to pay by `promised_date`), `disputa` (with `reason`) or "
                                  "`pago_informado` (the debtor says they paid: check it in your books)")
    origin: str = Field(description="`page` (the debtor's page) or `whatsapp` (a reminder's quick reply)")
    deuda_external_id: str
    promised_date: str | None = Field(description="`YYYY-MM-DD`: a promise's day")
    reason: str | None = Field(description="a dispute's reason")
    saldo_pendiente: float = Field(description="the debt's balance now")
    moneda: str
    registrado_en: str


class ResponsesPage(Output):
    success: bool = True
    data: list[ResponseItem]
    meta: ExportMeta


class ResponsesResource:
    @operation("List what debtors said: promises, disputes and payments they claim, for the ERP",
               scope="cartera:read", responses={200: ResponsesPage}, errors=(401, 403, 422, 429), query=EXPORT_QUERY,
               tags=TAGS,
               description="Promises and disputes made on the debtor's page or with a reminder's quick reply, and the "
                           "payments debtors say they made (`pago_informado`: nothing is paid until you record it), "
                           "oldest first. Pass `meta.next_cursor` back as `cursor` to get only what is new; "
                           "`svcctl cartera responses export` gives the same rows as CSV or JSON Lines.")
    def on_get(self, req, resp) -> Reply:
        since, cursor, limit = export_query(req)
        rows = responses.response_page(req.context.tenant_id, since=since, after=cursor, limit=limit + 1)
        page = rows[:limit]
        next_cursor = page[-1]["cursor"] if page else cursor
        return Reply(200, {"success": True, "data": page, "meta": {"next_cursor": next_cursor,
                                                                    "has_more": len(rows) > len(page)}})


class ResolveResource:
    @operation("Resolve a debt: paid, cancelled or written off", scope="cartera:write", body=ResolveInput,
               receivables=True, responses={200: Success[DebtResolved]}, errors=WRITE_ERRORS, tags=TAGS,
               description="Cancels the open installments and their pending reminders; collection stops.")
    def on_post(self, req, resp, external_id: str) -> Reply:
        body = req.context.body
        debt = debts.resolve_debt(req.context.tenant_id, external_id, body.status, body.reason)
        summary = debt.summary()
        return ok({"deuda": {key: summary[key] for key in ("external_id", "saldo_pendiente", "status")}})


class Recovered(Output):
    currency: str
    amount: float


class FunnelCounts(Output):
    reminded: int
    delivered: int
    read: int
    opened: int
    promised: int
    disputed: int
    paid: int
    recovered: list[Recovered]


class StepRow(FunnelCounts):
    step: str
    offset_days: int | None


class CampaignRow(FunnelCounts):
    campaign_id: str


class AgingRow(Output):
    currency: str
    current: float
    days_1_30: float
    days_31_60: float
    days_61_90: float
    days_over_90: float
    total: float


class DsoRow(Output):
    currency: str
    receivables: float
    credit_sales: float
    days: float | None


class CollectionReport(Output):
    tenant: str
    since: str | None
    until: str | None
    as_of: str
    attribution_days: int
    steps: list[StepRow]
    campaigns: list[CampaignRow]
    aging: list[AgingRow]
    dso: list[DsoRow]


REPORT_QUERY = (
    ("since", {"type": "string", "format": "date-time"}, "only reminders sent at or after this time"),
    ("until", {"type": "string", "format": "date-time"}, "only reminders sent before this time"),
)


def report_period(req) -> tuple[dt.datetime | None, dt.datetime | None]:
    """The report's `since` and `until` (naive UTC), or a validation error naming the bad one."""
    found: dict[str, dt.datetime | None] = {}
    errors: dict[str, list[str]] = {}
    for name in ("since", "until"):
        raw = req.get_param(name)
        found[name] = None
        if raw is None:
            continue
        try:
            moment = dt.datetime.fromisoformat(raw)
        except ValueError:
            moment = None
        if moment is None or moment.tzinfo is None:
            errors[name] = ["must be an ISO 8601 date-time with an offset"]
        else:
            found[name] = to_utc_naive(moment)
    if not errors and found["since"] and found["until"] and found["since"] >= found["until"]:
        errors["until"] = ["must be after since"]
    if errors:
        raise validation_error(errors)
    return found["since"], found["until"]


class ReportResource:
    @operation("What the reminders recovered: the funnel per step and campaign, aging and DSO",
               scope="cartera:read", responses={200: Success[CollectionReport]}, errors=(401, 403, 422, 429),
               query=REPORT_QUERY, tags=TAGS,
               description="Per reminder step and per collection campaign: reminders sent, delivered, read, and "
                           "those followed by a page opening, a promise, a dispute or a payment, with the amount "
                           "recovered per currency. An event counts for the last reminder its debtor received in "
                           "the 7 days before it. Aging buckets (days past due) and DSO (open receivables / the "
                           "last 90 days' credit sales x 90) per currency. `svcctl cartera report --json` gives "
                           "the same figures.")
    def on_get(self, req, resp) -> Reply:
        since, until = report_period(req)
        return ok(report_of(req.context.tenant_id, since, until).as_dict())


ROUTES = [
    ("/cartera/reporte", ReportResource()),
    ("/cartera/deudas", DebtsResource()),
    ("/cartera/deudas/lote", DebtBatchResource()),
    ("/cartera/deudas/{external_id}", DebtResource()),
    ("/cartera/pagos", PaymentsResource()),
    ("/cartera/respuestas", ResponsesResource()),
    ("/cartera/deudas/{external_id}/resolver", ResolveResource()),
]
