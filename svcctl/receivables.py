"""svcctl cartera: import debts from the ERP, read them, record payments, resolve, collection."""

from __future__ import annotations

import csv
import gc
import sys
from decimal import Decimal
from pathlib import Path
from typing import BinaryIO

import orjson
import typer
from rich.console import Group
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn, TransferSpeedColumn

from models.clock import to_utc_naive
from models.receivables import debts
from models.receivables.importer import CountingReader, ImportFormatError, RowError, import_debts, reader_for
from models.receivables.money import amount_json, format_amount, to_minor
from models.receivables.report import AGING_BUCKETS, FUNNEL, report
from models.receivables.tables import DEBT_STATUSES
from models.tenancy.tables import Tenant
from models.tenancy.tenants import get_tenant
from svcctl.lazy import LazyGroup
from svcctl.output import JSON_OPTION, err, fail, moment_option, record, show, styled, table, with_database


class Commands(LazyGroup):
    # Loaded when asked for, so that an import loads none of them: the gateway's HTTP client, the
    # sending engine, the dunning plans.
    lazy_commands = {"remind": "svcctl.reminders:remind", "payments": "svcctl.payments:export_app",
                     "responses": "svcctl.responses:export_app", "plans": "svcctl.dunning_plans:app",
                     "dispute": "svcctl.dunning_plans:dispute_app"}


app = typer.Typer(help="Receivables: debts synced from the ERP, payments, collection.", no_args_is_help=True,
                  cls=Commands)
endpoint_app = typer.Typer(help="Where debt.payment_received events are delivered.", no_args_is_help=True)
app.add_typer(endpoint_app, name="endpoint")

# Bad rows echoed on stderr; the rest only go to --errors FILE (a big file can have thousands).
SHOWN_ERRORS = 20
# A spreadsheet opening the errors CSV runs a cell that starts with one of these as a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str) -> str:
    """A cell of the errors CSV that a spreadsheet shows as text: a would-be formula gets a leading `'`."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


class ErrorSink:
    """Bad rows: the first few on stderr, all of them to --errors FILE (JSON lines, or CSV by suffix)."""

    def __init__(self, path: Path | None):
        self.shown = 0
        self.total = 0
        self.handle = path.open("w", encoding="utf-8", newline="") if path else None
        self.writer = None
        if self.handle is not None and path.suffix.lower() == ".csv":
            self.writer = csv.writer(self.handle)
            self.writer.writerow(["line", "external_id", "code", "message"])

    def __call__(self, error: RowError) -> None:
        self.total += 1
        if self.shown < SHOWN_ERRORS:
            self.shown += 1
            # The row's own text (its id, the message quoting it) is printed as text, never markup.
            label = styled(" (", error.external_id, ")") if error.external_id else ""
            err.print(styled((f"line {error.line}", "red"), label, ": ", error.message), soft_wrap=True)
        if self.writer is not None:
            self.writer.writerow([error.line, csv_cell(error.external_id or ""), error.code, csv_cell(error.message)])
        elif self.handle is not None:
            self.handle.write(orjson.dumps(error.as_dict()).decode() + "\n")

    def close(self) -> None:
        if self.total > self.shown:
            hint = "" if self.handle else " (use --errors FILE to keep them all)"
            err.print(f"... and {self.total - self.shown} more bad rows{hint}")
        if self.handle is not None:
            self.handle.close()


def _open_source(source: str) -> tuple[BinaryIO, int | None]:
    if source == "-":
        return sys.stdin.buffer, None
    path = Path(source)
    try:
        return path.open("rb"), path.stat().st_size
    except OSError as error:
        fail(f"cannot read {source}: {error.strerror or error}")


def _format_of(source: str, fmt: str | None) -> str:
    if fmt:
        return fmt.lower()
    return "jsonl" if source.lower().endswith((".jsonl", ".ndjson", ".json")) else "csv"


@app.command("import")
@with_database
def import_command(
        source: str = typer.Argument(..., metavar="FILE|-", help="A CSV or JSON Lines file, or - for stdin."),
        tenant: str = typer.Option(..., "--tenant"),
        fmt: str = typer.Option(None, "--format", help="csv or jsonl (default: by file name, else csv)."),
        errors_path: Path = typer.Option(None, "--errors", help="Write every bad row here (JSON lines; CSV "
                                                                "when the name ends in .csv)."),
        batch_size: int = typer.Option(500, "--batch-size", min=1, max=5000, help="Debts per transaction."),
        as_json: bool = JSON_OPTION):
    """Import debts from the ERP, streaming; exits 1 when any row was refused."""
    tenant_id = get_tenant(tenant).id
    try:
        read = reader_for(_format_of(source, fmt), batch_size)
    except ImportFormatError as error:
        fail(str(error))
    stream, size = _open_source(source)
    counter = CountingReader(stream)
    sink = ErrorSink(errors_path)
    progress = Progress(TextColumn("[bold]importing[/bold] {task.fields[debts]} debts"), BarColumn(),
                        DownloadColumn(), TransferSpeedColumn(), TimeElapsedColumn(), console=err, transient=False)
    task = progress.add_task("import", total=size, debts=0)

    def advance(summary) -> None:
        progress.update(task, completed=counter.bytes_read, debts=summary.debts)

    # An import builds and drops millions of objects, next to none of them in reference cycles;
    # the collector's default pass every 700 new objects walked each batch's rows dozens of
    # times, and the modules too. What exists by now (the modules, mostly) outlives the import:
    # it is frozen out of the walks, and a pass waits for 20,000 more live objects.
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(20_000, *thresholds[1:])
    try:
        with progress:
            summary = import_debts(tenant_id, read(counter), batch_size=batch_size, on_error=sink, on_batch=advance)
            progress.update(task, completed=counter.bytes_read if size is None else size)
    except ImportFormatError as error:
        fail(str(error))
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        sink.close()
        if source != "-":
            stream.close()
    data = summary.as_dict()
    show(data, as_json, lambda: table("import", ("created", "updated", "ignored as stale", "errors", "debts",
                                                 "rows"),
                                      [(data["created"], data["updated"], data["ignored_stale"], data["errors"],
                                        data["debts"], data["rows"])]))
    if summary.errors:
        raise typer.Exit(1)


@app.command("show")
@with_database
def show_debt(external_id: str, tenant: str = typer.Option(..., "--tenant"), as_json: bool = JSON_OPTION):
    """Show a debt with its debtor, installments and payments."""
    data = debts.debt_detail(debts.get_debt(get_tenant(tenant).id, external_id))

    def render():
        head = {key: value for key, value in data.items() if key not in ("cuotas", "pagos", "deudor")}
        head.update({f"deudor.{key}": value for key, value in data["deudor"].items()})
        installments = table("installments", ("external_id", "number", "amount", "due", "status"),
                             [(c["external_id"], c["numero"], c["monto"], c["vence"], c["estado"])
                              for c in data["cuotas"]])
        payments = table("payments", ("external_id", "boty_payment_id", "origin", "amount", "method", "paid at",
                                      "allocated to"),
                         [(p["external_id"], p["boty_payment_id"], p["origin"], p["monto"], p["metodo"],
                           p["pagado_en"],
                           ", ".join(f"{a['cuota_external_id']}={a['monto']}" for a in p["asignaciones"]))
                          for p in data["pagos"]])
        return Group(record(head, f"debt {external_id}"), installments, payments)

    show(data, as_json, render)


@app.command("list")
@with_database
def list_command(tenant: str = typer.Option(..., "--tenant"),
                 status: str = typer.Option(None, "--status", help=", ".join(DEBT_STATUSES)),
                 limit: int = typer.Option(50, "--limit", min=1, max=10000), as_json: bool = JSON_OPTION):
    """List a tenant's debts, newest first."""
    if status is not None and status not in DEBT_STATUSES:
        fail(f"unknown status {status!r}; one of {', '.join(DEBT_STATUSES)}")
    data = [{"external_id": debt.external_id, "deudor": debt.debtor.nombre, "moneda": debt.moneda,
             "monto_original": amount_json(debt.monto_original, debt.moneda),
             "saldo_pendiente": amount_json(debt.saldo_pendiente, debt.moneda), "status": debt.status,
             "auto_send": debt.auto_send, "external_version": debt.external_version}
            for debt in debts.list_debts(get_tenant(tenant).id, status).limit(limit)]
    show(data, as_json, lambda: table("debts", ("external_id", "debtor", "currency", "original", "balance", "status",
                                                "auto_send"),
                                      [(d["external_id"], d["deudor"], d["moneda"], d["monto_original"],
                                        d["saldo_pendiente"], d["status"], d["auto_send"]) for d in data]))


@app.command("pay")
@with_database
def pay(tenant: str = typer.Option(..., "--tenant"), debt: str = typer.Option(..., "--debt", help="EXTERNAL_ID"),
        amount: str = typer.Option(..., "--amount", help="In the debt's currency, e.g. 1500 or 12.50."),
        method: str = typer.Option(..., "--method", help="cash, transfer, card, deposit, check, gateway, other"),
        transaction_id: str = typer.Option(None, "--transaction-id", help="Makes a retried command pay once."),
        as_json: bool = JSON_OPTION):
    """Record a payment made inside the service; emits debt.payment_received."""
    from jobs.queue import load_tasks  # here: the queue reads the settings as it loads

    load_tasks()  # the queue's hooks: the event is fanned out once committed
    tenant_id = get_tenant(tenant).id
    payment = debts.record_service_payment(tenant_id, debt, amount, method, transaction_id=transaction_id)
    current = debts.get_debt(tenant_id, debt)
    data = debts.payment_event_data(payment, current)
    flat = {"boty_payment_id": payment.public_id, "deuda_external_id": debt,
            **{key: value for key, value in data["pago"].items() if key != "boty_payment_id"},
            "monto_sin_asignar": amount_json(payment.unassigned, payment.moneda),
            "saldo_pendiente": data["saldo_pendiente"], "status": data["status"]}
    show(flat, as_json, lambda: record(flat, "payment recorded"))


@app.command("resolve")
@with_database
def resolve(external_id: str, tenant: str = typer.Option(..., "--tenant"),
            status: str = typer.Option(..., "--status", help="paid, cancelled or written_off"),
            reason: str = typer.Option(None, "--reason"), as_json: bool = JSON_OPTION):
    """Resolve a debt: cancels its open installments and reminders."""
    debt = debts.resolve_debt(get_tenant(tenant).id, external_id, status, reason)
    data = debt.summary()
    show(data, as_json, lambda: record(data, "debt resolved"))


def _moment(raw: str | None, option: str):
    """A --since/--until value as the report reads it: naive UTC."""
    moment = moment_option(option, raw)
    return None if moment is None else to_utc_naive(moment)


@app.command("report")
@with_database
def report_command(tenant: str = typer.Option(None, "--tenant", help="One company (default: every active one)."),
                   since: str = typer.Option(None, "--since", help="Only reminders sent at or after this time."),
                   until: str = typer.Option(None, "--until", help="Only reminders sent before this time."),
                   as_json: bool = JSON_OPTION):
    """What the reminders recovered: the funnel per step and campaign, aging buckets and DSO.

    The same figures as GET /api/v1/cartera/reporte (docs/receivables.md)."""
    start, end = _moment(since, "--since"), _moment(until, "--until")
    if start and end and start >= end:
        fail("--until must be after --since")
    tenants = ([get_tenant(tenant)] if tenant else
               list(Tenant.select().where(Tenant.status == "active").order_by(Tenant.id)))
    data = [report(item, start, end).as_dict() for item in tenants]

    def money(amount: int | float, currency: str) -> str:
        """A JSON amount as people read it: `COP 50.000`, `USD 1.234,50`."""
        return format_amount(to_minor(Decimal(str(amount)), currency), currency)

    def render():
        parts = []
        for item in data:
            for key, rows in (("step", item["steps"]), ("campaign_id", item["campaigns"])):
                parts.append(table(f"{item['tenant']}: per {'step' if key == 'step' else 'campaign'}",
                                   (key, *FUNNEL, "recovered"),
                                   [(row[key], *(row[name] for name in FUNNEL),
                                     ", ".join(money(part["amount"], part["currency"]) for part in row["recovered"]))
                                    for row in rows]))
            parts.append(table(f"{item['tenant']}: aging (days past due) as of {item['as_of']}",
                               ("currency", *(name for name, _ in AGING_BUCKETS), "total"),
                               [(row["currency"], *(money(row[name], row["currency"]) for name, _ in AGING_BUCKETS),
                                 money(row["total"], row["currency"]))
                                for row in item["aging"]]))
            parts.append(table(f"{item['tenant']}: DSO", ("currency", "receivables", "credit sales (90 days)", "days"),
                               [(row["currency"], money(row["receivables"], row["currency"]),
                                 money(row["credit_sales"], row["currency"]), row["days"])
                                for row in item["dso"]]))
        return Group(*parts)

    show(data[0] if tenant else data, as_json, render)


@endpoint_app.command("set")
@with_database
def set_endpoint(tenant: str = typer.Option(..., "--tenant"), url: str = typer.Option(..., "--url"),
                 as_json: bool = JSON_OPTION):
    """Set the URL that receives debt.payment_received; prints its signing secret once."""
    from models.events import webhooks

    endpoint, secret = webhooks.set_payment_endpoint(get_tenant(tenant).id, url)
    data = {**endpoint.as_dict(), "signing_secret": secret}
    show(data, as_json, lambda: record(data, "payment endpoint (the signing secret is shown only now)"))


