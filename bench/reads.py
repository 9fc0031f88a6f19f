"""`python -m bench.api --all`: every read endpoint of the API against its own floor
(`bench/read_floor.py`) and against bare Falcon (`bench/bare_app.py`), by the server's CPU per
request, all three under gunicorn with bench/api's settings, in one run.

1. A fresh database (SQLite in a temp dir, or the PostgreSQL database given) gets one company
   with a key holding every scope, a number with templates, a campaign of 200 recipients, a
   message, 30 ledger entries, 20 debts of three installments with manual payments, a webhook
   endpoint with 60 deliveries, three dunning plans (`/cartera/respuestas` reads an empty page:
   no debtor has answered).
2. In this process, the real app answers each read twice; the SELECTs the second (warm) answer
   ran are captured at the driver's door (peewee's `execute_sql` and `models.store.db`'s
   hand-written statements), with its body: the floor's plan.
3. The service, the floor and bare Falcon each run under gunicorn; for each read, wrk times the
   service and the floor in turn, bare Falcon once a round; medians of the rounds.

Printed: read, the SELECTs its floor runs, the answer's bytes, the service's CPU ms a request,
the floor's, floor / service (1.0: the service costs what its SELECTs and JSON cost) and
bare / service.

Every GET route of the API is timed (READS; tests/test_bench_reads.py compares it with the app's
routes) but `GET /webhooks/endpoints`, limited by the contract to 30 requests a minute per
company (every answer past the first 30 would be a 429). Left out too: the HTML pages under /api/v1 (onboarding,
payment links). The contract has no `GET /cartera/deudas`: the receivables search is the
portal's page. `GET /credits/balance` is answered from the process's copy of the wallet; its
floor runs what the warm in-process request ran (nothing on SQLite; on PostgreSQL the copy's
check, one SELECT), so there the floor can cost more than the service.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import statistics
import tempfile
import uuid
from collections.abc import Iterator

from bench.common import free_port, group_cpu_seconds, gunicorn, stop, wait_for, wrk

PREFIX = "/api/v1"
# Every GET route of the API (the templates `api.app` routes), with its query where one matters.
READS = ("/credits/balance", "/credits/ledger", "/campaigns", "/campaigns/{campaign_id}",
         "/campaigns/{campaign_id}/recipients?per_page=100", "/messages/{message_id}", "/accounts",
         "/accounts/{account_id}", "/accounts/{account_id}/templates", "/cartera/deudas/{external_id}",
         "/cartera/pagos", "/cartera/respuestas", "/cartera/planes", "/cartera/planes/{plan_id}", "/cartera/reporte",
         "/webhooks/deliveries", "/health", "/openapi.json")
# /webhooks/endpoints: limited by the contract to 30 requests a minute per company (the bench's
# would be 429s). recipients.csv: an export of a whole campaign, streamed, not a read made all day.
LEFT_OUT = ("/webhooks/endpoints", "/campaigns/{campaign_id}/recipients.csv")


def selected(only: list[str] | None) -> tuple[str, ...]:
    """READS, or those holding one of `only`'s texts."""
    if not only:
        return READS
    reads = tuple(read for read in READS if any(text in read for text in only))
    if not reads:
        raise SystemExit(f"--only {' '.join(only)}: no read of {', '.join(READS)}")
    return reads


def seed(env: dict[str, str], reads: tuple[str, ...] = READS) -> tuple[str, list[str]]:
    """The company's data and key; returns the key and the reads (paths with their query)."""
    import datetime as dt

    from falcon import testing

    from api.app import create_app
    from config import load_settings, use_settings
    from models.clock import utcnow
    from models.events.tables import KIND_API, Event, WebhookDelivery, WebhookEndpoint
    from models.ids import new_id
    from models.numbers.tables import MessagingAccount, Template
    from models.receivables import debts
    from models.sending.campaigns import create_campaign
    from models.sending.tables import Message
    from models.setup import init_db
    from models.store.db import atomic, connection, upgrade
    from models.store.secrets import encrypt
    from models.tenancy import credits
    from models.tenancy.keys import SCOPES, create_key
    from models.tenancy.tenants import create_tenant

    settings = use_settings(load_settings(env))
    init_db(settings)
    upgrade()
    with connection(), atomic():
        tenant = create_tenant(f"Bench Reads Co {uuid.uuid4().hex[:6]}")  # a database may be used again
        for n in range(30):
            credits.grant(tenant.id, 1000 + n)
        _key, key = create_key(tenant, list(SCOPES), rate_limit=1_000_000)
        account = MessagingAccount.create(
            public_id=new_id("wacc_"), tenant=tenant.id, label="bench", phone_number="+15550100001",
            name="Bench", status="active", connection_mode="coexistence", business_account_id="102290129340398",
            phone_id="900000001", access_token=encrypt("not-a-token"), subscribed_to_webhooks=True,
            quality_rating="GREEN", mps=80, connected_at=utcnow())
        for n, (name, language, variables) in enumerate((("hello_world", "en_US", 0), ("payment_reminder", "es", 2),
                                                          ("order_update", "en_US", 1))):
            Template.create(account=account.id, platform_id=str(1500000000000000 + n), name=name, language=language,
                            status="approved", category="UTILITY", body_text="Hello {{1}} {{2}}"[:5 + 6 * variables],
                            header_type=None, variable_count=variables)
        campaign = create_campaign(tenant.id, {"account_id": account.public_id, "template_name": "hello_world",
                                               "recipients": [{"wa_id": f"1555{n:07d}"} for n in range(200)]})
        message = Message.create(public_id=new_id("msg_"), tenant=tenant.id, account=account.id, to="15551234567",
                                 type="text", content={"body": "hello"})
        endpoint = WebhookEndpoint.create(public_id=new_id("whend_"), tenant=tenant.id, kind=KIND_API,
                                          url="https://hooks.example.com/in", events=["message.sent"],
                                          secret_ciphertext=encrypt("whsec_bench"), secret_preview="whsec_…",
                                          active_url_hash=uuid.uuid4().hex)
        for n in range(60):
            event = Event.create(public_id=new_id("evt_"), tenant=tenant.id, name="message.sent",
                                 payload={"id": message.public_id})
            WebhookDelivery.create(event=event.id, endpoint=endpoint.id, tenant=tenant.id, event_name="message.sent",
                                   status=("delivered", "failed")[n % 2], attempts=1, max_attempts=5,
                                   delivered_at=utcnow() - dt.timedelta(seconds=n))
    # The debts through the API, as an ERP writes them; then payments made in the service.
    client = testing.TestClient(create_app(settings))
    for n in range(20):
        external_id = f"D-{n}"
        body = {"external_id": external_id, "account_id": account.public_id,
                "deudor": {"nombre": f"Debtor {n}", "documento": f"{n}-1", "telefono": f"5692222{n:04d}"},
                "moneda": "USD", "referencia": f"Invoice {n}", "monto_original": 300, "saldo_pendiente": 300,
                "auto_send": False,
                "cuotas": [{"external_id": f"{external_id}-{i}", "numero": i, "monto": 100,
                            "vence": f"2031-0{i}-10", "estado": "pending"} for i in (1, 2, 3)]}
        result = client.simulate_post(f"{PREFIX}/cartera/deudas", json=body,
                                      headers={"Authorization": f"Bearer {key}", "Idempotency-Key": uuid.uuid4().hex})
        assert result.status_code in (200, 201), result.text
    with connection():
        for n in range(10):
            debts.record_service_payment(tenant.id, f"D-{n}", "50", "transfer")
    plans = []
    for name, currency, amounts in (("Firme", "USD", (0, 1000)), ("Suave", "USD", (1000, None)), ("Todo", None, None)):
        body = {"nombre": name, "pasos": [{"dias": -3}, {"dias": 0}, {"dias": 3}, {"dias": 10}], "maximo_semanal": 2}
        if currency:
            body.update(moneda=currency, monto_desde=amounts[0], monto_hasta=amounts[1])
        result = client.simulate_post(f"{PREFIX}/cartera/planes", json=body,
                                      headers={"Authorization": f"Bearer {key}", "Idempotency-Key": uuid.uuid4().hex})
        assert result.status_code == 201, result.text
        plans.append(result.json["data"]["id"])
    first_debt = "D-0"
    ids = {"campaign_id": campaign.public_id, "message_id": message.public_id, "account_id": account.public_id,
           "external_id": first_debt, "plan_id": plans[0]}
    return key, [read.format(**ids) for read in reads]


@contextlib.contextmanager
def statements_captured() -> Iterator[list[tuple[str, object]]]:
    """Every statement handed to the driver inside the block, as the driver got it (SQL in its
    placeholder style and the parameters), through peewee or `models.store.db`'s own SQL."""
    from peewee import Database

    from models.store import db as store

    ran: list[tuple[str, object]] = []
    peewee_execute, store_execute_on = Database.execute_sql, store._execute_on

    class Recording:
        def __init__(self, cursor):
            self.cursor = cursor

        def execute(self, sql, params=None):
            ran.append((sql, params))
            return self.cursor.execute(sql, params)

    def execute_sql(self, sql, params=None, *args, **kwargs):
        ran.append((sql, params))
        return peewee_execute(self, sql, params, *args, **kwargs)

    Database.execute_sql = execute_sql
    store._execute_on = lambda cursor, sql, params: store_execute_on(Recording(cursor), sql, params)
    try:
        yield ran
    finally:
        Database.execute_sql, store._execute_on = peewee_execute, store_execute_on


def floor_plan(env: dict[str, str], key: str, reads: list[str]) -> dict:
    """Each read's SELECTs and body, from the real app answering in this process."""
    from falcon import testing

    from api.app import create_app
    from config import load_settings
    from models.store import db as store

    settings = load_settings(env)
    client = testing.TestClient(create_app(settings))
    headers = {"Authorization": f"Bearer {key}"}
    plan: dict = {"database": env.get("SVC_DATABASE_URL") or store.db.obj.database,
                  "pragmas": dict(store.SQLITE_PRAGMAS), "reads": {}}
    for read in reads:
        path, _, query = read.partition("?")
        assert client.simulate_get(PREFIX + path, query_string=query, headers=headers).status_code == 200, read
        with statements_captured() as ran:
            result = client.simulate_get(PREFIX + path, query_string=query, headers=headers)
        assert result.status_code == 200, (read, result.text)
        selects = [(sql, tuple(params) if params else None) for sql, params in ran
                   if sql.lstrip().upper().startswith(("SELECT", "WITH"))]
        plan["reads"][PREFIX + read] = (selects, result.content)
    return plan


def run(env: dict[str, str], workers: int, seconds: int, rounds: int, connections: int,
        chosen: tuple[str, ...] = READS) -> list[dict]:
    """Seed, plan the floors, then time every read: one row per read with the medians."""
    key, reads = seed(env, chosen)
    plan = floor_plan(env, key, reads)
    plan_path = os.path.join(env["SVC_DATA_DIR"], "read-floor.pickle")
    with open(plan_path, "wb") as plan_file:
        pickle.dump(plan, plan_file)
    headers = {"Authorization": f"Bearer {key}"}
    ports = {name: free_port() for name in ("service", "floor", "bare")}
    servers = {"service": gunicorn("api.wsgi:app", ports["service"], env, workers),
               "floor": gunicorn("bench.read_floor:app", ports["floor"], {**env, "READ_FLOOR_PLAN": plan_path},
                                 workers),
               "bare": gunicorn("bench.bare_app:app", ports["bare"], env, workers)}

    def url(name: str, read: str) -> str:
        return f"http://127.0.0.1:{ports[name]}{PREFIX}{read}"

    def timed(name: str, read: str) -> float:
        cpu = group_cpu_seconds(servers[name].pid)
        result = wrk(url(name, read), seconds, connections, headers=headers)
        if result["non_2xx"]:
            raise SystemExit(f"{name} {read}: {result['non_2xx']} answers not 2xx")
        return (group_cpu_seconds(servers[name].pid) - cpu) * 1000 / max(1, result["requests"])

    try:
        wait_for(url("bare", "/credits/balance"))
        for read in reads:
            for name in ("service", "floor"):
                wait_for(url(name, read), headers=headers)
                wrk(url(name, read), 1, connections, headers=headers)  # warm-up: pools filled, code paths hot
        wrk(url("bare", "/credits/balance"), 1, connections)
        samples: dict[str, dict[str, list[float]]] = {read: {"service": [], "floor": []} for read in reads}
        bare: list[float] = []
        for _round in range(rounds):
            bare.append(timed("bare", "/credits/balance"))
            for read in reads:  # the service and its floor back to back: the same moment's machine
                for name in ("service", "floor"):
                    samples[read][name].append(timed(name, read))
    finally:
        for server in servers.values():
            stop(server)
    bare_ms = statistics.median(bare)
    rows = []
    for read in reads:
        service, floor = (statistics.median(samples[read][name]) for name in ("service", "floor"))
        label = "GET " + re.sub(r"/(cmp|msg|wacc|dpl)_\w+", r"/{\1}", read)  # ids change from run to run
        rows.append({"read": label, "service_ms": service, "floor_ms": floor, "bare_ms": bare_ms,
                     "statements": len(plan["reads"][PREFIX + read][0]),
                     "bytes": len(plan["reads"][PREFIX + read][1])})
    return rows


def report(rows: list[dict], storage: str, workers: int, seconds: int, rounds: int, connections: int) -> None:
    print(f"gunicorn workers={workers}, wrk {connections} connections, median of {rounds} runs of {seconds}s "
          f"each, {storage}; bare Falcon {rows[0]['bare_ms']:.3f} ms/request")
    print(f"{'read':<58}{'SELECTs':>8}{'bytes':>7}{'CPU ms/req':>12}{'floor ms':>10}{'floor/svc':>11}"
          f"{'bare/svc':>10}")
    for row in rows:
        read = row["read"] if len(row["read"]) <= 57 else row["read"][:54] + "..."
        print(f"{read:<58}{row['statements']:>8}{row['bytes']:>7}{row['service_ms']:>12.3f}{row['floor_ms']:>10.3f}"
              f"{row['floor_ms'] / row['service_ms']:>11.2f}{row['bare_ms'] / row['service_ms']:>10.2f}")


def main(args) -> None:
    from cryptography.fernet import Fernet

    from bench.stack import UNLIMITED

    env = {"SVC_DATA_DIR": tempfile.mkdtemp(prefix="bench-reads-"), "SVC_TENANT_RATE_LIMIT": UNLIMITED,
           "SVC_READ_RATE_LIMIT": UNLIMITED, "SVC_SECRET_KEY": Fernet.generate_key().decode()}
    if args.postgres:
        env["SVC_DATABASE_URL"] = args.postgres
    if args.redis:
        env["SVC_REDIS_URL"] = args.redis
    rows = run(env, args.workers, args.seconds, args.rounds, args.connections, selected(getattr(args, "only", None)))
    storage = ("PostgreSQL" if args.postgres else "SQLite") + (" + Redis" if args.redis else "")
    report(rows, storage, args.workers, args.seconds, args.rounds, args.connections)
