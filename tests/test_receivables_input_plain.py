"""The importer's short road to a debt spec (`plain_debt_spec`) against the API's (`parse_debt`).

Whatever the body, the short road either gives up or builds exactly the spec that `parse_debt`
builds: it never accepts a debt the API refuses, so the errors keep one source. No database.
"""

from __future__ import annotations

import copy
import datetime as dt
import io
import json
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.errors import Invalid
from models.receivables.importer import (
    CSV_COLUMNS,
    _checked_csv_debt,
    _csv_body,
    _csv_fields,
    _Layout,
    _plain_csv_debt,
    read_csv,
)
from models.receivables.inputs import DebtSpec, loads_exact, parse_debt, plain_debt_spec, plain_fields_spec

MISSING = object()

ACCEPTED_TEXT = ["a", "Ana Pérez", " Ana ", "D-1", "x" * 64, "é" * 64]
ANY_TEXT = st.sampled_from(["", " ", " a ", "\u00a0", "\u00a0a", "a\ud800", "\ud800", "é" * 160, "é" * 161, "x" * 161,
                            "x" * 255, "x" * 256, "x" * 500, "x" * 501, "x" * 65, "x" * 32, "x" * 33, "١٢٣",
                            "a\x00"]) | st.text(max_size=12)
OTHER = st.sampled_from([None, 1, 0, -1, True, False, 1.5, Decimal("1"), [], {}, ["a"], {"a": 1}])

AMOUNTS = ["1", "300", "99.90", "0.5", "1.2", "1.25", "1.250", "1.2500", "1.25000", "001", "00.10",
           "999999999999999", "9999999999999.99", "10000000000000", "10000000000000.00", "1000000000000000",
           "0", "0.0", "0.00", "-1", "-0", " 1", "1 ", "1.", ".5", "1e3", "1E3", "+1", "١", "1_000", "1,5",
           "²", "１", "1.²", "9" * 16, "0" * 20 + "1", "1." + "0" * 30, "1." + "0" * 60 + "1", "NaN", "Infinity", "",
           Decimal("1"), Decimal("99.90"), Decimal("0.001"), Decimal("1E+2"), Decimal("1E+30"), Decimal("-0"),
           Decimal("0"), Decimal("NaN"), Decimal("sNaN"), Decimal("Infinity"), Decimal("1.00000000000000000000001"),
           1, 0, -1, 10**13, 10**15, 10**16, 10**30, True, False, 1.5, None]
PHONES = ["56922223333", "+56 9 2222 3333", "(56) 9.2222-3333", "1234567", "12345678", "123456789012345",
          "1234567890123456", "５６９２２２２３３３３", "++56922223333", "56922223333 ", "56922223333".ljust(32),
          "56922223333".ljust(33), "", " ", "x" * 33]
CURRENCIES = ["USD", "usd", "Usd", "CLP", "clp", "BHD", "CLF", "JPY", "XAU", "XTS", "US", "USDD", " US", "US ",
              "ıNR", "ınr", "ſek", "ＵＳＤ", "U$D", "", "usd\ud800"]
DATES = ["2031-01-10", "2031-02-28", "2032-02-29", "2031-02-29", "2031-02-30", "2031-13-01", "2031-1-10",
         "20310110", "2031-W01-1", "٢٠٣١-٠١-١٠", " 2031-01-10", "2031-01-10T00:00:00", "",
         dt.date(2031, 1, 10), dt.datetime(2031, 1, 10), 20310110, None]
TIMESTAMPS = ["2025-03-01T10:00:00-03:00", "2025-03-01T10:00:00Z", "2025-03-01T10:00:00+00:00",
              "2025-03-01T10:00:00.123456+05:30", "2025-03-01T10:00:00", "2025-03-01", "2025-03-01 10:00:00Z",
              "2025-03-01T25:00:00Z", "T" * 65, "", dt.datetime(2025, 3, 1, tzinfo=dt.UTC), dt.datetime(2025, 3, 1),
              1, None]



def _replaced(obj: dict, name: str, value) -> dict:
    changed = {key: item for key, item in obj.items() if key != name}
    if value is not MISSING:
        changed[name] = value
    return changed


VALID_DEBTOR = st.builds(
    lambda name, keys: {"nombre": name, **keys}, st.sampled_from(ACCEPTED_TEXT),
    st.sampled_from([{"documento": "11111111-1"}, {"telefono": "56922223333"}, {"documento": " é ", "telefono": None},
                     {"documento": None, "telefono": "+56 9 2222 3333"},
                     {"documento": "11111111-1", "telefono": "56922223333"}]))
VALID = {
    "external_id": st.sampled_from(ACCEPTED_TEXT),
    "account_id": st.sampled_from(["wacc_1", "x" * 64]),
    "deudor": VALID_DEBTOR,
    "moneda": st.sampled_from(["USD", "usd", "CLP", "BHD", "CLF"]),
    "monto_original": st.sampled_from(["300", "1", 300, Decimal("300")]),
    "saldo_pendiente": st.sampled_from(["300", "0", 0, 300, Decimal("0")]),
    "external_version": st.sampled_from([MISSING, None, 0, 3, 2**63 - 1]),
    "external_updated_at": st.sampled_from([MISSING, None, "2025-03-01T10:00:00-03:00", "2025-03-01T10:00:00Z"]),
    "referencia": st.sampled_from([MISSING, None, "", "Factura 1", "x" * 500]),
    "tipo": st.sampled_from([MISSING, None, "installments", "single"]),
    "auto_send": st.sampled_from([MISSING, None, True, False]),
}
ANY = {
    "external_id": ANY_TEXT | OTHER,
    "account_id": ANY_TEXT | OTHER,
    "deudor": st.one_of(*(st.builds(_replaced, VALID_DEBTOR, st.just(name), values) for name, values in (
        ("nombre", ANY_TEXT | OTHER | st.just(MISSING)), ("documento", ANY_TEXT | OTHER | st.just(MISSING)),
        ("telefono", st.sampled_from(PHONES) | OTHER | st.just(MISSING)), ("otro", OTHER))), OTHER),
    "moneda": st.sampled_from(CURRENCIES) | OTHER,
    "monto_original": st.sampled_from(AMOUNTS),
    "saldo_pendiente": st.sampled_from(AMOUNTS),
    "external_version": st.sampled_from([-1, 2**63, True, "1", "١", Decimal("1"), 1.0]),
    "external_updated_at": st.sampled_from(TIMESTAMPS),
    "referencia": ANY_TEXT | OTHER,
    "tipo": st.sampled_from(["single", "SINGLE", "installments ", "", 1, None]),
    "auto_send": st.sampled_from(["true", 1, 0, "false", None]),
}
INSTALLMENT_VALID = {
    "monto": st.sampled_from(["100", "0.5", 100, Decimal("100")]),
    "vence": st.sampled_from(["2031-01-10", dt.date(2031, 1, 10)]),
    "estado": st.sampled_from([MISSING, None, "pending", "partial", "paid", "overdue", "cancelled"]),
}
INSTALLMENT_ANY = {
    "external_id": ANY_TEXT | OTHER | st.sampled_from(["C-1", "é" * 160]),
    "numero": st.sampled_from([1, 0, 100_000, 100_001, -1, True, "1", 1.0, Decimal("1"), None]),
    "monto": st.sampled_from(AMOUNTS),
    "vence": st.sampled_from(DATES),
    "estado": st.sampled_from(["PENDING", "", "open", 1, None]),
}


@st.composite
def installment(draw, number: int, wrong: bool):
    """Installment `number` of a debt; when `wrong`, up to two fields replaced by anything."""
    changed = draw(st.sets(st.sampled_from([*INSTALLMENT_ANY, "missing", "extra"]), min_size=1, max_size=2)) \
        if wrong else set()
    item = {"external_id": f"C-{number}", "numero": number}
    for name, anything in INSTALLMENT_ANY.items():
        if name in changed:
            value = draw(anything)
        elif name in INSTALLMENT_VALID:
            value = draw(INSTALLMENT_VALID[name])
        else:
            continue
        if value is MISSING:
            item.pop(name, None)
        else:
            item[name] = value
    if "missing" in changed:
        item.pop(draw(st.sampled_from(sorted(item))), None)
    if "extra" in changed:
        item["otro"] = draw(OTHER)
    return item


@st.composite
def schedules(draw):
    """Up to four installments, unique unless one is changed (which may repeat an id or a number)."""
    size = draw(st.integers(0, 4))
    wrong = draw(st.sampled_from([None, *range(size)]))
    return [draw(installment(n + 1, n == wrong)) for n in range(size)]


@st.composite
def debts(draw):
    """A valid debt with up to three fields replaced by anything (some missing, one extra)."""
    wrong = draw(st.sets(st.sampled_from([*ANY, "missing", "extra", "cuotas"]), max_size=3))
    body = {}
    for name in VALID:
        value = draw((ANY if name in wrong else VALID)[name])
        if value is not MISSING:
            body[name] = value
    installments = draw(st.sampled_from([MISSING, None]) | schedules())
    if "cuotas" in wrong:
        installments = draw(OTHER | st.just([{"external_id": f"C-{n}", "numero": n, "monto": "1", "vence": "2031-01-10"}
                                       for n in range(1, 1002)]))
    if installments is not MISSING:
        body["cuotas"] = installments
    if "missing" in wrong:
        body.pop(draw(st.sampled_from(sorted(body))), None)
    if "extra" in wrong:
        body["otro"] = draw(OTHER)
    return body


def verdict(body) -> DebtSpec | Invalid:
    try:
        return parse_debt(body)
    except Invalid as error:
        return error


SINGLE_CHANGES = {
    "external_id": [*ACCEPTED_TEXT, "", " ", "é" * 160, "é" * 161, "x" * 161, "a\ud800", 1, None],
    "account_id": ["x" * 64, "x" * 65, "", "a\ud800", 1, None],
    "deudor.nombre": [" Ana ", "\u00a0", " ", "", "x" * 255, "x" * 256, "é" * 255, "a\ud800", 1, None, MISSING],
    "deudor.documento": [" 1-9 ", " ", "", "x" * 64, "x" * 65, "a\ud800", 1, None, MISSING],
    "deudor.telefono": [*PHONES, 56922223333, None, MISSING],
    "deudor.otro": [1],
    "moneda": [*CURRENCIES, 1, None, MISSING],
    "monto_original": [*AMOUNTS, MISSING],
    "saldo_pendiente": [*AMOUNTS, MISSING],
    "external_version": [0, 2**63 - 1, -1, 2**63, True, "1", "١", Decimal("1"), 1.0, None],
    "external_updated_at": TIMESTAMPS,
    "referencia": ["", "x" * 500, "x" * 501, "a\ud800", 1, None, MISSING],
    "tipo": ["single", "installments", "SINGLE", "", 1, None, MISSING],
    "auto_send": [True, False, "true", 1, 0, None, MISSING],
    "cuotas": [[], None, "x", [1], {}, MISSING],
    "cuotas.0.external_id": ["", "é" * 160, "é" * 161, "C-2", "a\ud800", 1, None, MISSING],
    "cuotas.0.numero": [0, 2, 100_000, 100_001, -1, True, "1", 1.0, Decimal("1"), None, MISSING],
    "cuotas.0.monto": [*AMOUNTS, MISSING],
    "cuotas.0.vence": [*DATES, MISSING],
    "cuotas.0.estado": ["pending", "partial", "paid", "overdue", "cancelled", "PENDING", "", 1, None, MISSING],
    "cuotas.0.otro": [1],
    "otro": [1, None],
}


def _with(body: dict, path: str, value) -> dict:
    body = copy.deepcopy(body)
    *parents, last = path.split(".")
    target = body
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is MISSING:
        target.pop(last, None)
    else:
        target[last] = value
    return body


def test_each_field_changed_alone_builds_the_same_spec_or_gives_up():
    base = {"external_id": "D-1", "account_id": "wacc_1", "deudor": {"nombre": "Ana", "documento": "1-9",
                                                                     "telefono": "56922223333"},
            "moneda": "USD", "monto_original": "300", "saldo_pendiente": "300",
            "cuotas": [{"external_id": "C-1", "numero": 1, "monto": "100", "vence": "2031-01-10"},
                       {"external_id": "C-2", "numero": 2, "monto": "200", "vence": "2031-02-10"}]}
    taken = 0
    for currency in ("USD", "CLP", "BHD", "CLF"):
        for path, values in SINGLE_CHANGES.items():
            for value in values:
                body = _with(_with(base, "moneda", currency), path, value)
                plain = plain_debt_spec(body)
                if plain is not None:
                    taken += 1
                    assert plain == verdict(body), (currency, path, value)
    assert taken > 300
    one_of_each = _with(_with(base, "deudor.documento", MISSING), "deudor.telefono", None)
    assert plain_debt_spec(one_of_each) is None and isinstance(verdict(one_of_each), Invalid)
    single = _with(base, "tipo", "single")
    assert plain_debt_spec(single) is None and isinstance(verdict(single), Invalid)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=debts())
def test_the_short_road_builds_the_same_spec_or_gives_up(body):
    plain = plain_debt_spec(body)
    if plain is not None:
        assert plain == verdict(body)


@settings(max_examples=300, deadline=None)
@given(body=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.decimals() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["external_id", "account_id", "deudor", "nombre", "documento", "moneda", "monto_original",
                         "saldo_pendiente", "cuotas", "numero", "monto", "vence", "x"]), children, max_size=8),
    max_leaves=20))
def test_arbitrary_values_are_never_accepted_by_the_short_road_alone(body):
    plain = plain_debt_spec(body)
    if plain is not None:
        assert plain == verdict(body)


CSV_HEAD = {"external_id": "F-1", "external_version": "3", "account_id": "wacc_1", "deudor_nombre": "Ana",
            "deudor_documento": "1-9", "deudor_telefono": "56922223333", "moneda": "CLP", "referencia": "F 1",
            "monto_original": "300", "saldo_pendiente": "300", "tipo": "installments", "auto_send": "true",
            "external_updated_at": ""}
CSV_CELLS = st.sampled_from(["", " ", "0", "1", "2", "00", "٣", "²", "x", "-1", "12.5", "12.345", "1.0", "2031-01-10",
                             "2031-02-30", "USD", "usd", "BHD", "true", "si", "sí", "NO", "maybe", "pending", "PAID",
                             "single", "installments", "Ana", "56911112222", "+56 9 1111 2222", "123", "D-1",
                             "2025-03-01T10:00:00Z", "2025-03-01T10:00:00", "9" * 19, "9" * 30, "a\ud800", "é" * 161])


def csv_debt_rows(changes: dict, installments: list[tuple], updated_at_column: bool) -> tuple[list, list]:
    """The CSV columns and a debt's rows: the head with `changes`, one row per installment's cells
    (or a single row without installments)."""
    columns = [name for name in (*CSV_COLUMNS, "external_updated_at")
               if updated_at_column or name != "external_updated_at"]
    first = {**CSV_HEAD, **changes}
    rows = [[{**first, "cuota_external_id": item[0], "cuota_numero": item[1], "cuota_monto": item[2],
              "cuota_vence": item[3], "cuota_estado": item[4]}.get(name, "") for name in columns]
            for item in installments] or [[first.get(name, "") for name in columns]]
    return columns, rows


@settings(max_examples=1500, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(sorted(CSV_HEAD)), CSV_CELLS, max_size=3),
       installments=st.lists(st.tuples(st.sampled_from(["C-1", "C-2", "", "x" * 161]),
                                       st.sampled_from(["1", "2", "0", "", "01", "x"]), CSV_CELLS,
                                       st.sampled_from(["2031-01-10", "", "2031-1-10"]),
                                       st.sampled_from(["", "pending", "paid", "x"])), max_size=3),
       updated_at_column=st.booleans())
def test_a_csv_debt_gets_the_same_spec_from_its_cells_as_from_its_body(changes, installments, updated_at_column):
    columns, rows = csv_debt_rows(changes, installments, updated_at_column)
    fields = _csv_fields(rows[0], _Layout({name: index for index, name in enumerate(columns)}),
                         rows if installments else [])
    plain = plain_fields_spec(*fields)
    if plain is not None:
        assert plain == verdict(_csv_body(fields))


@settings(max_examples=1500, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(sorted(CSV_HEAD)), CSV_CELLS, max_size=3),
       installments=st.lists(st.tuples(st.sampled_from(["C-1", "C-2", "", "x" * 161, "a\x00"]),
                                       st.sampled_from(["1", "2", "0", "", "01", "x", "0000001", "100001"]),
                                       CSV_CELLS, st.sampled_from(["2031-01-10", "", "2031-1-10"]),
                                       st.sampled_from(["", "pending", "paid", "x"])), max_size=3),
       updated_at_column=st.booleans(), odd_row=st.sampled_from([None, "short", "other head", "bare", "\ufffd"]))
def test_a_csv_debt_read_by_the_short_road_is_the_one_the_long_road_reads(changes, installments, updated_at_column,
                                                                          odd_row):
    """`_plain_csv_debt` (cells to spec at once) gives up or agrees with `_csv_debt`'s full checks."""
    columns, rows = csv_debt_rows(changes, installments, updated_at_column)
    last = list(zip(columns, rows[-1], strict=True))
    if odd_row == "short":
        rows.append(rows[-1][:-1])
    elif odd_row == "other head":
        rows.append([("Otro" if name == "deudor_nombre" else cell) for name, cell in last])
    elif odd_row == "bare":
        rows.append([("" if name.startswith("cuota_") else cell) for name, cell in last])
    elif odd_row == "\ufffd":
        rows[-1] = [cell + "\ufffd" if name == "referencia" else cell for name, cell in last]
    numbered = [(line, [cell.strip() for cell in row]) for line, row in enumerate(rows, start=2)]
    layout = _Layout({name: index for index, name in enumerate(columns)})
    plain = _plain_csv_debt(numbered, layout)
    if plain is not None:
        full = _checked_csv_debt(numbered, layout)
        assert (plain.spec, plain.errors, plain.line, plain.rows) == (full.spec, full.errors, full.line, full.rows)
        assert plain.spec is not None


def test_plain_debts_take_the_short_road():
    """The common shapes are not left to pydantic (that is the import's speed)."""
    api = {"external_id": "D-1", "account_id": "wacc_1",
           "deudor": {"nombre": "Ana Pérez", "documento": "11111111-1", "telefono": "+56 9 2222 3333"},
           "moneda": "usd", "referencia": "Factura 1001", "monto_original": 300, "saldo_pendiente": 299.9,
           "external_updated_at": "2025-03-01T10:00:00-03:00", "auto_send": False,
           "cuotas": [{"external_id": f"D-1-{n}", "numero": n, "monto": 100, "vence": f"2031-0{n}-10",
                       "estado": "pending"} for n in (1, 2, 3)]}
    body = loads_exact(json.dumps(api))
    assert plain_debt_spec(body) == parse_debt(body)

    csv = ("external_id,external_version,account_id,deudor_nombre,deudor_documento,deudor_telefono,moneda,"
           "referencia,monto_original,saldo_pendiente,tipo,auto_send,cuota_external_id,cuota_numero,cuota_monto,"
           "cuota_vence,cuota_estado\n"
           "F-1,3,wacc_1,Ana Pérez,1-9,56922223333,CLP,F 1,300000,300000,installments,true,F-1-1,1,100000,"
           "2031-01-10,pending\n"
           "F-1,3,wacc_1,Ana Pérez,1-9,56922223333,CLP,F 1,300000,300000,installments,true,F-1-2,2,200000,"
           "2031-02-10,\n"
           "F-2,,wacc_1,Luis,,56911112222,USD,,99.90,0,single,no,,,,,\n")
    records = list(read_csv(io.BytesIO(csv.encode())))
    assert [record.errors for record in records] == [[], []]
    assert records[0].spec.installments[1].amount == 200000 and records[1].spec.balance == 0
