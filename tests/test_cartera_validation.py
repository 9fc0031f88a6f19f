"""Validation of debt bodies: required fields, types, currencies and exact amounts.

These rules do not depend on the database engine, so they run on SQLite only.
"""

from __future__ import annotations

import pytest

from models.cartera import Debt
from tests.cartera_fixtures import debt_body, error_of, get_debt, make_account, post
from tests.cartera_fixtures import sqlite_only as storage  # noqa: F401  (SQLite only, see its doc)


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
