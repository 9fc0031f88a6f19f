"""svcctl payments: connect a company's payment gateway, reconcile, run the gateway simulator;
and `svcctl cartera payments export`, the ERP's nightly feed."""

from __future__ import annotations

import csv
import datetime as dt
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import orjson
import requests
import typer

from svcctl.output import JSON_OPTION, err, fail, record, show, styled, table, with_database

app = typer.Typer(help="The payment gateway: credentials, reconciliation, the simulator.", no_args_is_help=True)
export_app = typer.Typer(help="Payments made in the service, for the ERP.", no_args_is_help=True)

DEFAULT_SIM_BIND = "127.0.0.1:8091"
EXPORT_COLUMNS = ("cursor", "tipo", "boty_payment_id", "reverso_id", "motivo", "deuda_external_id", "transaction_id",
                  "monto", "moneda", "metodo", "ocurrido_en", "saldo_pendiente", "monto_sin_asignar", "registrado_en")


def moment_option(name: str, raw: str | None) -> dt.datetime | None:
    if raw is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(raw)
    except ValueError:
        fail(f"{name}: expected an ISO 8601 date or date-time, got {raw!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


@app.command("connect")
@with_database
def connect(tenant: str = typer.Option(..., "--tenant"),
            sim: bool = typer.Option(False, "--sim", help="Make a seller on the running gateway simulator."),
            as_json: bool = JSON_OPTION):
    """Store the company's gateway credentials (encrypted). Reads the access token and the webhook
    secret from standard input, one a line, or asks for them; secrets never go on a command line."""
    from config import get_settings
    from models.receivables import payments
    from models.receivables.tables import PROVIDER
    from models.tenancy.tenants import get_tenant

    tenant_row = get_tenant(tenant)
    if sim:
        url = get_settings().payments_gateway_url
        try:
            seller = requests.post(f"{url}/_sim/sellers", timeout=(3.05, 10)).json()
        except (requests.RequestException, ValueError):
            fail(f"no gateway simulator answers at {url}")
        token, secret = seller["access_token"], seller["webhook_secret"]
    elif sys.stdin.isatty():
        token = typer.prompt("Access token", hide_input=True)
        secret = typer.prompt("Webhook secret (secret signature)", hide_input=True)
    else:
        lines = sys.stdin.read().splitlines()
        if len(lines) < 2:
            fail("expected the access token and the webhook secret on standard input, one a line")
        token, secret = lines[0], lines[1]
    payments.connect_gateway(tenant_row.id, token, secret)
    data = {"tenant": tenant_row.public_id, "provider": PROVIDER,
            "notification_url": payments.notification_url(tenant_row.public_id)}
    show(data, as_json, lambda: record(data, "payment gateway connected"))


@app.command("reconcile")
@with_database
def reconcile(tenant: str = typer.Option(..., "--tenant"),
              since: str = typer.Option(None, "--since", help="ISO date-time (default: SVC_PAYMENTS_RECONCILE_HOURS "
                                                              "ago)."),
              as_json: bool = JSON_OPTION):
    """Compare the gateway's transactions with recorded payments; record what is missing."""
    from models.receivables import payments
    from models.tenancy.tenants import get_tenant

    report = payments.reconcile(get_tenant(tenant).id, moment_option("--since", since))
    show(report, as_json, lambda: table(f"{len(report)} transaction(s) recorded or refused",
                                        ("transaction", "status", "outcome"),
                                        [(item["transaction_id"], item["status"], item["outcome"]) for item in report]))


@app.command("sim")
def sim(bind: str = typer.Option(DEFAULT_SIM_BIND, "--bind", help="HOST:PORT to listen on."),
        duplicates: int = typer.Option(1, "--duplicates", min=0, help="Extra copies of each notification."),
        max_delay: float = typer.Option(0.5, "--max-delay", min=0, help="Seconds a notification may be late."),
        no_shuffle: bool = typer.Option(False, "--no-shuffle", help="Deliver notifications in order.")):
    """Run the payment gateway simulator in the foreground."""
    from gateway.simulator import GatewaySimulator, parse_bind

    try:
        host, port = parse_bind(bind)
    except ValueError as error:
        fail(str(error))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    signal.signal(signal.SIGTERM, _interrupt)
    simulator = GatewaySimulator(host, port, duplicates=duplicates, max_delay=max_delay, shuffle=not no_shuffle)
    try:
        simulator.serve_forever(lambda s: err.print(styled(("payment gateway simulator", "green"), " ", s.base_url)))
    except OSError as error:
        fail(f"cannot listen on {bind}: {error}")
    except KeyboardInterrupt:
        err.print("payment gateway simulator stopped")


def _interrupt(signum, frame):
    raise KeyboardInterrupt


@export_app.command("export")
@with_database
def export(tenant: str = typer.Option(..., "--tenant"),
           since: str = typer.Option(None, "--since", help="Only what was recorded at or after this ISO time."),
           after: int = typer.Option(None, "--after", min=0, help="Only what follows this cursor."),
           cursor_file: Path = typer.Option(None, "--cursor-file",
                                            help="Read the cursor from this file, and write the last one back "
                                                 "once everything is out: a nightly job gets exactly what is new."),
           fmt: str = typer.Option("csv", "--format", help="csv or jsonl")):
    """Stream every payment and reversal made in the service (gateway and manual) to stdout."""
    from models.receivables.export import export_rows
    from models.tenancy.tenants import get_tenant

    check_feed_format(fmt)
    start = moment_option("--since", since)
    stream_feed(lambda cursor: export_rows(get_tenant(tenant).id, since=start, after=cursor), EXPORT_COLUMNS, fmt=fmt,
                after=after, cursor_file=cursor_file, json_value=_exact_amount)


def check_feed_format(fmt: str) -> None:
    if fmt not in ("csv", "jsonl"):
        fail(f"--format must be csv or jsonl, got {fmt!r}")


def _exact_amount(name: str, value):
    # Decimal amounts go out as strings: exact, whatever the reader's JSON numbers are.
    return str(value) if name in ("monto", "saldo_pendiente", "monto_sin_asignar") else value


def _plain_cell(value) -> str:
    return "" if value is None else str(value)


def stream_feed(rows_after: Callable[[int], Iterable[dict]], columns: tuple[str, ...], *, fmt: str,
                after: int | None, cursor_file: Path | None, csv_cell: Callable[[object], str] = _plain_cell,
                json_value: Callable[[str, object], object] = lambda _name, value: value) -> None:
    """Write an ERP feed numbered by cursor to stdout, CSV or JSON Lines, from `after` or the
    cursor in `cursor_file` (whose last cursor is written back once every row is out); the
    count and the last cursor go to stderr. `rows_after(cursor)` streams the rows after one."""
    check_feed_format(fmt)
    cursor = after or 0
    if cursor_file is not None and after is None and cursor_file.exists():
        text = cursor_file.read_text().strip()
        if not text.isdigit():
            fail(f"{cursor_file} does not hold a cursor")
        cursor = int(text)
    writer = csv.writer(sys.stdout, lineterminator="\n") if fmt == "csv" else None
    if writer is not None:
        writer.writerow(columns)
    count, last = 0, cursor
    for row in rows_after(cursor):
        if writer is not None:
            writer.writerow([csv_cell(row[name]) for name in columns])
        else:
            sys.stdout.write(orjson.dumps({name: json_value(name, row[name]) for name in columns}).decode() + "\n")
        count, last = count + 1, row["cursor"]
    sys.stdout.flush()
    if cursor_file is not None:
        # Written whole or not at all, and only after the rows are out.
        partial = cursor_file.with_name(cursor_file.name + ".tmp")
        partial.write_text(f"{last}\n")
        os.replace(partial, cursor_file)
    err.print(f"{count} row(s); cursor {last}")
