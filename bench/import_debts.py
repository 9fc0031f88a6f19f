"""Debt import throughput and memory: the streaming importer against raw bulk inserts.

    .venv/bin/python -m bench.import_debts [--debts 100000] [--batch-size 500] [--keep DIR]

(`bench/import.py` could not be imported as `bench.import`: `import` is a keyword.)

1. generates DEBTS debts with three installments each into a CSV file (the import format);
2. two baselines, each a child process that reads that CSV and inserts the same debtors, debts
   and installments in one transaction per BATCH debts, ids assigned by itself, no validation,
   no lookups:
   - `orm`: peewee's `insert_many`, the ORM's bulk insert;
   - `floor`: hand-written multi-row INSERTs (models.receivables.snapshots.bulk_insert, which the
     importer itself uses) with the importer's other tricks too (the collector frozen and its first
     threshold raised as `svcctl cartera import` does, the shared timestamp converted to its
     SQLite value once): about the least work that gets these rows into SQLite from Python;
3. import: a child process runs `svcctl cartera import` on the file (every rule applied);
4. prints, for each, wall and CPU seconds, CPU microseconds per debt and debts per second; the
   ratios baseline time / import time (1.0 = as fast as that raw insert; target 0.7 against the
   floor) by wall clock and by CPU time
   (the CPU figure holds up when other processes share the machine); and the importer's peak
   memory (its max RSS; target 200 MB).

Every child starts from a freshly migrated SQLite database (the default engine) and is timed
from launch to exit, interpreter start-up included, with the project's bytecode written first.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cryptography.fernet import Fernet  # noqa: E402

from bench.common import compile_project  # noqa: E402

HEADER = ["external_id", "external_version", "account_id", "deudor_nombre", "deudor_documento", "deudor_telefono",
          "moneda", "referencia", "monto_original", "saldo_pendiente", "tipo", "auto_send", "cuota_external_id",
          "cuota_numero", "cuota_monto", "cuota_vence", "cuota_estado"]
TARGET_RATIO = 0.7
TARGET_RSS_MB = 200


def environment(data_dir: Path, secret_key: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SVC_")}
    env.update({"SVC_DATA_DIR": str(data_dir), "SVC_SECRET_KEY": secret_key, "PYTHONPATH": str(ROOT)})
    return env


def prepare_database(data_dir: Path, secret_key: str) -> tuple[str, str]:
    """A migrated database with one tenant and one number; returns their public ids."""
    code = (
        "import json\n"
        "from config import get_settings\n"
        "from models.clock import utcnow\n"
        "from models.ids import new_id\n"
        "from models.numbers.tables import MessagingAccount\n"
        "from models.setup import init_db\n"
        "from models.store import db\n"
        "from models.tenancy.tenants import create_tenant\n"
        "init_db(get_settings()); db.upgrade()\n"
        "with db.connection():\n"
        "    tenant = create_tenant('Bench SA')\n"
        "    account = MessagingAccount.create(public_id=new_id('wacc_'), tenant=tenant, phone_number='5690000',\n"
        "                                      phone_id='pn-bench', access_token='x', connected_at=utcnow())\n"
        "print(json.dumps([tenant.public_id, account.public_id]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=environment(data_dir, secret_key), cwd=ROOT,
                            capture_output=True, text=True, check=True)
    tenant_id, account_id = json.loads(result.stdout)
    return tenant_id, account_id


def generate(path: Path, debts: int, account_id: str) -> None:
    start = dt.date(2031, 1, 10)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for n in range(debts):
            external_id = f"D{n:07d}"
            head = [external_id, 1, account_id, f"Deudor {n}", f"{10_000_000 + n}-K", f"569{n:08d}", "CLP",
                    f"Factura {n}", 300_000 + n, 300_000 + n, "installments", "true"]
            for k in range(3):
                amount = 100_000 + (n if k == 0 else 0)
                due = start + dt.timedelta(days=30 * k + n % 28)
                writer.writerow([*head, f"{external_id}-{k + 1}", k + 1, amount, due.isoformat(), "pending"])


BASELINE = r'''
import csv, gc, sqlite3, sys
from config import get_settings
from models.clock import utcnow
from models.numbers.tables import MessagingAccount
from models.receivables.snapshots import bulk_insert
from models.receivables.tables import Debt, Debtor, Installment
from models.setup import init_db
from models.store import db
from models.tenancy.tables import Tenant

DEBTOR = [Debtor.id, Debtor.tenant, Debtor.nombre, Debtor.documento, Debtor.telefono, Debtor.created_at,
          Debtor.updated_at]
DEBT = [Debt.id, Debt.tenant, Debt.external_id, Debt.external_version, Debt.account, Debt.debtor, Debt.moneda,
        Debt.referencia, Debt.monto_original, Debt.saldo_pendiente, Debt.tipo, Debt.auto_send, Debt.status,
        Debt.row_version, Debt.created_at, Debt.updated_at]
INSTALLMENT = [Installment.debt, Installment.external_id, Installment.numero, Installment.monto,
               Installment.amount_paid, Installment.vence, Installment.status, Installment.declared_status]


def insert_orm(model, fields, rows):
    for start in range(0, len(rows), 500):
        model.insert_many(rows[start:start + 500], fields=fields).as_rowcount().execute()


def main(path, tenant_public_id, batch, how):
    insert = bulk_insert if how == "floor" else insert_orm
    init_db(get_settings())
    with db.connection():
        tenant = Tenant.get(Tenant.public_id == tenant_public_id).id
        accounts = dict(MessagingAccount.select(MessagingAccount.public_id, MessagingAccount.id).tuples())
        now = utcnow()
        if how == "floor":  # what the importer does too (svcctl/receivables.py, models/receivables/snapshots.py)
            gc.freeze()
            gc.set_threshold(20_000, *gc.get_threshold()[1:])
            now = sqlite3.adapt(now)
        debtors, debts, installments = [], [], []
        debt_id = 0
        last = None

        def flush():
            with db.atomic():
                insert(Debtor, DEBTOR, debtors)
                insert(Debt, DEBT, debts)
                insert(Installment, INSTALLMENT, installments)
            debtors.clear(); debts.clear(); installments.clear()

        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            next(reader)
            for row in reader:
                if row[0] != last:
                    if len(debts) >= batch:
                        flush()
                    last = row[0]
                    debt_id += 1
                    debtors.append((debt_id, tenant, row[3], row[4], row[5], now, now))
                    debts.append((debt_id, tenant, row[0], int(row[1]), accounts[row[2]], debt_id, row[6], row[7],
                                  int(row[8]), int(row[9]), row[10], True, "pending", 0, now, now))
                installments.append((debt_id, row[12], int(row[13]), int(row[14]), 0, row[15], row[16], row[16]))
        flush()
    print(debt_id)


main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
'''


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mb: float
    stdout: str


def run_child(argv: list[str], env: dict[str, str]) -> Run:
    """Run a process to completion and measure it."""
    with tempfile.TemporaryFile() as output, tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=output, stderr=errors)
        # wait4 gives this child's own usage (RUSAGE_CHILDREN would mix the children together).
        _pid, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        errors.seek(0)
        if process.returncode != 0:
            raise SystemExit(f"{argv[:4]} failed ({process.returncode}):\n{errors.read().decode()[-3000:]}")
        return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, output.read().decode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--debts", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--keep", type=Path, help="Keep the databases and the CSV in this directory.")
    args = parser.parse_args()

    compile_project()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-import-"))
    work.mkdir(parents=True, exist_ok=True)
    secret_key = Fernet.generate_key().decode()
    try:
        template = work / "template"
        tenant_id, account_id = prepare_database(template, secret_key)
        for name in ("orm", "floor", "import"):
            shutil.rmtree(work / name, ignore_errors=True)
            shutil.copytree(template, work / name)
        source = work / "debts.csv"
        started = time.perf_counter()
        generate(source, args.debts, account_id)
        size_mb = source.stat().st_size / 1e6
        print(f"generated {args.debts} debts x 3 installments: {size_mb:.1f} MB CSV "
              f"in {time.perf_counter() - started:.1f}s", file=sys.stderr)

        runs = {}
        for how in ("orm", "floor"):
            runs[how] = run_child([sys.executable, "-c", BASELINE, str(source), tenant_id, str(args.batch_size), how],
                                  environment(work / how, secret_key))
        runs["import"] = run_child(
            [sys.executable, "-m", "svcctl.main", "cartera", "import", "--tenant", tenant_id, str(source),
             "--batch-size", str(args.batch_size), "--json"],
            environment(work / "import", secret_key))
        summary = json.loads(runs["import"].stdout)
        if summary["created"] != args.debts or summary["errors"]:
            raise SystemExit(f"the import did not create every debt: {summary}")
        imported = runs["import"]
        report = {"debts": args.debts, "installments": args.debts * 3, "csv_mb": round(size_mb, 1)}
        for name, run in runs.items():
            report[name] = {"wall_seconds": round(run.wall, 2), "cpu_seconds": round(run.cpu, 2),
                            "cpu_us_per_debt": round(run.cpu / args.debts * 1e6, 1),
                            "debts_per_second": round(args.debts / run.wall), "peak_rss_mb": round(run.rss_mb, 1)}
        for how in ("orm", "floor"):
            report[f"ratio_vs_{how}"] = {"wall": round(runs[how].wall / imported.wall, 2),
                                         "cpu": round(runs[how].cpu / imported.cpu, 2)}
        print(json.dumps(report, indent=2))
        print(f"CPU per debt: import {report['import']['cpu_us_per_debt']} us, floor "
              f"{report['floor']['cpu_us_per_debt']} us, ORM bulk insert {report['orm']['cpu_us_per_debt']} us",
              file=sys.stderr)
        print(f"import: {report['import']['debts_per_second']} debts/s, peak RSS {imported.rss_mb:.0f} MB "
              f"(target {TARGET_RSS_MB}); ratio to the ORM bulk insert {report['ratio_vs_orm']['wall']} wall / "
              f"{report['ratio_vs_orm']['cpu']} CPU, to the hand-written floor {report['ratio_vs_floor']['wall']} "
              f"wall / {report['ratio_vs_floor']['cpu']} CPU (target {TARGET_RATIO})", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
