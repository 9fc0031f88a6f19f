"""svcctl sim: run the messaging platform simulator, or play a customer / the business app.

Stands apart from the service's settings and database (it imports neither), so a simulator
can run anywhere, before the service is configured.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import requests
import typer
from rich.logging import RichHandler

from messaging.simulator.platform import DEFAULT_MPS
from messaging.simulator.server import Simulator, parse_bind, serve_forever
from svcctl.output import err, fail, out, plain, styled

app = typer.Typer(help="The messaging platform simulator (a local stand-in for the Graph API).")

DEFAULT_SIM_URL = "http://127.0.0.1:8090"
SIM_URL_OPTION = typer.Option(
    DEFAULT_SIM_URL, "--sim-url", envvar="SVC_GRAPH_URL", help="The running simulator."
)
JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON.")


@app.callback(invoke_without_command=True)
def run(
    ctx: typer.Context,
    bind: str = typer.Option("127.0.0.1:8090", "--bind", help="HOST:PORT to listen on."),
    webhook_url: str | None = typer.Option(
        None, "--webhook-url", envvar="SVC_SIM_WEBHOOK_URL",
        help="Where to POST the platform's webhooks (the service's /platform/webhook).",
    ),
    # A secret never goes on a command line (any local user can read it in `ps`): only the
    # environment sets it, and the flag is kept hidden for old scripts.
    app_secret: str | None = typer.Option(
        None, "--app-secret", envvar="SVC_APP_SECRET", hidden=True,
        help="Signs the webhooks; set SVC_APP_SECRET instead of passing it here.",
    ),
    mps: float = typer.Option(DEFAULT_MPS, "--mps", help="Messages per second per number."),
    duplicate_rate: float = typer.Option(
        0.02, "--duplicate-rate", help="Chance that a webhook POST is sent twice."
    ),
    shuffle: bool = typer.Option(False, "--shuffle", help="Deliver webhooks out of order."),
    delivered_delay: float = typer.Option(0.05, "--delivered-delay", help="Seconds to 'delivered'."),
    read_delay: float = typer.Option(0.1, "--read-delay", help="Seconds to 'read'."),
    review_delay: float = typer.Option(0.5, "--review-delay",
                                       help="Seconds from a template's submission to its review."),
    data_dir: str = typer.Option(
        "./var", "--data-dir", envvar="SVC_DATA_DIR",
        help="Where the simulator keeps its numbers, tokens, templates and sends across restarts.",
    ),
) -> None:
    """Run the simulator in the foreground (without a subcommand)."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        parse_bind(bind)
    except ValueError as error:
        fail(str(error))
    logging.basicConfig(
        level=logging.INFO, format="%(message)s", handlers=[RichHandler(console=err)]
    )
    # SIGTERM (from `svcctl up` or a test harness) stops as cleanly as Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)

    def ready(sim: Simulator) -> None:
        err.print(styled(("simulator", "green"), " ", sim.base_url, "  business account ", sim.waba_id))
        err.print(styled("webhooks → ", webhook_url or "(none: --webhook-url not set)"))
        err.print(styled("state in ", Path(data_dir).resolve()))
        if webhook_url and not app_secret:
            err.print(styled(("warning:", "yellow"), " SVC_APP_SECRET is not set, webhooks go unsigned"))

    try:
        serve_forever(
            bind, webhook_url=webhook_url, app_secret=app_secret, mps=mps,
            duplicate_rate=duplicate_rate, shuffle=shuffle,
            delivered_delay=delivered_delay, read_delay=read_delay, review_delay=review_delay, data_dir=data_dir,
            on_ready=ready,
        )
    except OSError as error:
        fail(f"cannot listen on {bind}: {error}")
    except KeyboardInterrupt:
        err.print("simulator stopped")


@app.command("inbound")
def inbound(
    from_wa_id: str = typer.Option(..., "--from", help="The customer's WhatsApp id (digits)."),
    to: str = typer.Option(..., "--to", help="The number's phone_number_id."),
    text: str = typer.Option(..., "--text", help="What the customer writes."),
    sim_url: str = SIM_URL_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """A customer writes to a number: the simulator posts the inbound webhook."""
    result = _control(sim_url, "/_sim/inbound", {"from": from_wa_id, "to": to, "text": text})
    _report(result, as_json, f"inbound message from {from_wa_id} to {to}")


@app.command("echo")
def echo(
    from_number: str = typer.Option(..., "--from", help="The number's phone_number_id."),
    to: str = typer.Option(..., "--to", help="The customer's WhatsApp id (digits)."),
    text: str = typer.Option(..., "--text", help="What the business app sends."),
    sim_url: str = SIM_URL_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Someone replies from the business app: the simulator posts the echo webhook."""
    result = _control(sim_url, "/_sim/echo", {"from": from_number, "to": to, "text": text})
    _report(result, as_json, f"echo from {from_number} to {to}")


def _control(sim_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    url = sim_url.rstrip("/") + path
    try:
        response = requests.post(url, json=body, timeout=(3.05, 15))
    except requests.RequestException as error:
        fail(f"simulator not reachable at {sim_url} ({type(error).__name__})")
    try:
        data = response.json()
    except ValueError:
        data = {}
    if response.status_code >= 400:
        message = (data.get("error") or {}).get("message") if isinstance(data, dict) else None
        fail(f"simulator answered {response.status_code}: {message or response.text[:200]}")
    return data


def _report(result: dict[str, Any], as_json: bool, what: str) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    # The numbers and the text come from the command line and the simulator: text, never markup.
    out.print(plain(f"{what}: {result.get('wamid')} (service answered HTTP {result.get('webhook_status')})"))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
