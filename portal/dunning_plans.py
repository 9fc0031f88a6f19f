"""Dunning plans in the portal: the company's plans listed, one created from a form or deleted
(owners and whoever may manage receivables), and a debt's open dispute resolved."""

from __future__ import annotations

from urllib.parse import urlencode

from config.i18n import N_
from models.receivables import dunning_plans, promises
from models.store.db import atomic
from portal.errors import CHECK_THE_FORM
from portal.web import BASE, Refused, audit, ctx, form, page, redirect, render


def _segment(plan: dict) -> dict:
    return {**plan, "banded": plan["monto_desde"] is not None or plan["monto_hasta"] is not None}


class Plans:
    @page()
    def on_get(self, req, resp):
        plans = [_segment(dunning_plans.plan_detail(plan)) for plan in dunning_plans.list_plans(ctx(req).tenant_id)]
        render(req, resp, "plans.html", plans=plans, default=dunning_plans.DEFAULT)

    @page(write="receivables")
    def on_post(self, req, resp):
        fields = form(req)
        body = {"nombre": fields.get("name"), "pasos": _steps(fields.get("steps")),
                "pausa_por_promesa": fields.get("pause_on_promise") == "on",
                "pausa_por_disputa": fields.get("pause_on_dispute") == "on",
                "escalar": fields.get("escalate") == "on"}
        for key, name in (("moneda", "currency"), ("monto_desde", "amount_from"), ("monto_hasta", "amount_to"),
                          ("horario_desde", "quiet_from"), ("horario_hasta", "quiet_to")):
            if fields.get(name).strip():
                body[key] = fields.get(name).strip()
        if fields.get("weekly_cap").strip():
            body["maximo_semanal"] = _number(fields.get("weekly_cap"))
        with atomic():
            plan = dunning_plans.create_plan(ctx(req).tenant_id, body)
            audit(req, "dunning_plan.created", plan.public_id, {"name": plan.name})
        redirect(resp, f"{BASE}/receivables/plans", "plan_created")


def _number(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise Refused(422, CHECK_THE_FORM, N_("Write whole numbers of days, such as -3, 0, 3, 10, 30.")) from None


def _steps(text: str) -> list[dict]:
    """`-3, 0, 3, 10, 30:cobro_firme` → steps; a step's `:name` is its template (else the reminder)."""
    steps = []
    for part in (piece.strip() for piece in text.split(",")):
        if not part:
            continue
        days, _colon, template = part.partition(":")
        steps.append({"dias": _number(days), **({"plantilla": template.strip()} if template.strip() else {})})
    return steps


class PlanDeletion:
    @page(write="receivables")
    def on_post(self, req, resp):
        plan_id = form(req).get("id")
        with atomic():
            dunning_plans.delete_plan(ctx(req).tenant_id, plan_id)
            audit(req, "dunning_plan.deleted", plan_id, {})
        redirect(resp, f"{BASE}/receivables/plans", "plan_deleted")


class DisputeResolution:
    @page(write="receivables")
    def on_post(self, req, resp):
        external_id = form(req).get("id")
        with atomic():
            promises.resolve_dispute(ctx(req).tenant_id, external_id)
            audit(req, "debt.dispute_resolved", external_id, {})
        redirect(resp, f"{BASE}/receivables/debt?{urlencode({'id': external_id})}", "dispute_resolved")


ROUTES = [
    ("/receivables/plans", Plans()),
    ("/receivables/plans/delete", PlanDeletion()),
    ("/receivables/debt/dispute/resolve", DisputeResolution()),
]
