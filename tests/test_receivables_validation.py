"""Validation of debt bodies: required fields, types, currencies and exact amounts.

These rules do not depend on the database engine, so they run on SQLite only.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.receivables.tables import Debt
from tests.receivables_fixtures import debt_body, error_of, get_debt, make_account, post
from tests.receivables_fixtures import sqlite_only as storage  # noqa: F401  (SQLite only, see its doc)


@pytest.fixture
def account(alice):
    return make_account(alice)


class TestValidation:
    @pytest.mark.parametrize("missing", ["external_id", "account_id", "deudor", "moneda", "monto_original",
                                         "saldo_pendiente"])
    def test_required_fields(self, client, alice, account, missing):
        body = debt_body(account.public_id)
        del body[missing]
        response = post(client, alice, "/deudas", body)
        assert response.status_code == 422
        error = error_of(response)
        assert error["code"] == "validation_failed"
        assert missing in error["details"]["errors"]

    def test_the_debtor_needs_a_name(self, client, alice, account):
        body = debt_body(account.public_id, deudor={"documento": "1-9"})
        response = post(client, alice, "/deudas", body)
        assert "deudor.nombre" in error_of(response)["details"]["errors"]

    def test_the_debtor_needs_a_document_or_a_phone(self, client, alice, account):
        body = debt_body(account.public_id, deudor={"nombre": "Ana"})
        response = post(client, alice, "/deudas", body)
        assert response.status_code == 422
        assert "deudor" in error_of(response)["details"]["errors"]

    @pytest.mark.parametrize("deudor", [{"nombre": "Ana", "documento": "1-9"},
                                        {"nombre": "Ana", "telefono": "56900001111"}])
    def test_either_key_is_enough(self, client, alice, account, deudor):
        assert post(client, alice, "/deudas", debt_body(account.public_id, deudor=deudor)).status_code == 201

    def test_a_phone_is_normalized_to_digits(self, client, alice, account):
        body = debt_body(account.public_id, deudor={"nombre": "Ana", "telefono": "+56 9 2222-3333"})
        post(client, alice, "/deudas", body)
        assert get_debt(client, alice, "D-1").json["data"]["deuda"]["deudor"]["telefono"] == "56922223333"

    @pytest.mark.parametrize("telefono", ["12ab5678", "1234", "1" * 16])
    def test_a_phone_that_is_not_a_number_is_refused(self, client, alice, account, telefono):
        body = debt_body(account.public_id, deudor={"nombre": "Ana", "telefono": telefono})
        assert "deudor.telefono" in error_of(post(client, alice, "/deudas", body))["details"]["errors"]

    @pytest.mark.parametrize("moneda", ["US", "usdd", "ABC", "12$"])
    def test_the_currency_is_an_iso_4217_code(self, client, alice, account, moneda):
        response = post(client, alice, "/deudas", debt_body(account.public_id, moneda=moneda))
        assert response.status_code == 422
        assert "moneda" in error_of(response)["details"]["errors"]

    def test_a_lowercase_currency_is_accepted_as_its_code(self, client, alice, account):
        post(client, alice, "/deudas", debt_body(account.public_id, moneda="usd"))
        assert get_debt(client, alice, "D-1").json["data"]["deuda"]["moneda"] == "USD"

    @pytest.mark.parametrize("field,value", [("tipo", "monthly"), ("auto_send", "yes"), ("external_version", -1),
                                             ("external_version", "7"), ("monto_original", 0),
                                             ("saldo_pendiente", -1), ("monto_original", True),
                                             ("external_updated_at", "2025-01-01T10:00:00"),
                                             ("external_updated_at", "yesterday")])
    def test_bad_field_values(self, client, alice, account, field, value):
        response = post(client, alice, "/deudas", debt_body(account.public_id, **{field: value}))
        assert response.status_code == 422
        assert field in error_of(response)["details"]["errors"]

    @pytest.mark.parametrize("change,path", [
        ({"estado": "late"}, "cuotas.0.estado"),
        ({"vence": "10/01/2031"}, "cuotas.0.vence"),
        ({"vence": "2031-02-30"}, "cuotas.0.vence"),
        ({"numero": 0}, "cuotas.0.numero"),
        ({"monto": -5}, "cuotas.0.monto"),
        ({"monto": 10.001}, "cuotas.0.monto"),
        ({"external_id": "D-1-2"}, "cuotas.1.external_id"),
        ({"surprise": 1}, "cuotas.0.surprise"),
    ])
    def test_bad_installments(self, client, alice, account, change, path):
        body = debt_body(account.public_id)
        body["cuotas"][0].update(change)
        response = post(client, alice, "/deudas", body)
        assert response.status_code == 422
        assert path in error_of(response)["details"]["errors"], error_of(response)

    def test_unknown_fields_are_refused(self, client, alice, account):
        response = post(client, alice, "/deudas", debt_body(account.public_id, interes=3))
        assert "interes" in error_of(response)["details"]["errors"]

    @pytest.mark.parametrize("raw", [b"{", b"[]", b"", b'{"monto_original": NaN}'])
    def test_a_body_that_is_not_an_object_is_422(self, client, alice, raw):
        response = post(client, alice, "/deudas", None, raw=raw)
        assert response.status_code == 422
        assert error_of(response)["code"] == "validation_failed"

    def test_nul_characters_are_refused(self, client, alice, account):
        raw = (b'{"external_id": "D\\u0000"}')
        assert post(client, alice, "/deudas", None, raw=raw).status_code == 422


class TestMoney:
    @pytest.mark.parametrize("moneda,amount,ok", [
        ("USD", "12.34", True), ("USD", "12.345", False), ("CLP", "1500", True), ("CLP", "1500.5", False),
        ("JPY", "100", True), ("JPY", "100.0", True), ("KWD", "1.234", True), ("KWD", "1.2345", False),
        ("EUR", "0.1", True),
    ])
    def test_decimals_follow_the_currency(self, client, alice, account, moneda, amount, ok):
        raw = (f'{{"external_id": "D-1", "account_id": "{account.public_id}", "deudor": {{"nombre": "Ana", '
               f'"documento": "1-9"}}, "moneda": "{moneda}", "monto_original": {amount}, '
               f'"saldo_pendiente": {amount}}}').encode()
        response = post(client, alice, "/deudas", None, raw=raw)
        assert (response.status_code == 201) is ok, response.json
        if not ok:
            assert "monto_original" in error_of(response)["details"]["errors"]

    def test_amounts_are_exact_not_floats(self, client, alice, account):
        raw = (f'{{"external_id": "D-1", "account_id": "{account.public_id}", "deudor": {{"nombre": "Ana", '
               f'"documento": "1-9"}}, "moneda": "USD", "monto_original": 12345678.91, '
               f'"saldo_pendiente": 0.30000000000000004}}').encode()
        response = post(client, alice, "/deudas", None, raw=raw)
        # 0.1 + 0.2 as a float has 17 decimals: refused rather than rounded into 0.30.
        assert "saldo_pendiente" in error_of(response)["details"]["errors"]
        raw = raw.replace(b"0.30000000000000004", b"0.3")
        assert post(client, alice, "/deudas", None, raw=raw).status_code == 201
        debt = Debt.get()
        assert (debt.monto_original, debt.saldo_pendiente) == (1234567891, 30)
        assert b'"monto_original":12345678.91' in get_debt(client, alice, "D-1").content

    def test_a_decimal_that_a_float_would_round_is_refused(self, client, alice, account):
        raw = (f'{{"external_id": "D-1", "account_id": "{account.public_id}", "deudor": {{"nombre": "Ana", '
               f'"documento": "1-9"}}, "moneda": "USD", "monto_original": 10.0000000000000000001, '
               f'"saldo_pendiente": 10}}').encode()
        assert post(client, alice, "/deudas", None, raw=raw).status_code == 422

    def test_decimal_strings_are_accepted(self, client, alice, account):
        response = post(client, alice, "/deudas", debt_body(account.public_id, monto_original="300.00",
                                                             saldo_pendiente="299.99"))
        assert response.status_code == 201
        assert response.json["data"]["deuda"]["saldo_pendiente"] == 299.99

    def test_amounts_beyond_15_digits_are_refused(self, client, alice, account):
        response = post(client, alice, "/deudas", debt_body(account.public_id, monto_original="10000000000000.00"))
        assert "monto_original" in error_of(response)["details"]["errors"]


class Unthrottled:
    """Alice with rate limits lifted: the examples below send hundreds of requests a minute."""

    def __init__(self, settings, alice):
        for name in ("write_rate_limit", "tenant_rate_limit"):
            object.__setattr__(settings, name, 10**6)  # the settings are frozen; this test owns them
        self.headers = alice.with_key(["all"], rate_limit=10**6)


@pytest.fixture
def fuzzer(sqlite_storage, alice):
    return Unthrottled(sqlite_storage, alice)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**20, max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["external_id", "account_id", "deudor", "deudor.nombre", "deudor.telefono", "moneda",
                             "monto_original", "saldo_pendiente", "external_version", "external_updated_at",
                             "tipo", "auto_send", "cuotas", "cuotas.0", "cuotas.0.monto", "cuotas.0.vence",
                             "cuotas.0.numero", "cuotas.0.estado", "referencia"]),
       value=JSON_VALUES)
def test_any_value_in_any_field_gets_an_answer_in_the_envelope(client, fuzzer, account, path, value):
    body = debt_body(account.public_id)
    target = body
    *parents, last = path.split(".")
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    response = post(client, fuzzer, "/deudas", body)
    assert response.status_code in (200, 201, 404, 409, 422), response.text
    if response.status_code >= 400:
        assert set(error_of(response)) == {"message", "code", "details"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_any_bytes_get_an_answer_in_the_envelope(client, fuzzer, raw):
    for path in ("/deudas", "/deudas/lote", "/pagos", "/deudas/D-1/resolver"):
        response = post(client, fuzzer, path, None, raw=raw)
        assert response.status_code in (404, 422), (path, response.text)
        assert response.json["success"] is False


CSV_HEADER = ("external_id,external_version,account_id,deudor_nombre,deudor_documento,deudor_telefono,moneda,"
              "referencia,monto_original,saldo_pendiente,tipo,auto_send,cuota_external_id,cuota_numero,cuota_monto,"
              "cuota_vence,cuota_estado")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.lists(st.lists(st.sampled_from(["", "D-1", "D-2", "1", "-3", "x", "12.345", "2031-01-10", "USD",
                                                 "true", "Ana", "56911112222", "pending", '"a,b"', "\x00", "é"]),
                               min_size=15, max_size=18), min_size=1, max_size=8))
def test_any_csv_rows_are_saved_or_reported_by_line(alice, account, cells):
    import io

    from models.receivables.importer import import_debts, read_csv

    lines = [",".join(account.public_id if index == 2 else cell for index, cell in enumerate(row)) for row in cells]
    errors = []
    summary = import_debts(alice.id, read_csv(io.BytesIO(("\n".join([CSV_HEADER, *lines]) + "\n").encode())),
                           on_error=errors.append)
    assert summary.errors == len(errors)
    assert all(2 <= error.line <= len(lines) + 1 for error in errors)
    assert summary.created + summary.updated + summary.ignored_stale <= summary.debts
