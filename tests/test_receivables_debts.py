"""POST /cartera/deudas, GET /cartera/deudas/{external_id}: the sync of a debt from the ERP."""

from __future__ import annotations

import pytest

from models.receivables.tables import Debt, Debtor, Installment
from tests.receivables_fixtures import debt_body, error_of, get_debt, make_account, post, sqlite_only_mark


@pytest.fixture
def account(alice):
    return make_account(alice)


def installment(external_id: str, number: int, amount, due_date: str, status: str = "pending") -> dict:
    return {"external_id": external_id, "numero": number, "monto": amount, "vence": due_date, "estado": status}


def installment_statuses(client, persona, external_id: str = "D-1") -> dict[str, str]:
    installments = get_debt(client, persona, external_id).json["data"]["deuda"]["cuotas"]
    return {item["external_id"]: item["estado"] for item in installments}


class TestCreateAndRead:
    def test_it_creates_a_debt_and_answers_201(self, client, alice, account):
        response = post(client, alice, "/deudas", debt_body(account.public_id, external_version=1))
        assert response.status_code == 201
        assert response.json == {"success": True, "data": {"action": "created", "deuda": {
            "external_id": "D-1", "saldo_pendiente": 300, "status": "pending", "external_version": 1}}}

    def test_the_debt_reads_back_without_internal_ids(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id, external_version=3))
        response = get_debt(client, alice, "D-1")
        assert response.status_code == 200
        debt = response.json["data"]["deuda"]
        assert debt == {
            "external_id": "D-1", "account_id": account.public_id,
            "deudor": {"nombre": "Ana Pérez", "documento": "11111111-1", "telefono": "56922223333"},
            "moneda": "USD", "referencia": "Factura 1001", "monto_original": 300, "saldo_pendiente": 300,
            "status": "pending", "tipo": "installments", "auto_send": False, "external_version": 3,
            "external_updated_at": None,
            "cuotas": [
                {"external_id": "D-1-1", "numero": 1, "monto": 100, "vence": "2031-01-10", "estado": "pending"},
                {"external_id": "D-1-2", "numero": 2, "monto": 100, "vence": "2031-02-10", "estado": "pending"},
                {"external_id": "D-1-3", "numero": 3, "monto": 100, "vence": "2031-03-10", "estado": "pending"},
            ],
            "pagos": [],
            "links_de_pago": [],
        }
        assert "id" not in debt and "debt_id" not in str(debt)

    @sqlite_only_mark
    def test_an_unknown_debt_is_404(self, client, alice):
        response = get_debt(client, alice, "nope")
        assert response.status_code == 404
        assert error_of(response)["code"] == "debt_not_found"

    def test_an_update_answers_200_and_replaces_the_fields(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id))
        response = post(client, alice, "/deudas", debt_body(account.public_id, saldo_pendiente=250,
                                                             referencia="Factura 1001-B"))
        assert response.status_code == 200
        assert response.json["data"]["action"] == "updated"
        debt = get_debt(client, alice, "D-1").json["data"]["deuda"]
        assert (debt["saldo_pendiente"], debt["status"], debt["referencia"]) == (250, "partial", "Factura 1001-B")
        assert Debt.select().count() == 1

    @sqlite_only_mark
    def test_a_debt_without_installments_is_single(self, client, alice, account):
        body = debt_body(account.public_id)
        del body["cuotas"]
        assert post(client, alice, "/deudas", body).status_code == 201
        debt = get_debt(client, alice, "D-1").json["data"]["deuda"]
        assert (debt["tipo"], debt["cuotas"]) == ("single", [])

    @sqlite_only_mark
    def test_a_single_debt_refuses_several_installments(self, client, alice, account):
        response = post(client, alice, "/deudas", debt_body(account.public_id, tipo="single"))
        assert response.status_code == 422
        assert "tipo" in error_of(response)["details"]["errors"]

    def test_a_balance_of_zero_is_paid(self, client, alice, account):
        response = post(client, alice, "/deudas", debt_body(account.public_id, saldo_pendiente=0))
        assert response.json["data"]["deuda"]["status"] == "paid"

    @sqlite_only_mark
    def test_optional_fields_left_out_keep_their_values(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id, auto_send=True))
        body = debt_body(account.public_id)
        del body["referencia"], body["auto_send"]
        post(client, alice, "/deudas", body)
        debt = get_debt(client, alice, "D-1").json["data"]["deuda"]
        assert (debt["referencia"], debt["auto_send"]) == ("Factura 1001", True)


class TestOrdering:
    def test_a_lower_version_is_ignored_as_stale(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id, external_version=5, saldo_pendiente=200))
        response = post(client, alice, "/deudas", debt_body(account.public_id, external_version=4, saldo_pendiente=10))
        assert response.status_code == 200
        assert response.json["data"] == {"action": "ignored_stale", "deuda": {
            "external_id": "D-1", "saldo_pendiente": 200, "status": "partial", "external_version": 5}}

    def test_a_higher_or_equal_version_applies(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id, external_version=5))
        same = post(client, alice, "/deudas", debt_body(account.public_id, external_version=5, saldo_pendiente=250))
        newer = post(client, alice, "/deudas", debt_body(account.public_id, external_version=6, saldo_pendiente=200))
        assert [same.json["data"]["action"], newer.json["data"]["action"]] == ["updated", "updated"]
        assert newer.json["data"]["deuda"]["saldo_pendiente"] == 200

    def test_an_older_timestamp_is_ignored_as_stale(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id, external_updated_at="2025-03-01T12:00:00-03:00"))
        # 14:00 UTC+0 is 11:00 at -03:00: older than the stored 12:00 -03:00, whatever the offsets.
        stale = post(client, alice, "/deudas", debt_body(account.public_id, saldo_pendiente=1,
                                                         external_updated_at="2025-03-01T14:00:00Z"))
        assert stale.json["data"]["action"] == "ignored_stale"
        newer = post(client, alice, "/deudas", debt_body(account.public_id, saldo_pendiente=2,
                                                         external_updated_at="2025-03-01T15:30:00Z"))
        assert newer.json["data"]["action"] == "updated"
        assert get_debt(client, alice, "D-1").json["data"]["deuda"]["external_updated_at"] == "2025-03-01T15:30:00Z"

    def test_the_version_decides_before_the_timestamp(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id, external_version=2,
                                                 external_updated_at="2025-03-01T12:00:00Z"))
        response = post(client, alice, "/deudas", debt_body(account.public_id, external_version=3,
                                                             external_updated_at="2024-01-01T00:00:00Z"))
        assert response.json["data"]["action"] == "updated"

    def test_without_ordering_fields_the_last_write_wins(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id, saldo_pendiente=100))
        post(client, alice, "/deudas", debt_body(account.public_id, saldo_pendiente=280))
        assert Debt.get().saldo_pendiente == 28000


class TestInstallmentRules:
    def test_absent_cuotas_keep_the_schedule(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id))
        body = debt_body(account.public_id, saldo_pendiente=250)
        del body["cuotas"]
        post(client, alice, "/deudas", body)
        assert installment_statuses(client, alice) == {"D-1-1": "pending", "D-1-2": "pending", "D-1-3": "pending"}

    def test_an_empty_list_cancels_open_installments_and_keeps_paid_ones(self, client, alice, account):
        body = debt_body(account.public_id)
        body["cuotas"][0]["estado"] = "paid"
        post(client, alice, "/deudas", body)
        post(client, alice, "/deudas", debt_body(account.public_id, cuotas=[]))
        assert installment_statuses(client, alice) == {"D-1-1": "paid", "D-1-2": "cancelled", "D-1-3": "cancelled"}

    def test_a_snapshot_updates_received_and_cancels_open_ones_not_received(self, client, alice, account):
        body = debt_body(account.public_id)
        body["cuotas"][0]["estado"] = "paid"
        post(client, alice, "/deudas", body)
        snapshot = [installment("D-1-2", 2, 150, "2031-02-20"), installment("D-1-4", 3, 50, "2031-04-10")]
        post(client, alice, "/deudas", debt_body(account.public_id, cuotas=snapshot))
        installments = {c["external_id"]: c for c in get_debt(client, alice, "D-1").json["data"]["deuda"]["cuotas"]}
        assert {k: c["estado"] for k, c in installments.items()} == {
            "D-1-1": "paid", "D-1-2": "pending", "D-1-3": "cancelled", "D-1-4": "pending"}
        assert (installments["D-1-2"]["monto"], installments["D-1-2"]["vence"]) == (150, "2031-02-20")
        assert Installment.select().count() == 4

    def test_a_cancelled_installment_received_again_reopens(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id))
        post(client, alice, "/deudas", debt_body(account.public_id, cuotas=[]))
        post(client, alice, "/deudas", debt_body(account.public_id))
        assert set(installment_statuses(client, alice).values()) == {"pending"}

    def test_the_erp_can_declare_an_installment_cancelled_or_partial(self, client, alice, account):
        body = debt_body(account.public_id)
        body["cuotas"][1]["estado"] = "cancelled"
        body["cuotas"][2]["estado"] = "partial"
        post(client, alice, "/deudas", body)
        assert installment_statuses(client, alice) == {"D-1-1": "pending", "D-1-2": "cancelled", "D-1-3": "partial"}


class TestOverdue:
    def test_an_installment_past_due_makes_the_debt_overdue_on_write(self, client, alice, account):
        body = debt_body(account.public_id)
        body["cuotas"][0]["vence"] = "2020-01-10"
        response = post(client, alice, "/deudas", body)
        assert response.json["data"]["deuda"]["status"] == "overdue"
        assert installment_statuses(client, alice)["D-1-1"] == "overdue"

    @sqlite_only_mark
    def test_the_due_date_itself_is_not_overdue_in_the_tenants_day(self, client, alice, account):
        import datetime as dt

        from models.tenancy.tables import Tenant

        Tenant.update(timezone="Pacific/Kiritimati").where(Tenant.id == alice.id).execute()  # UTC+14
        today_there = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=14)).date()
        yesterday_there = today_there - dt.timedelta(days=1)
        body = debt_body(account.public_id, cuotas=[installment("A", 1, 100, today_there.isoformat()),
                                                    installment("B", 2, 100, yesterday_there.isoformat())])
        post(client, alice, "/deudas", body)
        assert installment_statuses(client, alice) == {"A": "pending", "B": "overdue"}


class TestOverdueJob:
    def test_the_hourly_job_moves_past_due_installments_in_each_tenants_day(self, alice, charlie, account):
        import datetime as dt

        from jobs.receivables import refresh_overdue_debts
        from models.receivables import debts, snapshots
        from models.receivables.inputs import parse_debt
        from models.tenancy.tables import Tenant

        Tenant.update(timezone="Pacific/Kiritimati").where(Tenant.id == alice.id).execute()  # UTC+14
        Tenant.update(timezone="Pacific/Pago_Pago").where(Tenant.id == charlie.id).execute()  # UTC-11
        theirs = make_account(charlie, phone="56933334444")
        written_on = dt.date(2031, 1, 5)
        for persona, number in ((alice, account), (charlie, theirs)):
            snapshots.upsert_debt(persona.id, parse_debt(debt_body(number.public_id)), today=written_on)
        snapshots.upsert_debt(alice.id, parse_debt(debt_body(account.public_id, "PAID", saldo_pendiente=0,
                                                             deudor={"nombre": "Paz", "documento": "5-5"})),
                              today=written_on)
        assert {d.status for d in Debt.select()} == {"pending", "paid"}
        # 11:00 UTC on Jan 10 is 01:00 on Jan 11 in Kiritimati, 00:00 on Jan 10 in Pago Pago.
        assert debts.refresh_overdue(dt.datetime(2031, 1, 10, 11, 0)) == 1
        statuses = {(d.tenant_id, d.external_id): d.status for d in Debt.select()}
        assert statuses == {(alice.id, "D-1"): "overdue", (charlie.id, "D-1"): "pending", (alice.id, "PAID"): "paid"}
        assert debts.refresh_overdue(dt.datetime(2031, 1, 10, 11, 0)) == 0  # idempotent
        # The periodic task runs the same with the real clock, before 2031: nothing more to move.
        assert refresh_overdue_debts.call_local() == 0
        assert Debt.get(Debt.tenant == charlie.id).status == "pending"


class TestDebtorIdentity:
    def test_the_same_document_is_the_same_debtor(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id, "D-1"))
        post(client, alice, "/deudas", debt_body(account.public_id, "D-2", deudor={
            "nombre": "Ana P. Soto", "documento": "11111111-1", "telefono": "56955556666"}))
        assert Debtor.select().count() == 1
        debtor = Debtor.get()
        assert (debtor.nombre, debtor.telefono) == ("Ana P. Soto", "56955556666")

    def test_the_phone_is_a_second_key(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id, "D-1",
                                                 deudor={"nombre": "Ana", "telefono": "56922223333"}))
        post(client, alice, "/deudas", debt_body(account.public_id, "D-2", deudor={
            "nombre": "Ana", "documento": "11111111-1", "telefono": "56922223333"}))
        assert Debtor.select().count() == 1
        assert Debtor.get().documento == "11111111-1"

    def test_a_document_and_a_phone_of_different_debtors_conflict(self, client, alice, account):
        ana = {"nombre": "Ana", "documento": "1-9", "telefono": "56911110000"}
        post(client, alice, "/deudas", debt_body(account.public_id, "D-1", deudor=ana))
        beto = {"nombre": "Beto", "documento": "2-7", "telefono": "56922220000"}
        post(client, alice, "/deudas", debt_body(account.public_id, "D-2", deudor=beto))
        response = post(client, alice, "/deudas", debt_body(account.public_id, "D-3", deudor={
            "nombre": "Ana", "documento": "1-9", "telefono": "56922220000"}))
        assert response.status_code == 409
        assert error_of(response)["code"] == "debtor_identity_conflict"
        assert Debt.select().count() == 2

    def test_a_phone_known_under_another_document_conflicts(self, client, alice, account):
        ana = {"nombre": "Ana", "documento": "1-9", "telefono": "56911110000"}
        post(client, alice, "/deudas", debt_body(account.public_id, "D-1", deudor=ana))
        response = post(client, alice, "/deudas", debt_body(account.public_id, "D-2", deudor={
            "nombre": "Carla", "documento": "3-5", "telefono": "56911110000"}))
        assert error_of(response)["code"] == "debtor_identity_conflict"

    def test_debtors_are_per_tenant(self, client, alice, charlie, account):
        post(client, alice, "/deudas", debt_body(account.public_id))
        theirs = make_account(charlie, phone="56933334444")
        assert post(client, charlie, "/deudas", debt_body(theirs.public_id)).status_code == 201
        assert Debtor.select().count() == 2


class TestTenancy:
    def test_an_account_of_another_tenant_is_404(self, client, alice, charlie):
        theirs = make_account(charlie)
        response = post(client, alice, "/deudas", debt_body(theirs.public_id))
        assert response.status_code == 404
        assert error_of(response)["code"] == "account_not_found"
        assert Debt.select().count() == 0

    def test_a_debt_of_another_tenant_is_404(self, client, alice, charlie, account):
        post(client, alice, "/deudas", debt_body(account.public_id))
        assert error_of(get_debt(client, charlie, "D-1"))["code"] == "debt_not_found"
        resolve = post(client, charlie, "/deudas/D-1/resolver", {"status": "cancelled"})
        assert error_of(resolve)["code"] == "debt_not_found"

    def test_the_same_external_id_in_two_tenants_are_two_debts(self, client, alice, charlie, account):
        post(client, alice, "/deudas", debt_body(account.public_id))
        theirs = make_account(charlie, phone="56933334444")
        post(client, charlie, "/deudas", debt_body(theirs.public_id, saldo_pendiente=1))
        assert get_debt(client, alice, "D-1").json["data"]["deuda"]["saldo_pendiente"] == 300

    @sqlite_only_mark
    def test_reads_need_cartera_read_and_writes_cartera_write(self, client, alice, account):
        reader = {**alice.with_key(["cartera:read"]), "Idempotency-Key": "k1"}
        response = client.simulate_post("/api/v1/cartera/deudas", json=debt_body(account.public_id), headers=reader)
        assert (response.status_code, error_of(response)["code"]) == (403, "missing_scope")
        writer = alice.with_key(["cartera:write"])
        assert client.simulate_get("/api/v1/cartera/deudas/D-1", headers=writer).status_code == 403


class TestIdempotency:
    @sqlite_only_mark
    def test_the_key_is_mandatory(self, client, alice, account):
        response = client.simulate_post("/api/v1/cartera/deudas", json=debt_body(account.public_id),
                                        headers=alice.headers)
        assert response.status_code == 422
        assert error_of(response)["code"] == "idempotency_key_required"
        assert Debt.select().count() == 0

    @sqlite_only_mark
    def test_a_replay_returns_the_original_response(self, client, alice, account):
        first = post(client, alice, "/deudas", debt_body(account.public_id), key="sync-1")
        again = post(client, alice, "/deudas", debt_body(account.public_id), key="sync-1")
        assert (first.status_code, again.status_code) == (201, 201)
        assert again.json == first.json
        assert again.headers["X-Service-Idempotent-Replay"] == "true"
        assert "X-Service-Idempotent-Replay" not in first.headers

    @sqlite_only_mark
    def test_the_key_with_another_body_conflicts(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id), key="sync-1")
        response = post(client, alice, "/deudas", debt_body(account.public_id, saldo_pendiente=1), key="sync-1")
        assert response.status_code == 409
        assert error_of(response)["code"] == "idempotency_key_conflict"
        assert Debt.get().saldo_pendiente == 30000
