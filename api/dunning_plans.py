"""Dunning plans (a `/cartera` extension, docs/receivables.md "Dunning plans"): each company's
collection schedule per segment, and the company resolving a debtor's dispute.

Writes require an Idempotency-Key like every `/cartera` write (`receivables=True`).
"""

from __future__ import annotations

from api.operation import Reply, ok, operation
from api.schemas import Output, Success
from models.receivables import dunning_plans, promises
from models.receivables.dunning_plans import PlanInput

TAGS = ("cartera",)
WRITE_ERRORS = (401, 403, 404, 409, 422, 429)


class PlanStep(Output):
    dias: int
    plantilla: str
    idioma: str
    etapa: str


class PlanItem(Output):
    id: str
    nombre: str
    moneda: str | None
    monto_desde: float | None
    monto_hasta: float | None
    pasos: list[PlanStep]
    horario_desde: str | None
    horario_hasta: str | None
    maximo_semanal: int | None
    pausa_por_promesa: bool
    pausa_por_disputa: bool
    escalar: bool
    created_at: str
    updated_at: str


class PlanList(Output):
    planes: list[PlanItem]


class PlanDeleted(Output):
    id: str
    deleted: bool


class ResolvedDispute(Output):
    deuda_external_id: str
    reason: str
    status: str
    created_at: str
    resolved_at: str | None


PLAN_RULES = ("Steps are days from each installment's due date (−60 to 365, one step a day), each with "
              "`payment_reminder` or one of the company's approved templates with the reminder's two "
              "variables. A band (`monto_desde` inclusive, `monto_hasta` exclusive, on `monto_original`) "
              "needs `moneda`. The most specific plan wins: currency and band, currency, no segment, then "
              "the fixed schedule. 409 `plan_segment_conflict` when another plan covers an overlapping "
              "segment of the same level, 409 `plan_name_taken`.")


class PlansResource:
    @operation("List the company's dunning plans", scope="cartera:read", responses={200: Success[PlanList]},
               errors=(401, 403, 429), tags=TAGS)
    def on_get(self, req, resp) -> Reply:
        return ok({"planes": dunning_plans.read_plans(req.context.tenant_id)})

    @operation("Create a dunning plan", scope="cartera:write", body=PlanInput, receivables=True,
               responses={201: Success[PlanItem]}, errors=WRITE_ERRORS, tags=TAGS, description=PLAN_RULES)
    def on_post(self, req, resp) -> Reply:
        plan = dunning_plans.create_plan(req.context.tenant_id, req.context.body)
        return ok(dunning_plans.plan_detail(plan), status=201)


class PlanResource:
    @operation("Read a dunning plan", scope="cartera:read", responses={200: Success[PlanItem]},
               errors=(401, 403, 404, 429), tags=TAGS)
    def on_get(self, req, resp, plan_id: str) -> Reply:
        return ok(dunning_plans.read_plan(req.context.tenant_id, plan_id))

    @operation("Replace a dunning plan", scope="cartera:write", body=PlanInput, receivables=True,
               responses={200: Success[PlanItem]}, errors=WRITE_ERRORS, tags=TAGS,
               description="The body is a whole plan, as on create. " + PLAN_RULES)
    def on_put(self, req, resp, plan_id: str) -> Reply:
        plan = dunning_plans.update_plan(req.context.tenant_id, plan_id, req.context.body)
        return ok(dunning_plans.plan_detail(plan))

    @operation("Delete a dunning plan", scope="cartera:write", receivables=True,
               responses={200: Success[PlanDeleted]}, errors=WRITE_ERRORS, tags=TAGS,
               description="Its debts follow the next most specific plan from the next collection run. 409 "
                           "`idempotency_key_conflict` when the Idempotency-Key was used with another request.")
    def on_delete(self, req, resp, plan_id: str) -> Reply:
        dunning_plans.delete_plan(req.context.tenant_id, plan_id)
        return ok({"id": plan_id, "deleted": True})


class DisputeResolveResource:
    @operation("Resolve the debtor's open dispute of a debt", scope="cartera:write", receivables=True,
               responses={200: Success[ResolvedDispute]}, errors=WRITE_ERRORS, tags=TAGS,
               description="Collection reminds the debt again from its plan's current step. 409 "
                           "`debt_not_disputed` when the debt has no open dispute.")
    def on_post(self, req, resp, external_id: str) -> Reply:
        dispute = promises.resolve_dispute(req.context.tenant_id, external_id)
        return ok(promises.dispute_detail(external_id, dispute))


ROUTES = [
    ("/cartera/planes", PlansResource()),
    ("/cartera/planes/{plan_id}", PlanResource()),
    ("/cartera/deudas/{external_id}/disputa/resolver", DisputeResolveResource()),
]
