"""GET /cartera/planes and GET /cartera/planes/{id}, written as statements built once, answer what
`plan_detail` over the plans' model objects answered, in each state of a company's plans, on
both engines."""

from __future__ import annotations

from models.receivables import dunning_plans
from models.store.db import connection
from tests.receivables_fixtures import API, error_of, keyed, post

PLANS = (
    {"nombre": "Firme", "pasos": [{"dias": -3}, {"dias": 0}, {"dias": 3}, {"dias": 10}], "maximo_semanal": 2},
    {"nombre": "Pesos", "moneda": "CLP", "monto_desde": 0, "monto_hasta": 50000, "pasos": [{"dias": 1}],
     "horario_desde": "09:00", "horario_hasta": "18:30", "pausa_por_promesa": False, "escalar": False},
    {"nombre": "Dollars", "moneda": "usd", "monto_desde": "10.50", "pasos": [{"dias": 7, "idioma": "en_US"}],
     "pausa_por_disputa": False},
)


def old_reads(tenant_id: int) -> list[dict]:
    return [dunning_plans.plan_detail(plan) for plan in dunning_plans.list_plans(tenant_id)]


def check(client, persona) -> list[dict]:
    with connection():
        expected = old_reads(persona.id)
        assert dunning_plans.read_plans(persona.id) == expected
        for plan in expected:
            assert dunning_plans.read_plan(persona.id, plan["id"]) == plan
    listed = client.simulate_get(f"{API}/planes", headers=persona.headers)
    assert listed.status_code == 200 and listed.json["data"] == {"planes": expected}
    for plan in expected:
        assert client.simulate_get(f"{API}/planes/{plan['id']}", headers=persona.headers).json["data"] == plan
    return expected


def test_plans_read_as_before_in_each_state(client, alice, charlie):
    assert check(client, alice) == []
    for body in PLANS:
        assert post(client, alice, "/planes", body).status_code == 201
        check(client, alice)
    assert post(client, charlie, "/planes", PLANS[0]).status_code == 201
    plans = check(client, alice)
    assert len(plans) == 3 and {plan["moneda"] for plan in plans} == {None, "CLP", "USD"}
    replaced = client.simulate_put(f"{API}/planes/{plans[1]['id']}", headers=keyed(alice),
                                   json={**PLANS[1], "pasos": [{"dias": 5}, {"dias": -1}], "monto_hasta": None})
    assert replaced.status_code == 200, replaced.text
    assert client.simulate_delete(f"{API}/planes/{plans[0]['id']}", headers=keyed(alice)).status_code == 200
    assert [plan["id"] for plan in check(client, alice)] == [plans[1]["id"], plans[2]["id"]]
    # Another company's plan, or one deleted, is not found.
    charlies = check(client, charlie)[0]["id"]
    for plan_id in (charlies, plans[0]["id"]):
        missing = client.simulate_get(f"{API}/planes/{plan_id}", headers=alice.headers)
        assert missing.status_code == 404 and error_of(missing)["code"] == "plan_not_found"
