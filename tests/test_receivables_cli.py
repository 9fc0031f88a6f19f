"""svcctl cartera: import (CSV and JSON Lines), show, list, pay, resolve, endpoint set."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from models.events.tables import Event
from models.receivables.tables import Debt, Debtor, Installment, Payment
from svcctl.main import app
from tests.receivables_fixtures import debt_body, make_account, sqlite_only_mark
from tests.webhooks_fixtures import *  # noqa: F403  (receiver: a real HTTPS endpoint on loopback)
from tests.webhooks_fixtures import verify

runner = CliRunner()
HEADER = ("external_id,external_version,account_id,deudor_nombre,deudor_documento,deudor_telefono,moneda,"
          "referencia,monto_original,saldo_pendiente,tipo,auto_send,cuota_external_id,cuota_numero,cuota_monto,"
          "cuota_vence,cuota_estado")


@pytest.fixture
def account(alice):
    return make_account(alice)


def csv_row(account_id: str, external_id: str, installment_id: str = "", number: str = "", amount: str = "",
            due_date: str = "", status: str = "", *, document: str | None = None, balance: str = "300.00",
            version: str = "1", currency: str = "USD", name: str = "Ana Pérez", auto_send: str = "true") -> str:
    document = document if document is not None else f"doc-{external_id}"
    return (f"{external_id},{version},{account_id},{name},{document},,{currency},Factura {external_id},300.00,"
            f"{balance},,{auto_send},{installment_id},{number},{amount},{due_date},{status}")


def three_installments(account_id: str, external_id: str, **options) -> list[str]:
    return [csv_row(account_id, external_id, f"{external_id}-{n}", str(n), "100.00", f"2031-0{n}-10", "pending",
                    **options) for n in (1, 2, 3)]


def run(*args: str, input: str | bytes | None = None):
    return runner.invoke(app, list(args), input=input)


def write(tmp_path, name: str, lines: list[str]) -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


class TestCsvImport:
    def test_it_imports_debts_with_their_installments(self, alice, account, tmp_path):
        lines = [HEADER, *three_installments(account.public_id, "D-1"),
                 csv_row(account.public_id, "D-2"),  # no installments: a single debt
                 *three_installments(account.public_id, "D-3")]
        result = run("cartera", "import", "--tenant", alice.tenant.public_id, write(tmp_path, "debts.csv", lines),
                     "--json")
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout) == {"created": 3, "updated": 0, "ignored_stale": 0, "errors": 0,
                                             "debts": 3, "rows": 7}
        assert Installment.select().count() == 6
        single = Debt.get(Debt.external_id == "D-2")
        assert (single.tipo, single.auto_send, single.saldo_pendiente, single.referencia) == (
            "single", True, 30000, "Factura D-2")

    @sqlite_only_mark
    def test_bad_rows_are_reported_with_their_line_and_good_rows_saved(self, alice, account, tmp_path):
        d2 = three_installments(account.public_id, "D-2")
        d2[1] = d2[1].replace(",100.00,", ",100.001,")  # line 6: too many decimals for USD
        lines = [HEADER,
                 *three_installments(account.public_id, "D-1"),       # lines 2-4
                 *d2,                                                 # lines 5-7
                 csv_row(account.public_id, "D-3", currency="XXQ"),     # line 8
                 "D-4,1,only,three",                                  # line 9
                 csv_row(account.public_id, "D-5", "c1", "1", "300.00", "2031-13-01"),  # line 10
                 *three_installments(account.public_id, "D-6")]       # lines 11-13
        errors_file = tmp_path / "errors.jsonl"
        result = run("cartera", "import", "--tenant", alice.tenant.public_id, write(tmp_path, "debts.csv", lines),
                     "--errors", str(errors_file), "--json")
        assert result.exit_code == 1
        assert json.loads(result.stdout) == {"created": 2, "updated": 0, "ignored_stale": 0, "errors": 4,
                                             "debts": 6, "rows": 12}
        assert set(Debt.select(Debt.external_id).tuples()) == {("D-1",), ("D-6",)}
        reported = [json.loads(line) for line in errors_file.read_text().splitlines()]
        assert [(e["line"], e["external_id"]) for e in reported] == [(6, "D-2"), (8, "D-3"), (9, "D-4"),
                                                                      (10, "D-5")]
        assert reported[0]["message"].startswith("cuota_monto: USD amounts have at most 2 decimals")
        assert "cuota_monto" in reported[0]["details"]["errors"]
        assert reported[1]["message"].startswith("moneda:")
        assert "expected 17 cells" in reported[2]["message"]
        assert reported[3]["message"].startswith("cuota_vence:")
        assert "line 6 (D-2):" in result.stderr and "line 9 (D-4):" in result.stderr

    @sqlite_only_mark
    def test_a_number_too_long_for_any_field_refuses_its_row_only(self, alice, account, tmp_path):
        huge = "9" * 5000  # past Python's limit on converting digits to int
        lines = [HEADER, csv_row(account.public_id, "D-1", version=huge),
                 csv_row(account.public_id, "D-2", "c1", huge, "300.00", "2031-01-10", "pending"),
                 csv_row(account.public_id, "D-3")]
        errors_file = tmp_path / "errors.jsonl"
        result = run("cartera", "import", "--tenant", alice.tenant.public_id, write(tmp_path, "debts.csv", lines),
                     "--errors", str(errors_file), "--json")
        assert result.exit_code == 1, result.stderr
        assert json.loads(result.stdout)["created"] == 1
        reported = [json.loads(line) for line in errors_file.read_text().splitlines()]
        assert [(e["line"], e["code"]) for e in reported] == [(2, "validation_failed"), (3, "validation_failed")]
        assert reported[0]["message"].startswith("external_version:")
        assert reported[1]["message"].startswith("cuota_numero:")

    @sqlite_only_mark
    def test_a_debt_with_a_bad_row_is_skipped_whole_so_no_installment_is_cancelled(self, alice, account, tmp_path):
        first = [HEADER, *three_installments(account.public_id, "D-1")]
        tenant = alice.tenant.public_id
        assert run("cartera", "import", "--tenant", tenant, write(tmp_path, "a.csv", first)).exit_code == 0
        resend = [HEADER, *three_installments(account.public_id, "D-1", version="2")]
        resend[3] = resend[3].replace("2031-03-10", "someday")
        result = run("cartera", "import", "--tenant", alice.tenant.public_id, write(tmp_path, "b.csv", resend))
        assert result.exit_code == 1
        assert {i.status for i in Installment.select()} == {"pending"}
        assert Debt.get().external_version == 1

    @sqlite_only_mark
    def test_rows_of_one_debt_must_agree_on_the_debt(self, alice, account, tmp_path):
        rows = three_installments(account.public_id, "D-1")
        rows[2] = rows[2].replace("300.00,300.00", "300.00,250.00")
        errors_file = tmp_path / "errors.csv"
        result = run("cartera", "import", "--tenant", alice.tenant.public_id,
                     write(tmp_path, "debts.csv", [HEADER, *rows]), "--errors", str(errors_file))
        assert result.exit_code == 1
        reported = errors_file.read_text().splitlines()
        assert reported[0] == "line,external_id,code,message"
        assert reported[1].startswith("4,D-1,validation_failed,")
        assert Debt.select().count() == 0

    def test_a_reimport_updates_and_ignores_stale_versions(self, alice, account, tmp_path):
        source = write(tmp_path, "v2.csv", [HEADER, *three_installments(account.public_id, "D-1", version="2"),
                                            *three_installments(account.public_id, "D-2", version="2")])
        run("cartera", "import", "--tenant", alice.tenant.public_id, source)
        lines = [HEADER, *three_installments(account.public_id, "D-1", version="1", balance="1.00"),
                 *three_installments(account.public_id, "D-2", version="3", balance="200.00")]
        result = run("cartera", "import", "--tenant", alice.tenant.public_id, write(tmp_path, "mix.csv", lines),
                     "--json")
        assert json.loads(result.stdout)["ignored_stale"] == 1
        assert json.loads(result.stdout)["updated"] == 1
        assert Debt.get(Debt.external_id == "D-1").saldo_pendiente == 30000
        assert Debt.get(Debt.external_id == "D-2").saldo_pendiente == 20000

    def test_the_importer_applies_the_apis_rules(self, alice, charlie, account, tmp_path):
        foreign = make_account(charlie, phone="56900001111")
        lines = [HEADER, csv_row(account.public_id, "D-1", document="1-9"),
                 csv_row(foreign.public_id, "D-2"),
                 csv_row(account.public_id, "D-3", document="1-9", name="Ana María")]
        errors_file = tmp_path / "errors.jsonl"
        result = run("cartera", "import", "--tenant", alice.tenant.public_id, write(tmp_path, "d.csv", lines),
                     "--errors", str(errors_file))
        assert result.exit_code == 1
        reported = [json.loads(line) for line in errors_file.read_text().splitlines()]
        assert [(e["line"], e["code"]) for e in reported] == [(3, "account_not_found")]
        assert Debtor.select().count() == 1 and Debtor.get().nombre == "Ana María"

    @sqlite_only_mark
    def test_it_reads_stdin_and_small_batches(self, alice, account):
        lines = [HEADER] + [row for n in range(7) for row in three_installments(account.public_id, f"D-{n}")]
        result = run("cartera", "import", "--tenant", alice.tenant.public_id, "-", "--batch-size", "2", "--json",
                     input="\n".join(lines) + "\n")
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["created"] == 7
        assert Debt.select().count() == 7

    @sqlite_only_mark
    def test_a_bad_header_imports_nothing(self, alice, tmp_path):
        result = run("cartera", "import", "--tenant", alice.tenant.public_id,
                     write(tmp_path, "d.csv", ["external_id,nombre", "D-1,Ana"]))
        assert result.exit_code == 1
        assert "bad CSV header" in result.stderr and "missing" in result.stderr

    @sqlite_only_mark
    def test_undecodable_bytes_refuse_only_their_row(self, alice, account, tmp_path):
        path = tmp_path / "latin1.csv"
        lines = [HEADER, csv_row(account.public_id, "D-1"), csv_row(account.public_id, "D-2", name="Ana Pérez")]
        path.write_bytes("\n".join(lines[:2]).encode() + b"\n" + lines[2].encode("latin-1") + b"\n")
        result = run("cartera", "import", "--tenant", alice.tenant.public_id, str(path), "--json")
        assert json.loads(result.stdout)["errors"] == 1
        assert "line 3 (D-2): the row is not valid UTF-8" in result.stderr

    @sqlite_only_mark
    def test_an_unknown_tenant_or_file_is_one_line(self, alice, tmp_path):
        result = run("cartera", "import", "--tenant", "ten_nope", str(tmp_path / "x.csv"))
        assert result.exit_code == 1 and "no tenant ten_nope" in result.stderr
        result = run("cartera", "import", "--tenant", alice.tenant.public_id, str(tmp_path / "x.csv"))
        assert result.exit_code == 1 and "cannot read" in result.stderr


class TestJsonLinesImport:
    @sqlite_only_mark
    def test_good_lines_are_saved_and_bad_ones_reported(self, alice, account, tmp_path):
        lines = [json.dumps(debt_body(account.public_id, "D-1")),
                 "",
                 "{not json",
                 json.dumps(debt_body(account.public_id, "D-2", moneda="CLP", monto_original=1000.5)),
                 json.dumps(debt_body(account.public_id, "D-3", deudor={"nombre": "Beto", "documento": "2-7"})),
                 "[1, 2]"]
        source = write(tmp_path, "debts.jsonl", lines)
        errors_file = tmp_path / "errors.jsonl"
        result = run("cartera", "import", "--tenant", alice.tenant.public_id, source, "--errors", str(errors_file),
                     "--json")
        assert result.exit_code == 1
        assert json.loads(result.stdout) == {"created": 2, "updated": 0, "ignored_stale": 0, "errors": 3,
                                             "debts": 5, "rows": 5}
        reported = [json.loads(line) for line in errors_file.read_text().splitlines()]
        assert [(e["line"], e["external_id"], e["code"]) for e in reported] == [
            (3, None, "invalid_json"), (4, "D-2", "validation_failed"), (6, None, "validation_failed")]
        assert "monto_original" in reported[1]["details"]["errors"]

    @sqlite_only_mark
    def test_amounts_stay_exact(self, alice, account):
        line = (f'{{"external_id": "D-1", "account_id": "{account.public_id}", "deudor": {{"nombre": "Ana", '
                f'"documento": "1"}}, "moneda": "USD", "monto_original": 12345678.91, "saldo_pendiente": 0.3}}')
        result = run("cartera", "import", "--tenant", alice.tenant.public_id, "--format", "jsonl", "-",
                     input=line + "\n")
        assert result.exit_code == 0, result.stderr
        assert (Debt.get().monto_original, Debt.get().saldo_pendiente) == (1234567891, 30)


class TestOtherCommands:
    @pytest.fixture
    def debt(self, alice, account, tmp_path):
        lines = [HEADER, *three_installments(account.public_id, "D-1")]
        tenant = alice.tenant.public_id
        assert run("cartera", "import", "--tenant", tenant, write(tmp_path, "d.csv", lines)).exit_code == 0
        return "D-1"

    @sqlite_only_mark
    def test_show_prints_the_debt(self, alice, debt):
        data = json.loads(run("cartera", "show", "--tenant", alice.tenant.public_id, "D-1", "--json").stdout)
        assert (data["external_id"], data["saldo_pendiente"], len(data["cuotas"])) == ("D-1", 300, 3)
        table = run("cartera", "show", "--tenant", alice.tenant.public_id, "D-1")
        assert table.exit_code == 0 and "D-1-3" in table.stdout
        missing = run("cartera", "show", "--tenant", alice.tenant.public_id, "nope")
        assert missing.exit_code == 1 and "no debt nope" in missing.stderr

    @sqlite_only_mark
    def test_list_filters_by_status(self, alice, debt):
        run("cartera", "pay", "--tenant", alice.tenant.public_id, "--debt", "D-1", "--amount", "10", "--method", "cash")
        partial = json.loads(run("cartera", "list", "--tenant", alice.tenant.public_id, "--status", "partial",
                                 "--json").stdout)
        assert [d["external_id"] for d in partial] == ["D-1"]
        pending = json.loads(run("cartera", "list", "--tenant", alice.tenant.public_id, "--status", "pending",
                                 "--json").stdout)
        assert pending == []
        assert run("cartera", "list", "--tenant", alice.tenant.public_id, "--status", "late").exit_code == 1

    def test_pay_records_a_service_payment_and_its_event(self, alice, debt):
        result = run("cartera", "pay", "--tenant", alice.tenant.public_id, "--debt", "D-1", "--amount", "150.25",
                     "--method", "cash", "--json")
        assert result.exit_code == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["boty_payment_id"].startswith("bpay_")
        assert (data["monto"], data["saldo_pendiente"], data["status"]) == (150.25, 149.75, "partial")
        event = Event.get(Event.name == "debt.payment_received")
        assert event.payload["data"]["pago"]["boty_payment_id"] == data["boty_payment_id"]
        assert Payment.get().origin == "service"

    @sqlite_only_mark
    def test_pay_refuses_bad_input_in_one_line(self, alice, debt):
        for amount, method, message in (("1.001", "cash", "at most 2 decimals"), ("ten", "cash", "must be a number"),
                                        ("10", "barter", "metodo")):
            result = run("cartera", "pay", "--tenant", alice.tenant.public_id, "--debt", "D-1", "--amount", amount,
                         "--method", method)
            assert result.exit_code == 1 and message in result.stderr
        assert Payment.select().count() == 0

    @sqlite_only_mark
    def test_resolve(self, alice, debt):
        data = json.loads(run("cartera", "resolve", "--tenant", alice.tenant.public_id, "D-1", "--status",
                              "written_off", "--json").stdout)
        assert data["status"] == "written_off"

    def test_endpoint_set_prints_the_secret_once(self, alice):
        result = run("cartera", "endpoint", "set", "--tenant", alice.tenant.public_id, "--url",
                     "https://erp.example.test/hooks/payments", "--json")
        assert result.exit_code == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["url"] == "https://erp.example.test/hooks/payments"
        assert data["events"] == ["debt.payment_received"]
        assert data["signing_secret"].startswith(data["signing_secret_preview"][:6])
        bad = run("cartera", "endpoint", "set", "--tenant", alice.tenant.public_id, "--url", "http://x.test")
        assert bad.exit_code == 1 and "url" in bad.stderr


def test_a_payment_in_the_service_reaches_the_erp_signed(alice, account, receiver, tmp_path):
    tenant = alice.tenant.public_id
    lines = [HEADER, *three_installments(account.public_id, "D-1")]
    assert run("cartera", "import", "--tenant", tenant, write(tmp_path, "d.csv", lines)).exit_code == 0
    endpoint = json.loads(run("cartera", "endpoint", "set", "--tenant", tenant, "--url",
                              receiver.url(path="/erp/payments"), "--json").stdout)
    paid = json.loads(run("cartera", "pay", "--tenant", tenant, "--debt", "D-1", "--amount", "100.10",
                          "--method", "transfer", "--transaction-id", "op-77", "--json").stdout)
    [request] = receiver.wait_for(1)
    assert verify(request, endpoint["signing_secret"])
    assert request.path == "/erp/payments"
    assert request.headers["X-Service-Event"] == "debt.payment_received"
    body = json.loads(request.body)
    assert request.headers["X-Service-Event-Id"] == body["id"]
    assert body["data"] == {
        "deuda_external_id": "D-1",
        "pago": {"boty_payment_id": paid["boty_payment_id"], "external_id": None, "transaction_id": "op-77",
                 "monto": 100.1, "moneda": "USD", "metodo": "transfer", "pagado_en": paid["pagado_en"]},
        "saldo_pendiente": 199.9, "status": "partial"}
