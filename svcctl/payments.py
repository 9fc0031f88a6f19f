"""svcctl payments: connect a company's payment gateway, reconcile, run the gateway simulator;
and `svcctl cartera payments export`, the ERP's nightly feed."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import requests
import typer

from svcctl.feeds import AFTER_OPTION, CURSOR_FILE_OPTION, FORMAT_OPTION, SINCE_OPTION, stream_feed
from svcctl.output import JSON_OPTION, err, fail, moment_option, record, show, styled, table, with_database

app = typer.Typer(help="The payment gateway: credentials, reconciliation, the simulator.", no_args_is_help=True)
export_app = typer.Typer(help="Payments made in the service, for the ERP.", no_args_is_help=True)

DEFAULT_SIM_BIND = "127.0.0.1:8091"
EXPORT_COLUMNS = ("cursor", "tipo", "boty_payment_id", "reverso_id", "motivo", "deuda_external_id", "transaction_id",
                  "monto", "moneda", "metodo", "ocurrido_en", "saldo_pendiente", "monto_sin_asignar", "registrado_en")


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
def export(tenant: str = typer.Option(..., "--tenant"), since: str = SINCE_OPTION, after: int = AFTER_OPTION,
           cursor_file: Path = CURSOR_FILE_OPTION, fmt: str = FORMAT_OPTION):
    """Stream every payment and reversal made in the service (gateway and manual) to stdout."""
    from models.receivables.export import export_rows
    from models.tenancy.tenants import get_tenant

    start = moment_option("--since", since)
    stream_feed(lambda cursor: export_rows(get_tenant(tenant).id, since=start, after=cursor), EXPORT_COLUMNS, fmt=fmt,
                after=after, cursor_file=cursor_file, json_value=_exact_amount)


def _exact_amount(name: str, value):
    # Decimal amounts go out as strings: exact, whatever the reader's JSON numbers are.
    return str(value) if name in ("monto", "saldo_pendiente", "monto_sin_asignar") else value
