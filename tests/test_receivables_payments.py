"""POST /cartera/pagos, payments made in the service, and POST /cartera/deudas/{id}/resolver."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal

import pytest

from models.errors import Conflict, Invalid, NotFound
from models.events.tables import Event
from models.receivables import debts
from models.receivables.tables import Debt, Payment, Reminder
from models.store.db import connection
from tests.receivables_fixtures import debt_body, error_of, get_debt, make_account, payment_body, post, sqlite_only_mark


@pytest.fixture
def account(alice):
    return make_account(alice)


@pytest.fixture
def debt(client, alice, account):
    """D-1: 300.00 USD in three installments of 100.00, due Jan, Feb and Mar 2031."""
    assert post(client, alice, "/deudas", debt_body(account.public_id)).status_code == 201
    return "D-1"


def pay(client, persona, key=None, **fields):
    return post(client, persona, "/pagos", payment_body(**fields), key=key)


def read_debt(client, persona, external_id="D-1") -> dict:
    return get_debt(client, persona, external_id).json["data"]["deuda"]


class TestErpPayments:
    def test_a_payment_is_allocated_first_in_first_out(self, client, alice, debt):
        response = pay(client, alice, monto=150)
        assert response.status_code == 201
        assert response.json == {"success": True, "data": {
            "action": "applied",
            "pago": {"external_id": "P-1", "deuda_external_id": "D-1", "monto": 150, "asignaciones": [
                {"cuota_external_id": "D-1-1", "numero": 1, "monto": 100},
                {"cuota_external_id": "D-1-2", "numero": 2, "monto": 50}]},
            "saldo_pendiente": 150, "monto_sin_asignar": 0}}
        state = read_debt(client, alice)
        assert state["status"] == "partial"
        assert [c["estado"] for c in state["cuotas"]] == ["paid", "partial", "pending"]

    def test_the_order_is_due_date_then_number(self, client, alice, account):
        installments = [{"external_id": "late", "numero": 1, "monto": 10, "vence": "2031-05-01"},
                  {"external_id": "b", "numero": 3, "monto": 10, "vence": "2031-01-01"},
                  {"external_id": "a", "numero": 2, "monto": 10, "vence": "2031-01-01"}]
        post(client, alice, "/deudas", debt_body(account.public_id, monto_original=30, saldo_pendiente=30,
                                                 cuotas=installments))
        data = pay(client, alice, monto=25).json["data"]
        assert [(a["cuota_external_id"], a["monto"]) for a in data["pago"]["asignaciones"]] == [
            ("a", 10), ("b", 10), ("late", 5)]

    def test_what_no_installment_takes_is_left_unallocated_and_the_debt_is_paid(self, client, alice, debt):
        pay(client, alice, external_id="P-1", monto=120)
        data = pay(client, alice, external_id="P-2", monto="200.50").json["data"]
        assert [a["monto"] for a in data["pago"]["asignaciones"]] == [80, 100]
        assert (data["monto_sin_asignar"], data["saldo_pendiente"]) == (20.5, 0)
        state = read_debt(client, alice)
        assert state["status"] == "paid"
        assert {c["estado"] for c in state["cuotas"]} == {"paid"}

    def test_a_debt_without_installments_leaves_only_the_excess_unallocated(self, client, alice, account):
        body = debt_body(account.public_id, monto_original=100, saldo_pendiente=100)
        del body["cuotas"]
        post(client, alice, "/deudas", body)
        first = pay(client, alice, external_id="P-1", monto=40).json["data"]
        assert (first["monto_sin_asignar"], first["saldo_pendiente"], first["pago"]["asignaciones"]) == (0, 60, [])
        second = pay(client, alice, external_id="P-2", monto=70).json["data"]
        assert (second["monto_sin_asignar"], second["saldo_pendiente"]) == (10, 0)

    def test_the_same_payment_again_is_already_applied_with_the_original_result(self, client, alice, debt):
        first = pay(client, alice, monto=150).json["data"]
        pay(client, alice, external_id="P-2", monto=10)
        again = pay(client, alice, monto=150)
        assert again.status_code == 200
        assert again.json["data"] == dict(first, action="already_applied")
        assert Payment.select().count() == 2
        assert read_debt(client, alice)["saldo_pendiente"] == 140

    @pytest.mark.parametrize("change", [{"monto": 151}, {"debt": "D-2"}])
    def test_the_id_reused_with_another_amount_or_debt_conflicts(self, client, alice, account, debt, change):
        post(client, alice, "/deudas", debt_body(account.public_id, "D-2"))
        pay(client, alice, monto=150)
        response = pay(client, alice, **{"monto": 150, **change})
        assert response.status_code == 409
        assert error_of(response)["code"] == "payment_external_id_conflict"

    def test_another_currency_conflicts(self, client, alice, debt):
        response = pay(client, alice, moneda="EUR")
        assert (response.status_code, error_of(response)["code"]) == (409, "payment_currency_mismatch")

    @pytest.mark.parametrize("status", ["paid", "cancelled", "written_off"])
    def test_a_resolved_debt_takes_no_payment(self, client, alice, debt, status):
        post(client, alice, "/deudas/D-1/resolver", {"status": status, "reason": "ERP"})
        response = pay(client, alice)
        assert (response.status_code, error_of(response)["code"]) == (409, "debt_not_payable")

    def test_a_debt_paid_by_payments_takes_no_more(self, client, alice, debt):
        pay(client, alice, monto=300)
        response = pay(client, alice, external_id="P-2", monto=1)
        assert error_of(response)["code"] == "debt_not_payable"
        # ...but the first payment replays as applied.
        assert pay(client, alice, monto=300).json["data"]["action"] == "already_applied"

    @sqlite_only_mark
    def test_an_unknown_or_foreign_debt_is_404(self, client, alice, charlie, debt):
        assert error_of(pay(client, alice, debt="nope"))["code"] == "debt_not_found"
        assert error_of(pay(client, charlie))["code"] == "debt_not_found"

    @sqlite_only_mark
    @pytest.mark.parametrize("change,field", [({"monto": 0}, "monto"), ({"monto": "1.001"}, "monto"),
                                              ({"metodo": "bitcoin"}, "metodo"),
                                              ({"pagado_en": "2025-01-01 10:00"}, "pagado_en"),
                                              ({"moneda": "XYZ"}, "moneda")])
    def test_bad_payments_are_422(self, client, alice, debt, change, field):
        response = pay(client, alice, **change)
        assert response.status_code == 422
        assert field in error_of(response)["details"]["errors"]

    def test_an_erp_payment_emits_no_event(self, client, alice, debt):
        pay(client, alice)
        assert Event.select().where(Event.name == "debt.payment_received").count() == 0

    def test_payments_read_back_with_their_allocations(self, client, alice, debt):
        pay(client, alice, monto=150)
        pago = read_debt(client, alice)["pagos"]
        assert pago == [{"external_id": "P-1", "boty_payment_id": None, "origin": "erp", "monto": 150,
                         "moneda": "USD", "metodo": "transfer", "pagado_en": "2030-12-01T13:00:00Z",
                         "asignaciones": [{"cuota_external_id": "D-1-1", "numero": 1, "monto": 100},
                                          {"cuota_external_id": "D-1-2", "numero": 2, "monto": 50}]}]

    @sqlite_only_mark
    def test_payment_writes_replay_and_need_the_key(self, client, alice, debt):
        first = pay(client, alice, key="pay-1")
        again = pay(client, alice, key="pay-1")
        assert again.json == first.json and again.headers["X-Service-Idempotent-Replay"] == "true"
        assert error_of(pay(client, alice, key="pay-1", monto=7))["code"] == "idempotency_key_conflict"
        response = client.simulate_post("/api/v1/cartera/pagos", json=payment_body(), headers=alice.headers)
        assert error_of(response)["code"] == "idempotency_key_required"

    def test_a_new_sync_after_payments_takes_the_erps_balance(self, client, alice, account, debt):
        pay(client, alice, monto=150)
        post(client, alice, "/deudas", debt_body(account.public_id, saldo_pendiente=140))
        state = read_debt(client, alice)
        assert (state["saldo_pendiente"], [c["estado"] for c in state["cuotas"]]) == (140, ["paid", "partial",
                                                                                           "pending"])


class TestServicePayments:
    def test_it_applies_like_an_erp_payment_and_emits_the_event(self, client, alice, debt):
        paid_at = dt.datetime(2031, 1, 5, 9, 30, tzinfo=dt.timezone(dt.timedelta(hours=-3)))
        payment = debts.record_service_payment(alice.id, "D-1", "120.50", "card", transaction_id="tx-1",
                                               paid_at=paid_at)
        assert payment.public_id.startswith("bpay_") and len(payment.public_id) == 29
        event = Event.get(Event.name == "debt.payment_received")
        assert event.tenant_id == alice.id
        payload = event.payload
        assert set(payload) == {"id", "event", "created_at", "data"}
        assert (payload["id"], payload["event"]) == (event.public_id, "debt.payment_received")
        assert payload["data"] == {
            "deuda_external_id": "D-1",
            "pago": {"boty_payment_id": payment.public_id, "external_id": None, "transaction_id": "tx-1",
                     "monto": 120.5, "moneda": "USD", "metodo": "card", "pagado_en": "2031-01-05T12:30:00Z"},
            "saldo_pendiente": 179.5,
            "status": "partial",
        }
        state = read_debt(client, alice)
        assert state["pagos"][0]["origin"] == "service"
        assert state["pagos"][0]["boty_payment_id"] == payment.public_id
        assert [a["monto"] for a in state["pagos"][0]["asignaciones"]] == [100, 20.5]

    def test_a_gateway_calling_back_twice_pays_once(self, alice, debt):
        first = debts.record_service_payment(alice.id, "D-1", 50, "gateway", transaction_id="tx-9")
        second = debts.record_service_payment(alice.id, "D-1", Decimal("50.00"), "gateway", transaction_id="tx-9")
        assert first.id == second.id
        assert Event.select().count() == 1
        with pytest.raises(Conflict):
            debts.record_service_payment(alice.id, "D-1", 60, "gateway", transaction_id="tx-9")

    @sqlite_only_mark
    def test_it_refuses_what_an_erp_payment_would(self, alice, debt):
        with pytest.raises(Invalid):
            debts.record_service_payment(alice.id, "D-1", 12.5, "card")  # a float: not exact
        with pytest.raises(Invalid):
            debts.record_service_payment(alice.id, "D-1", "1.001", "card")
        with pytest.raises(Invalid):
            debts.record_service_payment(alice.id, "D-1", 10, "crypto")
        with pytest.raises(NotFound):
            debts.record_service_payment(alice.id, "nope", 10, "card")
        debts.resolve_debt(alice.id, "D-1", "written_off")
        with pytest.raises(Conflict) as raised:
            debts.record_service_payment(alice.id, "D-1", 10, "card")
        assert raised.value.code == "debt_not_payable"
        assert Event.select().count() == 0

    def test_concurrent_payments_never_lose_an_update(self, alice, debt, storage):
        errors = []

        def pay_ten():
            with connection():
                for _ in range(5):
                    try:
                        debts.record_service_payment(alice.id, "D-1", 3, "cash")
                    except Exception as error:  # noqa: BLE001 - collected for the assertion
                        errors.append(error)

        threads = [threading.Thread(target=pay_ten) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        debt_row = Debt.get()
        assert debt_row.saldo_pendiente == 30000 - 30 * 300
        assert Payment.select().count() == 30
        assert Event.select().count() == 30


class TestResolution:
    def test_it_resolves_and_cancels_open_installments_and_reminders(self, client, alice, debt):
        pay(client, alice, monto=100)
        response = post(client, alice, "/deudas/D-1/resolver", {"status": "written_off", "reason": "uncollectable"})
        assert response.status_code == 200
        assert response.json == {"success": True, "data": {"deuda": {
            "external_id": "D-1", "saldo_pendiente": 200, "status": "written_off"}}}
        state = read_debt(client, alice)
        assert [c["estado"] for c in state["cuotas"]] == ["paid", "cancelled", "cancelled"]
        stages = {(r.installment.external_id, r.stage, r.status) for r in Reminder.select()}
        assert stages == {(c, s, "cancelled") for c in ("D-1-2", "D-1-3") for s in ("before", "due", "after")}

    def test_resolving_as_paid_clears_the_balance(self, client, alice, debt):
        data = post(client, alice, "/deudas/D-1/resolver", {"status": "paid"}).json["data"]
        assert data["deuda"] == {"external_id": "D-1", "saldo_pendiente": 0, "status": "paid"}

    def test_a_resolution_sticks_through_later_syncs(self, client, alice, account, debt):
        post(client, alice, "/deudas/D-1/resolver", {"status": "cancelled"})
        response = post(client, alice, "/deudas", debt_body(account.public_id, saldo_pendiente=250))
        assert response.json["data"]["deuda"]["status"] == "cancelled"
        assert {c["estado"] for c in read_debt(client, alice)["cuotas"]} == {"cancelled"}

    @sqlite_only_mark
    @pytest.mark.parametrize("body,field", [({"status": "forgiven"}, "status"), ({}, "status"),
                                            ({"status": "paid", "reason": "x" * 501}, "reason")])
    def test_bad_resolutions_are_422(self, client, alice, debt, body, field):
        response = post(client, alice, "/deudas/D-1/resolver", body)
        assert field in error_of(response)["details"]["errors"]

    @sqlite_only_mark
    def test_resolution_replays_and_needs_the_key(self, client, alice, debt):
        first = post(client, alice, "/deudas/D-1/resolver", {"status": "paid"}, key="r-1")
        again = post(client, alice, "/deudas/D-1/resolver", {"status": "paid"}, key="r-1")
        assert again.json == first.json and again.headers["X-Service-Idempotent-Replay"] == "true"
        response = client.simulate_post("/api/v1/cartera/deudas/D-1/resolver", json={"status": "paid"},
                                        headers=alice.headers)
        assert error_of(response)["code"] == "idempotency_key_required"
