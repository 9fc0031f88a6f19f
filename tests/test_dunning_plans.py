"""Dunning plans: each debt follows its segment's plan across a simulated month (steps, weekly
cap, sending window, the company's own template), promises and disputes pause it, a broken
promise and an exhausted plan are reported once, and plans are managed through the API.

The clock moves as in test_receivables_collection: every run is given its `now`."""

from __future__ import annotations

import datetime as dt
import json
import threading

import pytest
from typer.testing import CliRunner

from models.events.tables import Event
from models.receivables import dunning_plans, promises
from models.receivables.collection import due_reminders, send_due_reminders
from models.receivables.debts import get_debt, record_service_payment
from models.receivables.dunning_plans import DEFAULT, Plan, Step, choose
from models.receivables.tables import DebtEscalation, DebtPromise, Reminder
from models.sending.tables import Campaign
from models.store.db import connection
from svcctl.main import app as svcctl_app
from tests.campaigns_fixtures import *  # noqa: F403  (sim, app, client: the app pointed at the simulator)
from tests.campaigns_fixtures import TEMPLATES, make_number
from tests.receivables_fixtures import API, error_of, keyed, post, sqlite_only_mark
from tests.test_receivables_collection import DAY, NOON, sync

OWN_TEMPLATE = {"name": "cobro_firme", "language": "es", "status": "approved", "category": "UTILITY",
                "body_text": "{{1}}, su deuda de {{2}} pasa a cobranza.", "header_type": None, "variable_count": 2}
DUE = NOON.date()
runner = CliRunner()


@pytest.fixture
def number(sim, alice):
    return make_number(alice.id, sim, templates=[*TEMPLATES, OWN_TEMPLATE])


def plan_body(**changes) -> dict:
    body = {"nombre": "Firme", "pasos": [{"dias": -3}, {"dias": 0}, {"dias": 3}, {"dias": 10},
                                         {"dias": 30, "plantilla": "cobro_firme", "idioma": "es"}],
            "maximo_semanal": 2}
    body.update(changes)
    return body


def reminded(external_id: str) -> list[tuple[str, int]]:
    """(stage, day from the due date it was sent on) of a debt's reminders, in order."""
    return sorted(((row.stage, (row.created_at.date() - DUE).days) for row in Reminder.select()
                   .where(Reminder.campaign_id.is_null(False))
                   if row.debt.external_id == external_id), key=lambda item: item[1])


def run_days(first: int, last: int, *hours: int) -> None:
    """Collection runs every day from DUE+first to DUE+last, at each hour (UTC) given."""
    for offset in range(first, last + 1):
        for hour in hours or (15,):
            send_due_reminders(NOON.replace(hour=hour) + offset * DAY)


def events(name: str) -> list[dict]:
    return [event.payload for event in Event.select().where(Event.name == name).order_by(Event.id)]


class TestAMonth:
    def test_a_plus_30_step_and_a_weekly_cap_of_two_across_a_month(self, alice, number):
        dunning_plans.create_plan(alice.id, plan_body())
        sync(alice, number, "A", [DUE])
        run_days(-6, 36, 9, 15, 19)
        sent = reminded("A")
        # +3 would be the third reminder within 7 days of -3: it waits for the next day.
        assert sent == [("before", -3), ("due", 0), ("after", 4), ("d+10", 10), ("d+30", 30)]
        days = [day for _stage, day in sent]
        assert all(sum(1 for other in days if day - 6 <= other <= day) <= 2 for day in days)
        last = Campaign.get(Campaign.public_id == Reminder.get(Reminder.stage == "d+30").campaign_id)
        assert (last.template_name, last.template_language) == ("cobro_firme", "es")
        # The last step went out on +30 and the debt is still owed: escalated once, the day after.
        [escalated] = events("debt.escalated")
        assert escalated["data"]["deuda_external_id"] == "A" and escalated["data"]["dias"] == 30
        assert DebtEscalation.select().count() == 1

    def test_a_debt_paid_after_its_last_step_is_not_escalated(self, alice, number):
        dunning_plans.create_plan(alice.id, plan_body(pasos=[{"dias": 0}]))
        sync(alice, number, "A", [DUE])
        run_days(0, 0)
        record_service_payment(alice.id, "A", 100, "cash")
        run_days(1, 3)
        assert events("debt.escalated") == []

    def test_without_plans_nothing_changes_and_nothing_escalates(self, alice, number):
        sync(alice, number, "A", [DUE])
        run_days(-4, 12)
        assert reminded("A") == [("before", -3), ("due", 0), ("after", 3)]
        assert events("debt.escalated") == []

    @sqlite_only_mark
    def test_the_plans_sending_window(self, alice, number):
        dunning_plans.create_plan(alice.id, plan_body(horario_desde="16:00", horario_hasta="18:00"))
        sync(alice, number, "A", [DUE])
        assert due_reminders(NOON.replace(hour=15, minute=59)) == []
        assert [item.stage for item in due_reminders(NOON.replace(hour=16))] == ["due"]
        assert due_reminders(NOON.replace(hour=18)) == []


@pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
def test_two_runs_at_once_keep_every_debtor_within_the_weekly_cap(alice, number):
    """A run late for the due day (its `now` on day 0) overlaps the run of day +3: each would
    send its own step to every debt, four messages a debtor in one week. The company's
    collection lock (docs/reliability.md, "Lock order") makes the second claim count the first's."""
    dunning_plans.create_plan(alice.id, plan_body(pasos=[{"dias": 0}, {"dias": 3}], maximo_semanal=2))
    debtors = 8
    for debtor in range(debtors):
        for debt in range(3):
            phone = f"56977700{debtor:03d}"
            sync(alice, number, f"X{debtor}-{debt}", [DUE], phone=phone,
                 deudor={"nombre": f"Cliente {debtor}", "documento": f"doc-{debtor}", "telefono": phone})
    barrier, errors = threading.Barrier(2), []

    def run(now: dt.datetime) -> None:
        try:
            with connection():
                barrier.wait()
                send_due_reminders(now)
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=run, args=(NOON + days * DAY,)) for days in (0, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    messages: dict[str, set[tuple[int, str]]] = {}
    for row in Reminder.select().where(Reminder.campaign_id.is_null(False)):
        messages.setdefault(row.debt.debtor.documento, set()).add((row.debt_id, row.campaign_id))
    assert len(messages) == debtors
    assert all(len(sent) == 2 for sent in messages.values()), messages


class TestPromisesAndDisputes:
    def test_a_promise_pauses_the_plan_then_is_broken_once_and_the_plan_resumes(self, alice, number):
        dunning_plans.create_plan(alice.id, plan_body(maximo_semanal=None))
        sync(alice, number, "A", [DUE])
        run_days(-3, -1)
        promises.promise(get_debt(alice.id, "A"), DUE + 5 * DAY, today=DUE - DAY)
        run_days(0, 5, 9, 15)
        assert reminded("A") == [("before", -3)]
        assert events("debt.promise_broken") == []
        run_days(6, 7, 9, 15)
        [broken] = events("debt.promise_broken")
        assert broken["data"] == {"deuda_external_id": "A", "promised_date": (DUE + 5 * DAY).isoformat(),
                                  "saldo_pendiente": 100, "moneda": "USD"}
        assert DebtPromise.get().status == "broken"
        # The plan resumes at its current step: +3 (its window runs until +10).
        assert reminded("A") == [("before", -3), ("after", 6)]

    def test_a_promise_kept_is_not_broken(self, alice, number):
        sync(alice, number, "A", [DUE])
        promises.promise(get_debt(alice.id, "A"), DUE + 2 * DAY, today=DUE - DAY)
        record_service_payment(alice.id, "A", 100, "cash")
        run_days(3, 4)
        assert events("debt.promise_broken") == []

    def test_a_dispute_pauses_until_the_company_resolves_it(self, alice, number, client):
        dunning_plans.create_plan(alice.id, plan_body(maximo_semanal=None))
        sync(alice, number, "A", [DUE])
        promises.dispute(get_debt(alice.id, "A"), "No reconozco esta factura")
        run_days(-3, 1, 9, 15)
        assert reminded("A") == []
        resolved = post(client, alice, "/deudas/A/disputa/resolver", None)
        assert resolved.status_code == 200, resolved.text
        assert resolved.json["data"]["status"] == "resolved"
        again = post(client, alice, "/deudas/A/disputa/resolver", None)
        assert again.status_code == 409 and error_of(again)["code"] == "debt_not_disputed"
        run_days(1, 1)
        assert reminded("A") == [("due", 1)]

    def test_a_plan_that_does_not_pause_on_promises(self, alice, number):
        dunning_plans.create_plan(alice.id, plan_body(pausa_por_promesa=False))
        sync(alice, number, "A", [DUE])
        promises.promise(get_debt(alice.id, "A"), DUE + 5 * DAY, today=DUE - DAY)
        run_days(0, 0)
        assert reminded("A") == [("due", 0)]


class TestSegments:
    def test_the_most_specific_plan_wins(self):
        steps = (Step(0, "payment_reminder", "es"),)
        everything = Plan("dpl_all", steps, None, None)
        dollars = Plan("dpl_usd", steps, None, None, currency="USD")
        small = Plan("dpl_small", steps, None, None, currency="USD", amount_from=0, amount_to=50000)
        large = Plan("dpl_large", steps, None, None, currency="USD", amount_from=500000)
        plans = [everything, large, small, dollars]
        assert choose(plans, "USD", 10000) is small
        assert choose(plans, "USD", 50000) is dollars  # the band's top is exclusive
        assert choose(plans, "USD", 500000) is large
        assert choose(plans, "EUR", 10000) is everything
        assert choose([dollars], "EUR", 10000) is DEFAULT

    def test_each_debt_runs_on_its_segments_plan(self, alice, number):
        usd = dunning_plans.create_plan(alice.id, plan_body(nombre="USD", moneda="USD"))
        small = dunning_plans.create_plan(alice.id, plan_body(nombre="small", moneda="USD", monto_desde=0,
                                                              monto_hasta=150, pasos=[{"dias": 1}]))
        sync(alice, number, "S", [DUE])  # 100 USD
        sync(alice, number, "L", [DUE, DUE + DAY])  # 200 USD
        sync(alice, number, "C", [DUE], moneda="CLP")
        plans = {(item.installment_external_id, item.plan_id, item.stage) for item in due_reminders(NOON)}
        assert plans == {("L-1", usd.public_id, "due"), ("L-2", usd.public_id, "before"), ("C-1", None, "due")}
        assert {item.debt_external_id: item.plan_id for item in due_reminders(NOON + DAY)}["S"] == small.public_id


class TestApi:
    def test_create_read_list_replace_delete(self, client, alice, number):
        created = post(client, alice, "/planes", plan_body(moneda="usd", monto_desde="10.50", monto_hasta=1000))
        assert created.status_code == 201, created.text
        plan = created.json["data"]
        assert plan["id"].startswith("dpl_") and plan["moneda"] == "USD" and plan["monto_desde"] == 10.5
        assert [step["etapa"] for step in plan["pasos"]] == ["before", "due", "after", "d+10", "d+30"]
        read = client.simulate_get(f"{API}/planes/{plan['id']}", headers=alice.headers)
        assert read.json["data"] == plan
        listed = client.simulate_get(f"{API}/planes", headers=alice.headers)
        assert [item["id"] for item in listed.json["data"]["planes"]] == [plan["id"]]
        replaced = client.simulate_put(f"{API}/planes/{plan['id']}", headers=keyed(alice),
                                       json=plan_body(nombre="Suave", pasos=[{"dias": 5}, {"dias": -1}]))
        assert replaced.status_code == 200, replaced.text
        assert [step["dias"] for step in replaced.json["data"]["pasos"]] == [-1, 5]
        assert replaced.json["data"]["moneda"] is None
        deleted = client.simulate_delete(f"{API}/planes/{plan['id']}", headers=keyed(alice))
        assert deleted.status_code == 200 and deleted.json["data"] == {"id": plan["id"], "deleted": True}
        missing = client.simulate_get(f"{API}/planes/{plan['id']}", headers=alice.headers)
        assert missing.status_code == 404 and error_of(missing)["code"] == "plan_not_found"

    @sqlite_only_mark
    @pytest.mark.parametrize("changes,field", [
        ({"pasos": [{"dias": 400}]}, "pasos.0.dias"),
        ({"pasos": []}, "pasos"),
        ({"pasos": [{"dias": 0}, {"dias": 0}]}, "pasos.1.dias"),
        ({"pasos": [{"dias": 0, "plantilla": "nope"}]}, "pasos.0.plantilla"),
        ({"pasos": [{"dias": 0, "plantilla": "hello_world", "idioma": "en_US"}]}, "pasos.0.plantilla"),
        ({"monto_desde": 10}, "monto_desde"),
        ({"moneda": "USD", "monto_desde": 10, "monto_hasta": 5}, "monto_hasta"),
        ({"moneda": "USD", "monto_desde": "1.001"}, "monto_desde"),
        ({"moneda": "XXY"}, "moneda"),
        ({"horario_desde": "08:00"}, "horario_hasta"),
        ({"horario_desde": "25:00", "horario_hasta": "08:00"}, "horario_desde"),
        ({"maximo_semanal": 0}, "maximo_semanal"),
        ({"nombre": ""}, "nombre"),
        ({"colour": "red"}, "colour"),
    ])
    def test_validation_names_the_field(self, client, alice, number, changes, field):
        response = post(client, alice, "/planes", plan_body(**changes))
        assert response.status_code == 422, response.text
        error = error_of(response)
        assert error["code"] == "validation_failed" and field in error["details"]["errors"], error

    def test_overlapping_segments_and_names_conflict(self, client, alice, number):
        usd_low = plan_body(moneda="USD", monto_desde=0, monto_hasta=100)
        assert post(client, alice, "/planes", usd_low).status_code == 201
        overlap = post(client, alice, "/planes", plan_body(nombre="Otro", moneda="USD", monto_desde=50))
        assert overlap.status_code == 409 and error_of(overlap)["code"] == "plan_segment_conflict"
        usd_high = plan_body(nombre="Otro", moneda="USD", monto_desde=100)
        assert post(client, alice, "/planes", usd_high).status_code == 201
        named = post(client, alice, "/planes", plan_body(moneda="CLP"))
        assert named.status_code == 409 and error_of(named)["code"] == "plan_name_taken"
        assert post(client, alice, "/planes", plan_body(nombre="Todo")).status_code == 201
        second = post(client, alice, "/planes", plan_body(nombre="Todo 2"))
        assert second.status_code == 409 and error_of(second)["code"] == "plan_segment_conflict"

    @sqlite_only_mark
    def test_writes_need_an_idempotency_key_and_plans_are_the_companys(self, client, alice, charlie, number):
        response = client.simulate_post(f"{API}/planes", headers=alice.headers, json=plan_body())
        assert response.status_code == 422 and error_of(response)["code"] == "idempotency_key_required"
        plan = post(client, alice, "/planes", plan_body()).json["data"]
        foreign = client.simulate_get(f"{API}/planes/{plan['id']}", headers=charlie.headers)
        assert foreign.status_code == 404
        assert client.simulate_get(f"{API}/planes", headers=charlie.headers).json["data"]["planes"] == []


class TestCli:
    def test_plans_list_show_create_update_delete(self, alice, number, tmp_path):
        tenant = alice.tenant.public_id
        path = tmp_path / "plan.json"
        path.write_text(json.dumps(plan_body()))
        created = runner.invoke(svcctl_app, ["cartera", "plans", "create", "--tenant", tenant, str(path), "--json"])
        assert created.exit_code == 0, created.output
        plan = json.loads(created.stdout)
        assert [step["dias"] for step in plan["pasos"]] == [-3, 0, 3, 10, 30]
        listed = runner.invoke(svcctl_app, ["cartera", "plans", "list", "--tenant", tenant, "--json"])
        assert [item["id"] for item in json.loads(listed.stdout)] == [plan["id"]]
        assert runner.invoke(svcctl_app, ["cartera", "plans", "list", "--tenant", tenant]).exit_code == 0
        shown = runner.invoke(svcctl_app, ["cartera", "plans", "show", plan["id"], "--tenant", tenant, "--json"])
        assert json.loads(shown.stdout) == plan
        path.write_text(json.dumps(plan_body(pasos=[{"dias": 400}, {"dias": 0, "plantilla": "nope"}])))
        refused = runner.invoke(svcctl_app, ["cartera", "plans", "update", plan["id"], "--tenant", tenant, str(path)])
        assert refused.exit_code == 1
        assert "pasos.0.dias" in refused.stderr
        path.write_text(json.dumps(plan_body(maximo_semanal=3)))
        updated = runner.invoke(svcctl_app, ["cartera", "plans", "update", plan["id"], "--tenant", tenant, str(path),
                                      "--json"])
        assert updated.exit_code == 0 and json.loads(updated.stdout)["maximo_semanal"] == 3
        deleted = runner.invoke(svcctl_app, ["cartera", "plans", "delete", plan["id"], "--tenant", tenant])
        assert deleted.exit_code == 0
        missing = runner.invoke(svcctl_app, ["cartera", "plans", "show", plan["id"], "--tenant", tenant])
        assert missing.exit_code == 1 and "no plan" in missing.stderr

    def test_dispute_resolve(self, alice, number):
        sync(alice, number, "A", [DUE])
        promises.dispute(get_debt(alice.id, "A"), "No es mía")
        done = runner.invoke(svcctl_app, ["cartera", "dispute", "resolve", "A", "--tenant", alice.tenant.public_id,
                                          "--json"])
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["status"] == "resolved"
        again = runner.invoke(svcctl_app, ["cartera", "dispute", "resolve", "A", "--tenant", alice.tenant.public_id])
        assert again.exit_code == 1 and "no open dispute" in again.stderr
