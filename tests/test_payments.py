"""Payments through the gateway, in-process against the gateway simulator over HTTP: payment
links, signed notifications (forged, replayed, duplicated, contradicting the gateway), partial
payments and overpayments, refunds and chargebacks, reconciliation and the ERP's export."""

from __future__ import annotations

import datetime as dt
import threading
import time
from decimal import Decimal

import pytest
from typer.testing import CliRunner

from jobs.payments import reconcile_payments
from models.events.tables import Event
from models.receivables import debts, export, payments
from models.receivables.tables import Debt, GatewayNotification, Payment, PaymentGateway, PaymentLink, PaymentReversal
from models.store.db import connection
from svcctl.main import app as svcctl
from tests.payments_fixtures import *  # noqa: F403  (gateway_sim, gateway)
from tests.receivables_fixtures import debt_body, error_of, get_debt, make_account, post

runner = CliRunner()


@pytest.fixture
def account(alice):
    return make_account(alice)


@pytest.fixture
def debt(client, alice, account):
    """D-1: 300.00 USD in three installments of 100.00."""
    assert post(client, alice, "/deudas", debt_body(account.public_id)).status_code == 201
    return "D-1"


def link_for(client, persona, external_id="D-1", **body):
    return post(client, persona, f"/deudas/{external_id}/payment-link", body)


def read_debt(client, persona, external_id="D-1") -> dict:
    return get_debt(client, persona, external_id).json["data"]["deuda"]


def notify(client, seller, payment_id, **options):
    path, headers, body = seller.notification(payment_id, **options)
    return client.simulate_post(path, body=body, headers=headers)


def events(tenant_id) -> list[Event]:
    return list(Event.select().where((Event.tenant == tenant_id) & (Event.name == "debt.payment_received")))


class TestLinks:
    def test_a_link_asks_for_the_next_installment_and_is_listed_on_the_debt(self, client, alice, debt, gateway):
        created = link_for(client, alice)
        assert created.status_code == 201, created.text
        link = created.json["data"]
        assert (link["monto"], link["moneda"], link["status"], link["origin"]) == (100, "USD", "active", "api")
        assert link["url"].endswith(f"/pay/{link['id']}") and link["checkout_url"].startswith(gateway.sim.base_url)
        expires = dt.datetime.fromisoformat(link["expires_at"])
        assert dt.timedelta(hours=71) < expires - dt.datetime.now(dt.UTC) <= dt.timedelta(hours=72)
        assert [item["id"] for item in read_debt(client, alice)["links_de_pago"]] == [link["id"]]
        # The public page sends the payer to the gateway's checkout.
        page = client.simulate_get(f"/pay/{link['id']}")
        assert page.status_code == 302 and page.headers["location"] == link["checkout_url"]

    def test_an_amount_or_installment_can_be_asked_for(self, client, alice, debt, gateway):
        assert link_for(client, alice, monto="250.50").json["data"]["monto"] == 250.5
        assert link_for(client, alice, cuota_external_id="D-1-3").json["data"]["cuota_external_id"] == "D-1-3"
        too_much = link_for(client, alice, monto=300.01)
        assert too_much.status_code == 422, too_much.text
        assert link_for(client, alice, monto="1.001").status_code == 422
        assert error_of(link_for(client, alice, cuota_external_id="nope"))["code"] == "installment_not_found"

    def test_an_idempotency_key_is_required_and_replays(self, client, alice, debt, gateway):
        path = "/api/v1/cartera/deudas/D-1/payment-link"
        bare = client.simulate_post(path, json={}, headers=alice.headers)
        assert error_of(bare)["code"] == "idempotency_key_required"
        first = post(client, alice, "/deudas/D-1/payment-link", {}, key="link-1")
        again = post(client, alice, "/deudas/D-1/payment-link", {}, key="link-1")
        assert again.headers.get("X-Service-Idempotent-Replay") == "true"
        assert again.json == first.json and PaymentLink.select().count() == 1

    @pytest.mark.parametrize("settle", ["paid", "resolved"])
    def test_no_link_on_a_paid_or_resolved_debt(self, client, alice, debt, gateway, settle):
        if settle == "paid":
            debts.record_service_payment(alice.id, "D-1", "300", "cash")
        else:
            debts.resolve_debt(alice.id, "D-1", "written_off")
        refused = link_for(client, alice)
        assert refused.status_code == 409 and error_of(refused)["code"] == "debt_not_payable"

    def test_a_link_opened_after_the_debt_is_settled_does_not_reach_the_checkout(self, client, alice, debt, gateway):
        link = link_for(client, alice).json["data"]
        debts.record_service_payment(alice.id, "D-1", "300", "cash")
        page = client.simulate_get(f"/pay/{link['id']}")
        assert page.status_code == 409 and "location" not in page.headers and "saldo" in page.text
        assert client.simulate_get("/pay/plk_unknown").status_code == 404

    def test_an_expired_link_is_refused(self, client, alice, debt, gateway):
        link = link_for(client, alice).json["data"]
        PaymentLink.update(expires_at=dt.datetime(2020, 1, 1)).execute()
        assert client.simulate_get(f"/pay/{link['id']}").status_code == 410
        assert read_debt(client, alice)["links_de_pago"][0]["status"] == "expired"

    def test_without_a_gateway_there_is_no_link(self, client, alice, debt):
        assert error_of(link_for(client, alice))["code"] == "payment_gateway_not_configured"

    def test_another_companys_debt_is_not_found(self, client, alice, charlie, debt, gateway):
        assert link_for(client, charlie).status_code == 404


class TestNotifications:
    def test_a_paid_link_is_recorded_once_with_its_event(self, client, alice, debt, gateway):
        link = link_for(client, alice).json["data"]
        paid = gateway.pay(link)
        answer = notify(client, gateway, paid["id"])
        assert answer.status_code == 200 and answer.json["data"]["status"] == "accepted"
        debt_now = read_debt(client, alice)
        assert debt_now["saldo_pendiente"] == 200 and debt_now["status"] == "partial"
        assert debt_now["links_de_pago"][0]["status"] == "paid"
        [payment] = Payment.select().where(Payment.transaction_id == str(paid["id"]))
        assert (payment.origin, payment.metodo, payment.monto) == ("service", "gateway", 10000)
        [event] = events(alice.id)
        assert event.payload["data"]["pago"]["transaction_id"] == str(paid["id"])
        # The same notification delivered again, and other notifications of the same payment.
        path, headers, body = gateway.notification(paid["id"], request_id="same")
        for _ in range(2):
            client.simulate_post(path, body=body, headers=headers)
        assert notify(client, gateway, paid["id"]).status_code == 200
        assert Payment.select().count() == 1 and len(events(alice.id)) == 1
        statuses = sorted(note.status for note in GatewayNotification.select())
        assert statuses == ["recorded", "unchanged", "unchanged"]

    def test_a_forged_notification_is_refused(self, client, alice, debt, gateway):
        paid = gateway.pay(link_for(client, alice).json["data"])
        forged = notify(client, gateway, paid["id"], secret="not-the-secret")
        assert forged.status_code == 401 and error_of(forged)["code"] == "invalid_signature"
        path, headers, body = gateway.notification(paid["id"])
        unsigned = client.simulate_post(path, body=body, headers={"x-request-id": headers["x-request-id"]})
        assert error_of(unsigned)["code"] == "missing_signature"
        # A signature for another resource does not carry over to this one.
        _path, other_headers, _body = gateway.notification("999")
        assert client.simulate_post(path, body=body, headers=other_headers).status_code == 401
        assert Payment.select().count() == 0 and GatewayNotification.select().count() == 0

    def test_a_notification_signed_without_an_id_is_refused_whatever_its_body_names(self, client, alice, debt,
                                                                                    gateway):
        paid = gateway.pay(link_for(client, alice).json["data"])
        # Signed with the company's own secret, but over no id: the body's id is the attacker's choice.
        refused = notify(client, gateway, paid["id"], id_in_query=False)
        assert refused.status_code == 400 and error_of(refused)["code"] == "invalid_notification"
        assert "data.id" in error_of(refused)["message"]
        assert Payment.select().count() == 0 and GatewayNotification.select().count() == 0
        # The gateway's own notification, the id in its signed query, still records the payment.
        assert notify(client, gateway, paid["id"]).json["data"]["status"] == "accepted"
        assert [p.transaction_id for p in Payment.select()] == [str(paid["id"])]

    def test_a_replayed_notification_is_refused(self, client, alice, debt, gateway):
        paid = gateway.pay(link_for(client, alice).json["data"])
        ten_minutes_ago = int((time.time() - 600) * 1000)
        replayed = notify(client, gateway, paid["id"], ts=ten_minutes_ago)
        assert replayed.status_code == 401 and error_of(replayed)["code"] == "stale_notification"
        assert Payment.select().count() == 0

    def test_an_unknown_company_or_one_without_gateway_is_not_found(self, client, alice, charlie, debt, gateway):
        path, headers, body = gateway.notification("1")
        assert client.simulate_post(path.replace(alice.tenant.public_id, "ten_nobody"), body=body,
                                    headers=headers).status_code == 404
        assert client.simulate_post(path.replace(alice.tenant.public_id, charlie.tenant.public_id), body=body,
                                    headers=headers).status_code == 404

    @pytest.mark.parametrize("claim", [{"transaction_amount": 5000}, {"currency_id": "MXN"}])
    def test_a_notification_contradicting_the_gateways_record_is_refused(self, client, alice, debt, gateway,
                                                                        claim, caplog):
        paid = gateway.pay(link_for(client, alice).json["data"])
        assert notify(client, gateway, paid["id"], data=claim).status_code == 200
        [note] = GatewayNotification.select()
        assert note.status == "refused" and "the gateway records" in note.outcome
        assert "refused" in caplog.text
        assert Payment.select().count() == 0 and read_debt(client, alice)["saldo_pendiente"] == 300

    def test_a_payment_in_another_currency_is_refused_and_logged(self, client, alice, debt, gateway, caplog):
        paid = gateway.pay(link_for(client, alice).json["data"], currency="MXN")
        notify(client, gateway, paid["id"])
        [note] = GatewayNotification.select()
        assert note.status == "refused" and "MXN" in note.outcome and "MXN" in caplog.text
        assert Payment.select().count() == 0

    def test_a_declined_payment_records_nothing(self, client, alice, debt, gateway):
        paid = gateway.pay(link_for(client, alice).json["data"], outcome="decline")
        notify(client, gateway, paid["id"])
        assert GatewayNotification.get().status == "ignored" and Payment.select().count() == 0

    def test_partial_and_over_payments(self, client, alice, debt, gateway):
        link = link_for(client, alice, monto=300).json["data"]
        first = gateway.pay(link, amount="40.25")
        notify(client, gateway, first["id"])
        assert read_debt(client, alice)["saldo_pendiente"] == 259.75
        second = gateway.pay(link, amount="400")
        notify(client, gateway, second["id"])
        debt_now = read_debt(client, alice)
        assert debt_now["saldo_pendiente"] == 0 and debt_now["status"] == "paid"
        over = Payment.get(Payment.transaction_id == str(second["id"]))
        assert (over.monto, over.unassigned) == (40000, 14025)


class TestReversals:
    def test_a_refund_then_a_chargeback_restore_the_balance_and_reach_the_export(self, client, alice, debt, gateway):
        link = link_for(client, alice, monto=300).json["data"]
        paid = gateway.pay(link)
        notify(client, gateway, paid["id"])
        assert read_debt(client, alice)["status"] == "paid"
        gateway.control(f"payments/{paid['id']}/refund", amount="50")
        notify(client, gateway, paid["id"])
        debt_now = read_debt(client, alice)
        assert debt_now["saldo_pendiente"] == 50 and debt_now["status"] == "partial"
        assert [c["estado"] for c in debt_now["cuotas"]] == ["paid", "paid", "partial"]
        gateway.control(f"payments/{paid['id']}/chargeback")
        notify(client, gateway, paid["id"])
        notify(client, gateway, paid["id"])
        assert read_debt(client, alice)["saldo_pendiente"] == 300
        assert [(r.kind, r.amount) for r in PaymentReversal.select().order_by(PaymentReversal.id)] == [
            ("refund", 5000), ("chargeback", 25000)]
        rows = list(export.export_rows(alice.id))
        assert [(row["tipo"], row["monto"], row["motivo"]) for row in rows] == [
            ("pago", Decimal("300.00"), None), ("reverso", Decimal("-50.00"), "refund"),
            ("reverso", Decimal("-250.00"), "chargeback")]
        assert [row["cursor"] for row in rows] == [1, 2, 3]


class TestReconciliation:
    def test_a_payment_whose_notification_was_lost_is_recorded(self, client, alice, debt, gateway):
        link = link_for(client, alice).json["data"]
        paid = gateway.pay(link)
        assert reconcile_payments.call_local() == 1  # the periodic task, over every connected company
        assert GatewayNotification.select().count() == 0 and Payment.get().transaction_id == str(paid["id"])
        assert read_debt(client, alice)["saldo_pendiente"] == 200 and len(events(alice.id)) == 1
        assert payments.reconcile(alice.id) == []
        # The late notification finds it recorded.
        notify(client, gateway, paid["id"])
        assert GatewayNotification.get().status == "unchanged" and Payment.select().count() == 1

    def test_a_notification_whose_task_was_lost_is_processed_by_the_periodic_run(self, client, alice, debt,
                                                                                  gateway, immediate_queue):
        paid = gateway.pay(link_for(client, alice).json["data"])
        immediate_queue.immediate = False  # the queued task never runs: a queue lost with it
        try:
            assert notify(client, gateway, paid["id"]).json["data"]["status"] == "accepted"
        finally:
            immediate_queue.immediate = True
        GatewayNotification.update(received_at=dt.datetime(2020, 1, 1)).execute()
        assert reconcile_payments.call_local() == 0  # recorded by the notification, not by the search
        assert GatewayNotification.get().status == "recorded" and Payment.select().count() == 1

    def test_the_cli_reports_what_it_recorded(self, alice, debt, gateway, client):
        gateway.pay(link_for(client, alice).json["data"])
        result = runner.invoke(svcctl, ["payments", "reconcile", "--tenant", alice.tenant.public_id, "--json"])
        assert result.exit_code == 0, result.output
        assert '"recorded"' in result.output
        # Other sellers' payments on the same gateway account are not ours: nothing more to record.
        result = runner.invoke(svcctl, ["payments", "reconcile", "--tenant", alice.tenant.public_id, "--json"])
        assert result.output.strip() == "[]"


class TestExport:
    def test_the_feed_by_cursor_over_the_api_and_the_cli(self, client, alice, charlie, debt, gateway, tmp_path):
        for amount in ("10", "20.5", "30"):
            debts.record_service_payment(alice.id, "D-1", amount, "cash")
        page = client.simulate_get("/api/v1/cartera/pagos", params={"limit": 2}, headers=alice.headers)
        assert page.status_code == 200, page.text
        assert [row["monto"] for row in page.json["data"]] == [10, 20.5]
        assert page.json["meta"] == {"next_cursor": 2, "has_more": True}
        rest = client.simulate_get("/api/v1/cartera/pagos", params={"cursor": 2}, headers=alice.headers).json
        assert [row["monto"] for row in rest["data"]] == [30] and rest["meta"]["has_more"] is False
        assert client.simulate_get("/api/v1/cartera/pagos", headers=charlie.headers).json["data"] == []
        bad = client.simulate_get("/api/v1/cartera/pagos", params={"since": "yesterday"}, headers=alice.headers)
        assert bad.status_code == 422
        # The nightly job: the first run gets everything, the next only what is new.
        cursor = tmp_path / "cursor"
        args = ["cartera", "payments", "export", "--tenant", alice.tenant.public_id, "--cursor-file", str(cursor),
                "--since", "2020-01-01"]
        first = runner.invoke(svcctl, args)
        assert first.exit_code == 0, first.output
        lines = first.stdout.strip().splitlines()
        assert lines[0].startswith("cursor,tipo,boty_payment_id") and len(lines) == 4
        assert ",20.50,USD,cash," in lines[2] and cursor.read_text().strip() == "3"
        debts.record_service_payment(alice.id, "D-1", "1", "cash")
        second = runner.invoke(svcctl, [*args, "--format", "jsonl"])
        assert [line for line in second.stdout.strip().splitlines()] and '"monto":"1.00"' in second.stdout
        assert len(second.stdout.strip().splitlines()) == 1 and cursor.read_text().strip() == "4"


@pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
def test_notifications_of_one_payment_processed_at_once_record_it_once(client, alice, debt, gateway, storage):
    paid = gateway.pay(link_for(client, alice).json["data"])
    transaction = payments.client_for(alice.id).get_transaction(str(paid["id"]))
    outcomes, errors = [], []
    barrier = threading.Barrier(6)

    def apply():
        try:
            with connection():
                barrier.wait()
                outcomes.append(payments.apply_transaction(alice.id, transaction)[0])
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=apply) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(outcomes) == ["recorded"] + ["unchanged"] * 5
    assert Payment.select().count() == 1 and len(events(alice.id)) == 1
    assert Debt.get().saldo_pendiente == 20000 and [r["cursor"] for r in export.export_rows(alice.id)] == [1]


class TestCredentials:
    def test_connect_reads_the_secrets_from_stdin_and_stores_them_encrypted(self, alice):
        result = runner.invoke(svcctl, ["payments", "connect", "--tenant", alice.tenant.public_id, "--json"],
                               input="APP_USR-token-1\nwebhook-secret-1\n")
        assert result.exit_code == 0, result.output
        assert f"/payments/webhook/{alice.tenant.public_id}" in result.stdout
        assert "APP_USR-token-1" not in result.output and "webhook-secret-1" not in result.output
        stored = PaymentGateway.get()
        assert "APP_USR-token-1" not in stored.access_token_ciphertext
        assert payments.webhook_secret_of(alice.id) == "webhook-secret-1"
        assert payments.client_for(alice.id)._token == "APP_USR-token-1"
        refused = runner.invoke(svcctl, ["payments", "connect", "--tenant", alice.tenant.public_id], input="only\n")
        assert refused.exit_code == 1 and "one a line" in refused.output

    @pytest.mark.parametrize("name,value", [("SVC_PAYMENTS_GATEWAY_URL", "ftp://x"),
                                            ("SVC_PAYMENTS_LINK_TTL_HOURS", "0"),
                                            ("SVC_PAYMENTS_NOTIFICATION_TOLERANCE", "soon")])
    def test_a_bad_setting_names_its_variable(self, name, value, tmp_path):
        from config import ConfigError, load_settings

        with pytest.raises(ConfigError, match=name):
            load_settings({"SVC_DATA_DIR": str(tmp_path), name: value})


@pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
def test_payments_on_several_debts_at_once_get_export_numbers_without_gaps(client, alice, account, gateway):
    for index in range(4):
        body = debt_body(account.public_id, f"D-{index}", deudor={"nombre": "Ana", "documento": f"doc-{index}"})
        assert post(client, alice, "/deudas", body).status_code == 201
    barrier = threading.Barrier(8)
    errors = []

    def pay(index):
        try:
            with connection():
                barrier.wait()
                debts.record_service_payment(alice.id, f"D-{index % 4}", "1", "cash")
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=pay, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [row["cursor"] for row in export.export_rows(alice.id)] == list(range(1, 9))
