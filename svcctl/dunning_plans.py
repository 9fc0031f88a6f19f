"""svcctl cartera plans: a company's dunning plans (docs/receivables.md, "Dunning plans"), and
resolving a debtor's dispute. Plans are written from a JSON file in the API's shape."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import typer

from models.errors import Invalid
from models.receivables import dunning_plans, promises
from models.tenancy.tenants import get_tenant
from svcctl.output import JSON_OPTION, err, fail, record, show, styled, table, with_database

app = typer.Typer(help="Dunning plans: each segment's collection schedule.", no_args_is_help=True)
dispute_app = typer.Typer(help="A debtor's dispute of a debt.", no_args_is_help=True)


def _read(path: Path):
    try:
        raw = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
        return orjson.loads(raw)
    except OSError as error:
        fail(f"cannot read {path}: {error.strerror}")
    except orjson.JSONDecodeError as error:
        fail(f"{path} is not JSON: {error}")


def _write(operation):
    """Run a plan write; a refused plan lists every field that is wrong, then exits 1."""
    try:
        return operation()
    except Invalid as error:
        for field, messages in (error.details or {}).get("errors", {}).items():
            for message in messages:
                err.print(styled((field, "red"), ": ", message), soft_wrap=True)
        fail(error.message)


def _summary(plan: dict) -> dict:
    segment = plan["moneda"] or "all"
    if plan["monto_desde"] is not None or plan["monto_hasta"] is not None:
        segment += f" [{plan['monto_desde'] or 0}, {plan['monto_hasta'] or '∞'})"
    return {"id": plan["id"], "nombre": plan["nombre"], "segment": segment,
            "pasos": ", ".join(f"{step['dias']:+d} {step['plantilla']}" for step in plan["pasos"]),
            "maximo_semanal": plan["maximo_semanal"], "escalar": plan["escalar"]}


@app.command("list")
@with_database
def list_plans(tenant: str = typer.Option(..., "--tenant"), as_json: bool = JSON_OPTION):
    """The company's plans; debts no plan matches follow the fixed schedule (-3, 0, +3)."""
    data = [dunning_plans.plan_detail(plan) for plan in dunning_plans.list_plans(get_tenant(tenant).id)]
    rows = [_summary(plan) for plan in data]
    show(data, as_json, lambda: table("dunning plans", ("id", "name", "segment", "steps", "weekly cap", "escalates"),
                                      [tuple(row.values()) for row in rows]))


@app.command("show")
@with_database
def show_plan(plan_id: str, tenant: str = typer.Option(..., "--tenant"), as_json: bool = JSON_OPTION):
    """One plan, whole."""
    data = dunning_plans.plan_detail(dunning_plans.get_plan(get_tenant(tenant).id, plan_id))
    show(data, as_json, lambda: record({**data, "pasos": _summary(data)["pasos"]}, "dunning plan"))


@app.command("create")
@with_database
def create(file: Path = typer.Argument(..., help="the plan as JSON (the API's body), or - for stdin"),
           tenant: str = typer.Option(..., "--tenant"), as_json: bool = JSON_OPTION):
    """Create a plan from a JSON file."""
    tenant_id = get_tenant(tenant).id
    body = _read(file)
    data = dunning_plans.plan_detail(_write(lambda: dunning_plans.create_plan(tenant_id, body)))
    show(data, as_json, lambda: record({**data, "pasos": _summary(data)["pasos"]}, "plan created"))


@app.command("update")
@with_database
def update(plan_id: str, file: Path = typer.Argument(..., help="the whole plan as JSON, or - for stdin"),
           tenant: str = typer.Option(..., "--tenant"), as_json: bool = JSON_OPTION):
    """Replace a plan with the JSON file's."""
    tenant_id = get_tenant(tenant).id
    body = _read(file)
    data = dunning_plans.plan_detail(_write(lambda: dunning_plans.update_plan(tenant_id, plan_id, body)))
    show(data, as_json, lambda: record({**data, "pasos": _summary(data)["pasos"]}, "plan updated"))


@app.command("delete")
@with_database
def delete(plan_id: str, tenant: str = typer.Option(..., "--tenant"), as_json: bool = JSON_OPTION):
    """Delete a plan: its debts follow the next most specific plan."""
    dunning_plans.delete_plan(get_tenant(tenant).id, plan_id)
    data = {"id": plan_id, "deleted": True}
    show(data, as_json, lambda: f"plan {plan_id} deleted")


@dispute_app.command("resolve")
@with_database
def resolve_dispute(external_id: str, tenant: str = typer.Option(..., "--tenant"), as_json: bool = JSON_OPTION):
    """The company resolved the debtor's dispute: collection reminds the debt again."""
    dispute = promises.resolve_dispute(get_tenant(tenant).id, external_id)
    data = promises.dispute_detail(external_id, dispute)
    show(data, as_json, lambda: record(data, "dispute resolved"))
