"""Overlapping `svcctl cartera import` runs: four real processes import the same new debts, their
debtors shared, each file in another order. Every run exits 0, each debt and debtor is stored once,
and the runs' reports add up: the debts created across them are the distinct debts, and each run
counts every debt it saved once, as created or as updated. And a batch PostgreSQL breaks to end a
deadlock is written again and counted once."""

from __future__ import annotations

import io
import json
import logging
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from models.receivables.importer import ImportSummary, import_debts, read_jsonl
from models.receivables.tables import Debt, Debtor, Installment
from models.store import db as database
from tests.live import ROOT, env_for
from tests.receivables_fixtures import deadlock_a_batch, make_account

DEBTS = 1200
# Three debts a debtor: a block naming a debtor twice takes the general road (`upsert_debts`),
# one of single debtors the column road (`insert_new_debts`); both meet the other runs' rows.
DEBTS_PER_DEBTOR = 3
HEADER = ("external_id,external_version,account_id,deudor_nombre,deudor_documento,deudor_telefono,moneda,"
          "referencia,monto_original,saldo_pendiente,tipo,auto_send,cuota_external_id,cuota_numero,cuota_monto,"
          "cuota_vence,cuota_estado")


def debt_rows(account_id: str, n: int) -> list[str]:
    debtor = n // DEBTS_PER_DEBTOR if n % 2 else 100_000 + n  # half the debts share a debtor, half do not
    head = (f"D-{n:05d},1,{account_id},Debtor {debtor},CC-{debtor},5691{debtor:07d},CLP,Invoice {n},3000,3000,,"
            "false")
    return [f"{head},D-{n:05d}-{k},{k},1000,2031-0{k}-10,pending" for k in (1, 2, 3)]


def import_file(tmp_path: Path, name: str, account_id: str, order: list[int], fmt: str) -> Path:
    path = tmp_path / f"{name}.{fmt}"
    if fmt == "csv":
        lines = [HEADER, *(row for n in order for row in debt_rows(account_id, n))]
    else:
        lines = [json.dumps(debt_json(account_id, n)) for n in order]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def debt_json(account_id: str, n: int) -> dict:
    debtor = n // DEBTS_PER_DEBTOR if n % 2 else 100_000 + n
    return {"external_id": f"D-{n:05d}", "external_version": 1, "account_id": account_id,
            "deudor": {"nombre": f"Debtor {debtor}", "documento": f"CC-{debtor}", "telefono": f"5691{debtor:07d}"},
            "moneda": "CLP", "referencia": f"Invoice {n}", "monto_original": 3000, "saldo_pendiente": 3000,
            "auto_send": False,
            "cuotas": [{"external_id": f"D-{n:05d}-{k}", "numero": k, "monto": 1000, "vence": f"2031-0{k}-10",
                        "estado": "pending"} for k in (1, 2, 3)]}


def test_four_overlapping_imports_store_each_debt_once_and_report_honestly(storage, alice, tmp_path):
    account = make_account(alice)
    numbers = list(range(DEBTS))
    shuffled = [random.Random(seed).sample(numbers, DEBTS) for seed in (1, 2)]
    # Each pair of runs' batches shares debts and debtors in opposite or unrelated orders.
    files = [import_file(tmp_path, "forward", account.public_id, numbers, "csv"),
             import_file(tmp_path, "backward", account.public_id, numbers[::-1], "csv"),
             import_file(tmp_path, "shuffled", account.public_id, shuffled[0], "jsonl"),
             import_file(tmp_path, "reshuffled", account.public_id, shuffled[1], "csv")]
    env = env_for(storage)
    runs = [subprocess.Popen([sys.executable, "-m", "svcctl.main", "cartera", "import", "--tenant",
                              alice.tenant.public_id, "--batch-size", "100", "--json", str(path)],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for path in files]
    outcomes = [run.communicate(timeout=300) for run in runs]
    for run, (_stdout, stderr) in zip(runs, outcomes, strict=True):
        assert run.returncode == 0, stderr
    reports = [json.loads(stdout) for stdout, _stderr in outcomes]
    retried = sum(stderr.count("rolled back by a lock conflict") for _stdout, stderr in outcomes)
    print(f"{storage.database_url and 'postgres' or 'sqlite'}: batches retried after a lock conflict: {retried}; "
          f"created per run: {[report['created'] for report in reports]}")

    assert Debt.select().count() == DEBTS
    assert Installment.select().count() == 3 * DEBTS
    debtors = Debtor.select().where(Debtor.tenant == alice.id)
    assert debtors.count() == len({debt_json("", n)["deudor"]["documento"] for n in numbers})
    # Each debt was created by exactly one run; every run saved every debt of its file once.
    assert sum(report["created"] for report in reports) == DEBTS, reports
    for report in reports:
        assert report["created"] + report["updated"] == DEBTS, report
        assert (report["debts"], report["errors"], report["ignored_stale"]) == (DEBTS, 0, 0), report
    # Whoever wrote last, each debt belongs to its own debtor, as every file says.
    stored = dict(Debt.select(Debt.external_id, Debtor.documento).join(Debtor).tuples())
    assert stored == {f"D-{n:05d}": debt_json("", n)["deudor"]["documento"] for n in numbers}


# A deadlock needs a database that runs writers side by side: SQLite runs one at a time.
@pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
def test_a_batch_broken_by_a_deadlock_runs_again_and_counts_what_it_did(storage, alice, caplog):
    """An import batch the database picks as a deadlock's victim is written again, whole, and its
    summary counts that run only: here another writer created one of its two debts meanwhile
    (`deadlock_a_batch`)."""
    account = make_account(alice)
    lines = b"".join(json.dumps({"external_id": external_id, "account_id": account.public_id,
                                 "deudor": {"nombre": document[-1], "documento": document}, "moneda": "CLP",
                                 "monto_original": 3000, "saldo_pendiente": 3000}).encode() + b"\n"
                     for external_id, document in (("D-1", "CC-A"), ("D-2", "CC-B")))
    summaries: list[ImportSummary] = []

    def import_batch() -> None:
        with database.connection():
            summaries.append(import_debts(alice.id, read_jsonl(io.BytesIO(lines))))

    with caplog.at_level(logging.WARNING, logger="models.store.db"):
        deadlock_a_batch(storage.database_url, alice.id, account.id, "CLP", threading.Thread(target=import_batch))
    assert "rolled back by a lock conflict" in caplog.text and "deadlock" in caplog.text
    assert [summary.as_dict() for summary in summaries] == [
        {"created": 1, "updated": 1, "ignored_stale": 0, "errors": 0, "debts": 2, "rows": 2}]
    assert sorted(Debt.select(Debt.external_id).tuples()) == [("D-1",), ("D-2",)]
    assert Debt.get(Debt.external_id == "D-2").saldo_pendiente == 3000  # the batch's snapshot, written after

