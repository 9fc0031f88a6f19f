"""svcctl up | serve | worker: the processes of the service."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import typer

from config import ConfigError, Settings, get_settings
from config.logs import configure_logging
from config.settings import parse_bind
from models.setup import init_db
from models.store.db import connection
from svcctl.output import err, fail, styled

ROOT = Path(__file__).resolve().parent.parent
GUNICORN_CONFIG = ROOT / "api" / "gunicorn_settings.py"
DEMO_TENANT = "Demo Company"
DEMO_CREDITS = 1000
DEMO_OWNER = "owner@demo.example.com"
PLATFORM_WEBHOOK_PATH = "/platform/webhook"


def _split_bind(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit():
        fail(f"--bind expects HOST:PORT, got {bind!r}")
    return host, int(port)


def serve(bind: str = typer.Option("127.0.0.1:8080", "--bind", help="HOST:PORT to listen on."),
          workers: int = typer.Option(None, "--workers", help="Gunicorn workers (default SVC_WEB_CONCURRENCY).")):
    """Run the API under gunicorn in the foreground."""
    _split_bind(bind)
    try:
        get_settings()
    except ConfigError as error:
        fail(str(error))
    env = {**os.environ, "SVC_BIND": bind}
    if workers:
        env["SVC_WEB_CONCURRENCY"] = str(workers)
    args = [sys.executable, "-m", "gunicorn", "-c", str(GUNICORN_CONFIG), "--chdir", str(ROOT), "api.wsgi:app"]
    os.execve(sys.executable, args, env)


def worker(threads: int = typer.Option(None, "--threads", help="Worker threads (default SVC_WORKER_THREADS)."),
           no_periodic: bool = typer.Option(False, "--no-periodic",
                                            help="Do not schedule periodic tasks (all consumers but one)."),
           metrics_port: str = typer.Option(None, "--metrics-port",
                                            help="[HOST:]PORT of its /metrics (default SVC_METRICS_PORT); "
                                                 "beyond loopback it needs SVC_METRICS_TOKEN.")):
    """Run the queue consumer (thread workers) in the foreground."""
    try:
        settings = get_settings()
        metrics_bind = parse_bind("--metrics-port", metrics_port) if metrics_port else settings.metrics_bind
    except ConfigError as error:
        fail(str(error))
    configure_logging(settings.log_format, settings.log_level)
    from jobs.operations import serve_metrics
    from jobs.queue import huey, load_tasks
    from models.operations.heartbeats import Heartbeat
    from models.operations.tables import WORKER

    init_db(settings)
    load_tasks()
    # What is loaded by now lives as long as the process: kept out of the collector's full passes,
    # which otherwise stop every thread (paced sends included) for tens of milliseconds.
    gc.freeze()
    workers = threads or settings.worker_threads
    consumer = huey.create_consumer(workers=workers, worker_type="thread",
                                    periodic=not no_periodic, check_worker_health=True, backoff=1.15,
                                    max_delay=0.5, initial_delay=0.05)
    if metrics_bind:
        serve_metrics(*metrics_bind, settings.metrics_token)
    heartbeat = Heartbeat(WORKER, workers, periodic=not no_periodic).start()
    try:
        consumer.run()
    finally:
        heartbeat.stop()


def _ensure_demo_tenant() -> tuple[str, str | None, str | None]:
    """The demo tenant's id, its key and its portal owner's password, the latter two the first
    time only (a secret is never shown twice)."""
    from models.tenancy import credits, portal
    from models.tenancy.keys import create_key
    from models.tenancy.tables import PortalUser, Tenant
    from models.tenancy.tenants import create_tenant

    with connection():
        tenant = Tenant.get_or_none(Tenant.name == DEMO_TENANT)
        key_string = password = None
        if tenant is None:
            tenant = create_tenant(DEMO_TENANT)
            credits.grant(tenant.id, DEMO_CREDITS, reason="demo credits")
            _key, key_string = create_key(tenant, ["all"])
        # Also on a data dir from before the portal: its demo company gets its owner now.
        if not PortalUser.select().where(PortalUser.email == DEMO_OWNER).exists():
            password = portal.generated_password()
            portal.create_user(tenant.id, DEMO_OWNER, "owner", password)
        return tenant.public_id, key_string, password


def _wait_for(url: str, what: str, seconds: float = 15) -> bool:
    import requests

    deadline = time.time() + seconds
    while True:
        try:
            if requests.get(url, timeout=2).ok:
                return True
        except requests.RequestException:
            pass
        if time.time() > deadline:
            err.print(styled((f"{what} not answering", "yellow")))
            return False
        time.sleep(0.2)


def _connect_demo_gateway(tenant_public_id: str, gateway_url: str) -> None:
    """Give the demo company a seller on the payment simulator (whose state lives only as long
    as the process), so its reminders carry payment links."""
    import requests

    from models.receivables import payments
    from models.tenancy.tenants import get_tenant

    if not _wait_for(f"{gateway_url}/_sim/health", "payment simulator (the demo company has no gateway)"):
        return
    seller = requests.post(f"{gateway_url}/_sim/sellers", timeout=5).json()
    with connection():
        payments.connect_gateway(get_tenant(tenant_public_id).id, seller["access_token"], seller["webhook_secret"])


def _connect_demo_number(tenant_public_id: str) -> str | None:
    """Connect a number of the platform simulator to the demo company, once, the way a business
    does through embedded signup. Its business account first gets the payment-link template a
    reminder carries its link in (as if the business had created it in WhatsApp Manager): the
    reminder's words and a "Pay now" URL button to this service's payment page. It is declared on
    every start, so a simulator kept from an older start gets the template as it is now, and an
    already connected number syncs its templates again."""
    import requests

    from jobs.accounts import connected
    from messaging.errors import PlatformError
    from models.numbers import onboarding
    from models.numbers.tables import MessagingAccount
    from models.numbers.templates import sync_templates
    from models.receivables.payments import LINK_TEMPLATE_LANGUAGES, link_template_definition
    from models.tenancy.tenants import get_tenant

    settings = get_settings()
    if not _wait_for(f"{settings.graph_url}/_sim/health", "platform simulator"):
        return None
    for language in LINK_TEMPLATE_LANGUAGES:
        requests.post(f"{settings.graph_url}/_sim/templates", timeout=5,
                      json=link_template_definition(settings.public_url, language)).raise_for_status()
    with connection():
        tenant = get_tenant(tenant_public_id)
        account = MessagingAccount.get_or_none((MessagingAccount.tenant == tenant.id)
                                               & (MessagingAccount.status == "active"))
        if account is not None:
            try:
                sync_templates(account)
            except PlatformError as error:
                err.print(styled(("the demo number's templates did not sync:", "yellow"), " ", error.message))
            return account.public_id
        attempt = onboarding.create_attempt(tenant.id, redirect_url=f"{settings.public_url}/portal",
                                            label="demo number")
        signup = onboarding.simulator_signup()
        outcome = onboarding.complete(attempt.public_id, signup["code"], signup["waba_id"],
                                      signup["phone_number_id"])
        if outcome.connected is None:
            err.print(styled(("the demo number did not connect:", "yellow"), " ", outcome.attempt.error))
            return None
        connected(outcome.connected.id)  # the worker subscribes the app and syncs its templates
        return outcome.connected.public_id


def _print_banner(settings: Settings, sim_bind: str | None, payments_sim_bind: str | None, tenant_id: str,
                  number_id: str | None, key_string: str | None, password: str | None) -> None:
    """Where everything is and how to get in, in 80 columns: a label, then what to copy. Only the
    key (longer than 80 characters by itself) and the command quoting it run past; they are never
    broken by us, so the terminal wraps them and they paste whole."""
    base = f"{settings.public_url}/api/v1"

    def say(label: str, *value) -> None:
        err.print(styled((f"{label:<9}", "green"), *value), soft_wrap=True)

    def then(*value) -> None:  # a second line under the same label
        err.print(styled(" " * 9, *value), soft_wrap=True)

    say("API", base)
    if sim_bind:
        say("sim", f"http://{sim_bind}", " (platform simulator)")
        say("payments", f"http://{payments_sim_bind}", " (gateway simulator)")
    say("tenant", tenant_id, f" ({DEMO_TENANT})")
    if number_id:
        say("number", number_id, " (simulated, ready to send)")
    if key_string:
        say("key", key_string)
        say("try", f"curl -H 'Authorization: Bearer {key_string}' {base}/health")
    else:
        say("key", "shown at first start only; make another with:")
        then(f"svcctl keys create --tenant {tenant_id} --scope all")
    say("portal", f"{settings.public_url}/portal")
    if password:
        say("sign in", DEMO_OWNER, " / ", password)
    else:
        say("sign in", DEMO_OWNER)
        then("password shown at first start only; set a new one with:")
        then(f"svcctl portal reset-password --email {DEMO_OWNER}")


def _play_demo_collection(tenant_id: str, number_id: str, settings: Settings, stopping: Callable[[], bool]) -> None:
    """The collection loop on the demo company, once per data dir (svcctl/collection.py); a stop
    asked meanwhile ends it, and `up` stops its processes as always."""
    import requests

    from models.errors import DomainError
    from svcctl.collection import DemoStalled, play

    try:
        lines = play(tenant_id, number_id, settings.graph_url, settings.payments_gateway_url, stopping)
    except (DemoStalled, DomainError, requests.RequestException, KeyError, ValueError) as error:
        # A simulator answering oddly costs the demo its loop, never the service its start.
        err.print(styled(("the demo collection loop stopped:", "yellow"), " ", str(error)))
        return
    for label, line in lines:
        err.print(styled((f"{label:<9}", "green"), line), soft_wrap=True)


def up(bind: str = typer.Option("127.0.0.1:8080", "--bind", help="HOST:PORT for the API."),
       sim: bool = typer.Option(False, "--sim", help="Also run the platform simulator, wired to the API."),
       sim_bind: str = typer.Option("127.0.0.1:8090", "--sim-bind", help="HOST:PORT for the simulator."),
       payments_sim_bind: str = typer.Option("127.0.0.1:8091", "--payments-sim-bind",
                                             help="HOST:PORT for the payment gateway simulator (with --sim)."),
       allow_private_webhooks: bool = typer.Option(
           False, "--allow-private-webhooks",
           help="Let companies' webhook endpoints point at private and loopback addresses (local receivers "
                "only: it turns the SSRF guard off).")):
    """Migrate, then run the API and the worker (and the simulator) in the foreground; Ctrl-C stops all."""
    from models.store.db import upgrade

    host, port = _split_bind(bind)
    env = dict(os.environ)
    env.setdefault("SVC_PUBLIC_URL", f"http://{'127.0.0.1' if host in {'0.0.0.0', '::'} else host}:{port}")
    if sim:
        env["SVC_GRAPH_URL"] = f"http://{sim_bind}"
        env["SVC_PAYMENTS_GATEWAY_URL"] = f"http://{payments_sim_bind}"
    # Only when asked: the simulator needs no private webhook targets, and a demo reachable from
    # elsewhere must not let anyone point deliveries at the machine's own services.
    if allow_private_webhooks:
        env["SVC_WEBHOOK_ALLOW_PRIVATE"] = "true"
    os.environ.update(env)
    try:
        settings = get_settings()
    except ConfigError as error:
        fail(str(error))
    init_db(settings)
    applied = upgrade()
    if applied:
        err.print(f"applied {len(applied)} migration(s)")
    settings = get_settings()  # a migration may have replaced the generated master key
    tenant_id, key_string, password = _ensure_demo_tenant()

    svcctl = [sys.executable, "-m", "svcctl.main"]
    commands = {"api": svcctl + ["serve", "--bind", bind], "worker": svcctl + ["worker"]}
    if sim:
        commands["sim"] = svcctl + ["sim", "--bind", sim_bind, "--webhook-url",
                                    settings.public_url + PLATFORM_WEBHOOK_PATH]
        commands["payments-sim"] = svcctl + ["payments", "sim", "--bind", payments_sim_bind]
    # The simulator signs the platform's webhooks with the app secret: it gets it through its
    # environment, never its command line, where `ps` would show it to any local user.
    child_env = {name: env for name in commands}
    if sim:
        child_env["sim"] = {**env, "SVC_APP_SECRET": settings.app_secret}
    children = {name: subprocess.Popen(command, env=child_env[name], cwd=ROOT)
                for name, command in commands.items()}

    number_id = None
    if sim:
        _connect_demo_gateway(tenant_id, settings.payments_gateway_url)
        number_id = _connect_demo_number(tenant_id)
    _print_banner(settings, sim_bind if sim else None, payments_sim_bind if sim else None, tenant_id, number_id,
                  key_string, password)
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    if sim and number_id:
        _play_demo_collection(tenant_id, number_id, settings, lambda: stopping)
    exit_code = 0
    while not stopping:
        for name, child in children.items():
            if child.poll() is not None:
                err.print(styled((f"{name} exited with {child.returncode}; stopping", "red")))
                stopping, exit_code = True, 1
                break
        time.sleep(0.2)
    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.time() + 25
    for child in children.values():
        try:
            child.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            child.kill()
    raise typer.Exit(exit_code)
