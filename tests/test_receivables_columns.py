"""The CSV import's column road (models/receivables/columns.py, `snapshots.insert_new_debts`) against
the debt-by-debt road it stands in for.

Reading: whatever the file, blocks read a column at a time come out as the records the reader
that checks every debt alone builds, lines included, at any block size. Writing: a block of new
debts written a column at a time leaves the rows `upsert_debts` leaves, on both engines, and a
block that is not all new writes nothing and takes the general road.
"""

from __future__ import annotations

import csv
import io
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.receivables import snapshots
from models.receivables.columns import DebtColumns
from models.receivables.importer import (
    CSV_COLUMNS,
    _column_records,
    _csv_records,
    _header,
    _Layout,
    import_debts,
    read_csv,
)
from models.receivables.tables import Debt, Debtor, Installment
from models.store.db import connection
from tests.receivables_fixtures import make_account

COLUMNS = [*CSV_COLUMNS, "external_updated_at"]


def debt_rows(n: int, account: str, *, past: bool = False, **changes) -> list[dict]:
    """A plainly valid debt of three installments as CSV rows (dicts by column)."""
    head = {"external_id": f"D-{n}", "external_version": "1", "account_id": account, "deudor_nombre": f"Deudor {n}",
            "deudor_documento": f"{n}-K", "deudor_telefono": f"569{n:08d}", "moneda": "CLP",
            "referencia": f"Factura {n}", "monto_original": "300", "saldo_pendiente": "300", "tipo": "",
            "auto_send": "true", "external_updated_at": ""} | changes
    year = 2020 if past else 2031
    return [head | {"cuota_external_id": f"D-{n}-{k}", "cuota_numero": str(k), "cuota_monto": "100",
                    "cuota_vence": f"{year}-0{k}-10", "cuota_estado": ""} for k in (1, 2, 3)]


def csv_bytes(rows: list[dict], columns: list[str] = COLUMNS) -> bytes:
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([row.get(name, "") for name in columns] if row else [])
    return text.getvalue().encode()


def seen(records) -> list[tuple]:
    return [(record.line, record.external_id, record.spec, record.errors, record.rows) for record in records]


def read_by_columns(data: bytes, batch_size: int) -> tuple[list[tuple], int]:
    """What `read_csv` gives, blocks opened into records; and how many debts came as columns."""
    found, in_columns = [], 0
    for item in read_csv(io.BytesIO(data), batch_size):
        if isinstance(item, DebtColumns):
            in_columns += len(item.counts)
            found.extend(seen(_column_records(item)))
        else:
            found.extend(seen([item]))
    return found, in_columns


def read_debt_by_debt(data: bytes) -> list[tuple]:
    """Every debt checked alone, each row numbered by the line the reader says it starts on."""
    reader = csv.reader(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", errors="replace", newline=""))
    layout = _Layout(_header(reader))
    before = reader.line_num
    rows, ends = [], []
    for row in reader:
        rows.append(row)
        ends.append(reader.line_num)
    return seen(_csv_records(rows, ends, before, layout))


# -- reading -----------------------------------------------------------------------------------

# Each debt field's cells: the plain value most of the time, else one that the column road must
# leave to the checks of each debt (spaces, decimals, wrong codes, bad dates, line breaks...).
ODD_HEAD = {
    "deudor_nombre": ["", " Ana ", "Ana\nPérez", "x" * 256, "\ufffd"],
    "deudor_documento": ["", " 7-K ", "shared", "x" * 65],
    "deudor_telefono": ["", "+56 9 1111 2222", "123", " 56911112222", "５６９１１１１２２２２"],
    "moneda": ["usd", "BHD", "XXX", " CLP"],
    "referencia": ["", "two\r\nlines", "x" * 501, "a\x00b"],
    "monto_original": ["99.90", "0", "1.5", " 300", "١٢"],
    "saldo_pendiente": ["0", "150", "x"],
    "tipo": ["installments", "single", "x"],
    "auto_send": ["", "NO", "maybe"],
    "external_version": ["", "x", "9" * 20],
    "external_updated_at": ["2025-03-01T10:00:00-03:00", "2025-03-01", " 2025-03-01T10:00:00Z"],
}
ODD_ROW = {
    "cuota_external_id": ["", "D-x", " D-y "],
    "cuota_numero": ["0", "7", "100001", " 1"],
    "cuota_monto": ["12.5", "0", "99.999"],
    "cuota_vence": ["2020-01-10", "2031-02-30", "", "2031-1-10"],
    "cuota_estado": ["pending", "paid", "cancelled", "partial", "x"],
}


@st.composite
def csv_files(draw) -> bytes:
    rows: list[dict] = []
    for n in range(draw(st.integers(1, 7))):
        debt = debt_rows(n, "wacc_1", **{name: draw(st.sampled_from(cells))
                                         for name, cells in ODD_HEAD.items() if draw(st.integers(0, 9)) == 0})
        debt = debt[:draw(st.integers(1, 3))]
        for row in debt:
            for name, cells in ODD_ROW.items():
                if draw(st.integers(0, 14)) == 0:
                    row[name] = draw(st.sampled_from(cells))
        order = draw(st.sampled_from(["as listed"] * 6 + ["reversed", "id twice", "number twice"]))
        if order == "reversed":  # numbers and ids that fall: still each once
            debt.reverse()
        elif order != "as listed" and len(debt) > 1:
            name = "cuota_external_id" if order == "id twice" else "cuota_numero"
            debt[-1] = debt[-1] | {name: debt[0][name]}
        if draw(st.integers(0, 9)) == 0:  # its rows disagree on the debt
            debt[-1] = debt[-1] | {"referencia": "otra"}
        if draw(st.integers(0, 9)) == 0 and n:  # named again, apart from its first rows
            debt = [row | {"external_id": "D-0"} for row in debt]
        if draw(st.integers(0, 9)) == 0:  # a blank line, a row of blank cells or a short row
            rows.append(draw(st.sampled_from([{}, {"external_id": " "}, {"external_id": "D-short"}])))
        rows.extend(debt)
    columns = COLUMNS if draw(st.booleans()) else list(CSV_COLUMNS)
    data = csv_bytes(rows, columns)
    if {"external_id": "D-short"} in rows:
        data = data.replace(b"D-short" + b"," * (len(columns) - 1), b"D-short,1")
    return data


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=csv_files())
def test_blocks_read_by_columns_are_the_debts_read_one_by_one(data):
    expected = read_debt_by_debt(data)
    for batch_size in (1, 2, 500):
        assert read_by_columns(data, batch_size)[0] == expected


def test_a_plain_file_is_read_a_column_at_a_time_in_blocks_of_the_batch_size():
    rows = [row for n in range(7) for row in debt_rows(n, "wacc_1")]
    found, in_columns = read_by_columns(csv_bytes(rows), 3)
    assert in_columns == 7
    assert found == read_debt_by_debt(csv_bytes(rows))
    blocks = [item for item in read_csv(io.BytesIO(csv_bytes(rows)), 3)]
    assert [len(block.counts) for block in blocks] == [3, 3, 1]
    assert [record.line for block in blocks for record in _column_records(block)] == [2, 5, 8, 11, 14, 17, 20]


def test_a_quoted_line_break_or_a_bom_keeps_the_lines_and_the_column_road():
    rows = [row for n in range(4) for row in debt_rows(n, "wacc_1", referencia=f"Factura\n{n}")]
    data = b"\xef\xbb\xbf" + csv_bytes(rows)
    found, in_columns = read_by_columns(data, 2)
    assert in_columns == 4
    assert found == read_debt_by_debt(data)
    assert [line for line, *_rest in found] == [2, 8, 14, 20]


# -- writing -----------------------------------------------------------------------------------

def stored(tenant_id: int) -> dict[str, tuple]:
    """Each of the tenant's debts with its debtor and installments, as values (no ids)."""
    debtors = {debtor.id: (debtor.nombre, debtor.documento, debtor.telefono)
               for debtor in Debtor.select().where(Debtor.tenant == tenant_id)}
    debts = {}
    for debt in Debt.select().where(Debt.tenant == tenant_id):
        installments = sorted((item.external_id, item.numero, item.monto, item.amount_paid, item.vence, item.status,
                               item.declared_status) for item in Installment.select().where(Installment.debt == debt))
        debts[debt.external_id] = (debt.moneda, debt.referencia, debt.monto_original, debt.saldo_pendiente,
                                   debt.tipo, debt.auto_send, debt.status, debt.external_version,
                                   debt.external_updated_at, debt.resolution, debt.row_version,
                                   debtors[debt.debtor_id], installments)
    return debts


def varied(account: str) -> list[dict]:
    """New debts of every status and estado a CSV can give, each plainly valid."""
    debts = [
        debt_rows(0, account),
        debt_rows(1, account, past=True),  # overdue
        debt_rows(2, account, saldo_pendiente="0"),  # paid
        debt_rows(3, account, saldo_pendiente="150"),  # partial
        debt_rows(4, account, moneda="usd", monto_original="99.90", saldo_pendiente="99.90", auto_send="NO",
                  external_version="", deudor_documento=""),
        debt_rows(5, account, deudor_telefono="+56 9 1111 2222", tipo="installments", referencia="",
                  external_updated_at="2025-03-01T10:00:00-03:00"),
        debt_rows(6, account, deudor_telefono="", auto_send=""),
        debt_rows(7, account, tipo="single")[:1],
    ]
    debts[0][1]["cuota_estado"] = "paid"
    debts[0][2]["cuota_estado"] = "cancelled"
    debts[3][0]["cuota_estado"] = "partial"
    debts[4][0]["cuota_monto"] = "33.30"
    debts[1][2]["cuota_vence"] = "2031-03-10"
    return [row for debt in debts for row in debt]


def columns_of(data: bytes) -> DebtColumns:
    (block,) = list(read_csv(io.BytesIO(data)))
    assert isinstance(block, DebtColumns)
    return block


def test_new_debts_written_by_columns_are_those_upsert_debts_writes(alice, charlie, storage):
    ours, theirs = make_account(alice), make_account(charlie)
    by_columns = columns_of(csv_bytes(varied(ours.public_id)))
    by_specs = columns_of(csv_bytes(varied(theirs.public_id)))
    assert snapshots.insert_new_debts(alice.id, by_columns) is True
    results = snapshots.upsert_debts(charlie.id, by_specs.specs())
    assert [result.action for result in results] == ["created"] * 8
    assert stored(alice.id) == stored(charlie.id)
    statuses = {external_id: debt[6] for external_id, debt in stored(alice.id).items()}
    assert statuses == {"D-0": "pending", "D-1": "overdue", "D-2": "paid", "D-3": "partial", "D-4": "pending",
                        "D-5": "pending", "D-6": "pending", "D-7": "pending"}


def counts() -> tuple[int, int, int]:
    return Debtor.select().count(), Debt.select().count(), Installment.select().count()


@pytest.mark.parametrize("case", ["debt stored", "debtor stored", "phone stored", "debtor twice", "unknown account"])
def test_a_block_that_is_not_all_new_writes_nothing_and_the_import_takes_the_general_road(alice, storage, case):
    account = make_account(alice)
    first = [row for n in range(3) for row in debt_rows(n, account.public_id)]
    assert snapshots.insert_new_debts(alice.id, columns_of(csv_bytes(first))) is True
    second = [row for n in range(3, 6) for row in debt_rows(n, account.public_id)]
    if case == "debt stored":
        second[3:6] = [row | {"external_version": "2"} for row in debt_rows(1, account.public_id)]
    elif case == "debtor stored":
        second[3:6] = [row | {"deudor_documento": "0-K"} for row in second[3:6]]
    elif case == "phone stored":
        second[3:6] = [row | {"deudor_documento": "", "deudor_telefono": "56900000002"} for row in second[3:6]]
    elif case == "debtor twice":
        second[3:6] = [row | {"deudor_documento": "3-K", "deudor_telefono": ""} for row in second[3:6]]
    else:
        second[3:6] = [row | {"account_id": "wacc_unknown"} for row in second[3:6]]
    before = counts()
    block = columns_of(csv_bytes(second))
    assert snapshots.insert_new_debts(alice.id, block) is False
    assert counts() == before

    summary = import_debts(alice.id, [block])
    if case == "unknown account":
        assert (summary.created, summary.errors) == (2, 1)
    elif case == "debt stored":
        assert (summary.created, summary.updated) == (2, 1)
        assert Debt.get(Debt.external_id == "D-1").external_version == 2
    else:
        assert (summary.created, summary.errors) == (3, 0)
    debtors = {debtor.documento or debtor.telefono for debtor in Debtor.select()}
    assert len(debtors) == Debtor.select().count()  # no debtor twice


def test_concurrent_imports_of_overlapping_files_store_each_debt_once(alice, storage):
    # Four importers at once, each file sharing half its debts with the next one's: some blocks
    # meet debts another importer stored (or is storing) and take the general road.
    account = make_account(alice)
    files = [csv_bytes([row for n in range(start, start + 400) for row in debt_rows(n, account.public_id)])
             for start in (0, 200, 400, 600)]
    summaries, failures = [], []

    def run(data: bytes) -> None:
        try:
            with connection():
                summaries.append(import_debts(alice.id, read_csv(io.BytesIO(data), 100), batch_size=100))
        except BaseException as error:  # noqa: BLE001 (reported by the test below)
            failures.append(error)

    threads = [threading.Thread(target=run, args=(data,)) for data in files]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    # Every debt created once, and each shared one updated by the importer that came second.
    assert sum(summary.created for summary in summaries) == 1000
    assert sum(summary.updated for summary in summaries) == 600
    assert sum(summary.errors for summary in summaries) == 0
    assert counts() == (1000, 1000, 3000)
