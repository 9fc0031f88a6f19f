"""Fixtures for the fault, scale-out and hostile-input tests: a private PostgreSQL and Redis this
session can restart at will, a cluster of real processes (several API nodes and consumers), and
the checks every fault must leave true.

The private servers (`private_servers`) run on free ports from the machine's PostgreSQL and Redis
binaries, so restarting them never disturbs another test or anyone sharing the shared servers.
Outside CI missing binaries skip; in CI (`CI=true`) they fail, like tests/conftest.py's `_require`.

`from tests.faults_fixtures import *` brings the fixtures; helpers are imported by name.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg2
import pytest
import requests

from config import load_settings, use_settings
from models import setup
from models.store import db as database
from tests.campaigns_fixtures import counted, counters_disagreeing, status_counters
from tests.conftest import IN_CI, base_env
from tests.live import LiveService, free_port, wait_until
from tests.webhooks_fixtures import Receiver, webhook_ca  # noqa: F401  (fixture)

__all__ = ["private_servers", "module_storage", "private_storage", "webhook_ca"]

CORE_EVENTS = ["account.connected", "campaign.created", "campaign.completed", "message.sent", "message.delivered",
               "message.read", "message.failed", "message.inbound.created", "message.echo.created"]


def _missing(problem: str):
    if IN_CI:
        pytest.fail(problem)
    pytest.skip(problem)


# --- private PostgreSQL and Redis ------------------------------------------------------------------


class PrivatePostgres:
    """A PostgreSQL cluster of this test session's own (initdb into a temporary directory)."""

    def __init__(self):
        binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not binaries:
            _missing("PostgreSQL server binaries (/usr/lib/postgresql/*/bin) are not installed")
        self.bin = Path(binaries[-1]).parent
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="svc-private-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        # PostgreSQL refuses to run as root: the cluster belongs to the `postgres` user then.
        self.runas = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.runas:
            shutil.chown(self.root, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.runas, str(self.bin / tool), *args], check=True, capture_output=True, timeout=120)

    @property
    def options(self) -> str:
        return (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c max_connections=200 -c full_page_writes=off")

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}"

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-o", self.options, "-l", str(self.log), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, down_seconds: float = 0.0, mode: str = "fast") -> None:
        """Stop (fast: every connection is cut), stay down a while, start again."""
        self.stop(mode)
        time.sleep(down_seconds)
        self.start()

    def admin(self):
        connection = psycopg2.connect(self.dsn + "/postgres", connect_timeout=5)
        connection.autocommit = True
        return connection

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """A Redis server of this session's own, without persistence (as in CI): a restart loses all."""

    def __init__(self):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            _missing("redis-server is not installed")
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "no", "--dir", tempfile.gettempdir()],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        wait_until(lambda: _pings(redis.Redis.from_url(self.url, socket_connect_timeout=0.5)), timeout=10,
                   message="the private Redis")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def restart(self, down_seconds: float = 0.0) -> None:
        """Kill it (no goodbye to clients), stay down a while, start an empty one on the same port."""
        self.stop()
        time.sleep(down_seconds)
        self.start()


def _pings(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


@dataclass
class PrivateServers:
    postgres: PrivatePostgres
    redis: PrivateRedis
    template: str = ""


@pytest.fixture(scope="session")
def private_servers():
    postgres = PrivatePostgres()
    redis_server = PrivateRedis()
    try:
        postgres.start()
        redis_server.start()
        servers = PrivateServers(postgres, redis_server, template="svc_private_tpl")
        admin = postgres.admin()
        admin.cursor().execute(f'CREATE DATABASE "{servers.template}"')
        admin.close()
        settings = use_settings(load_settings({**base_env(postgres.root / "tpl"),
                                               "SVC_DATABASE_URL": f"{postgres.dsn}/{servers.template}"}))
        setup.init_db(settings)
        database.upgrade()
        database.db.close_all()
        yield servers
    finally:
        redis_server.stop()
        postgres.destroy()


def _database_storage(tmp_path: Path, dsn: str, template: str, redis_url: str, admin):
    name = f"svc_t_{uuid.uuid4().hex[:12]}"
    admin.cursor().execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    settings = load_settings({**base_env(tmp_path / "data"), "SVC_DATABASE_URL": f"{dsn}/{name}",
                              "SVC_REDIS_URL": redis_url, "SVC_QUEUE_NAME": f"svc-test-{name}"})
    use_settings(settings)
    setup.init_db(settings)
    return name, settings


@pytest.fixture(scope="module")
def module_storage(private_servers, tmp_path_factory):
    """A fresh database on the private PostgreSQL and a queue on the private Redis for a whole
    test module: its tests share one cluster (`cluster_fixture`), each working as a company of
    its own, so starting the processes is paid once per module."""
    servers = private_servers
    # A previous module may have restarted the servers; make sure they are up.
    if not _pings(__import__("redis").Redis.from_url(servers.redis.url, socket_connect_timeout=0.5)):
        servers.redis.start()
    admin = servers.postgres.admin()
    name, settings = _database_storage(tmp_path_factory.mktemp("storage"), servers.postgres.dsn, servers.template,
                                       servers.redis.url, admin)
    admin.close()
    try:
        yield settings
    finally:
        database.db.close_all()
        admin = servers.postgres.admin()
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def private_storage(module_storage, immediate_queue):
    """The module's storage installed for this test (like conftest's `storage`), with a
    connection open, and the real queue for the child processes."""
    immediate_queue.immediate = False
    use_settings(module_storage)
    setup.init_db(module_storage)
    with database.connection():
        yield module_storage


def cluster_fixture(nodes: int, consumers: int, env: dict[str, str] | None = None, **options):
    """A module's `cluster` fixture: one Cluster on the module's storage for all its tests."""

    @pytest.fixture(scope="module", name="module_cluster")
    def module_cluster(module_storage, webhook_ca, tmp_path_factory):
        from tests.live import env_for

        env_all = {**env_for(module_storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1], **(env or {})}
        cluster = Cluster(env_all, tmp_path_factory.mktemp("cluster"), nodes=nodes, consumers=consumers,
                          **options).start()
        yield cluster
        cluster.stop()

    @pytest.fixture(name="cluster")
    def cluster(module_cluster, private_storage):
        return module_cluster

    return module_cluster, cluster


def reconnect() -> None:
    """The test's own connection after its server was restarted: drop the pooled ones, open anew."""
    wait_until(_database_answers, timeout=30, message="PostgreSQL to accept connections again")


def _database_answers() -> bool:
    try:
        if not database.db.is_closed():
            database.db.close()
        database.db.close_all()
        database.db.connect(reuse_if_open=True)
        database.db.execute_sql("SELECT 1")
        return True
    except Exception:
        return False


# --- a cluster of real processes ---------------------------------------------------------------------


class Cluster(LiveService):
    """LiveService with `nodes` API nodes (gunicorn) and `consumers` queue consumers, the first of
    which schedules the periodic tasks. Process names: api, api2, ...; worker, worker2, ..."""

    def __init__(self, env: dict[str, str], log_dir: Path, nodes: int = 2, consumers: int = 2, **options):
        super().__init__(env, log_dir, **options)
        self.node_ports = [self.api_port] + [free_port() for _ in range(nodes - 1)]
        self.consumers = consumers

    @property
    def node_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.node_ports]

    @staticmethod
    def node_name(index: int) -> str:
        return "api" if index == 0 else f"api{index + 1}"

    @staticmethod
    def worker_name(index: int) -> str:
        return "worker" if index == 0 else f"worker{index + 1}"

    def start(self) -> Cluster:
        self.start_sim()
        for index in range(len(self.node_ports)):
            self.start_node(index)
        for index in range(self.consumers):
            self.start_worker(self.worker_name(index), periodic=index == 0)
        for url in self.node_urls:
            wait_until(lambda url=url: self._answers(f"{url}/api/v1/openapi.json"), message=f"the API at {url}")
        wait_until(lambda: self._answers(f"{self.sim_url}/_sim/health"), message="the simulator")
        return self

    def start_node(self, index: int) -> subprocess.Popen:
        return self._spawn(self.node_name(index), ["serve", "--bind", f"127.0.0.1:{self.node_ports[index]}"])

    def gunicorn_workers(self, index: int = 0) -> list[int]:
        """The pids of a node's gunicorn workers (the master's children)."""
        master = self.processes[self.node_name(index)].pid
        children = Path(f"/proc/{master}/task/{master}/children")
        return [int(pid) for pid in children.read_text().split()] if children.exists() else []

    def alive(self) -> list[str]:
        return [name for name, process in self.processes.items() if process.poll() is None]


# --- the world a fault test runs in, and what must hold after it ---------------------------------------


class Switchable:
    """A receiver's answers: 200, or (while `down`) a dropped connection. Remembers which event
    ids it acknowledged with a 2xx."""

    def __init__(self):
        self.down_until = 0.0
        self.acknowledged: set[str] = set()
        self.refused = 0

    def go_down(self, seconds: float) -> None:
        self.down_until = time.monotonic() + seconds

    def __call__(self, request):
        from tests.webhooks_fixtures import Reply

        if time.monotonic() < self.down_until:
            self.refused += 1
            raise ConnectionResetError("receiver down")
        self.acknowledged.add(request.headers.get("X-Service-Event-Id"))
        return Reply(200)


@dataclass
class Company:
    persona: object
    account: object
    endpoint_secret: str
    receiver: Receiver
    answers: Switchable
    campaigns: list[str] = field(default_factory=list)


def connect_number(cluster: LiveService, persona, mps: int, mode: str = "internal"):
    """A number on the cluster's simulator with the platform's cap `mps`, stored as onboarding stores it."""
    from tests.campaigns_fixtures import make_number, sim_signup

    phone_id, token = sim_signup(cluster.sim_url, cluster.env["SVC_APP_SECRET"], mps)
    return make_number(persona.id, mps=mps, connection_mode=mode, phone_id=phone_id, token=token)


def api(cluster: LiveService, persona, method: str, path: str, node: str | None = None, **kwargs):
    base = node or cluster.api_url
    kwargs.setdefault("timeout", 30)
    return requests.request(method, f"{base}/api/v1{path}", headers={**persona.headers, **kwargs.pop("headers", {})},
                            **kwargs)


def company(cluster: LiveService, ca, name: str, mps: int, credits: int = 100_000) -> Company:
    """A company with a number on the simulator and a webhook endpoint (an HTTPS receiver on
    loopback) for every core event. Close `company.receiver` when done."""
    from models.events import webhooks
    from tests.conftest import Persona

    persona = Persona(name, credits=credits, rate_limit=100_000)
    account = connect_number(cluster, persona, mps)
    answers = Switchable()
    receiver = Receiver(ca, respond=answers)
    _endpoint, secret = webhooks.create_endpoint(persona.id, receiver.url(), CORE_EVENTS)
    return Company(persona, account, secret, receiver, answers)


def start_campaign(cluster: LiveService, company: Company, wa_ids: list[str], node: str | None = None) -> str:
    body = {"account_id": company.account.public_id, "template_name": "hello_world",
            "recipients": [{"wa_id": wa_id} for wa_id in wa_ids]}
    response = api(cluster, company.persona, "POST", "/campaigns", node=node, json=body)
    assert response.status_code == 201, response.text
    campaign_id = response.json()["data"]["id"]
    company.campaigns.append(campaign_id)
    return campaign_id


def accepted_count(campaign_id: str) -> int:
    from models.sending.tables import Campaign, CampaignRecipient

    campaign = Campaign.get(Campaign.public_id == campaign_id)
    return (CampaignRecipient.select().where((CampaignRecipient.campaign == campaign.id)
                                            & CampaignRecipient.wam_id.is_null(False)).count())


def wait_for_progress(campaign_id: str, at_least: int, timeout: float = 30) -> int:
    return wait_until(lambda: (count := accepted_count(campaign_id)) >= at_least and count, timeout=timeout,
                      interval=0.1, message=f"{at_least} accepted sends of {campaign_id}")


def sim_sent(cluster: LiveService) -> list[dict]:
    return requests.get(f"{cluster.sim_url}/_sim/sent", timeout=30).json()["data"]


def wait_until_completed(cluster: LiveService, company: Company, timeout: float = 120) -> None:
    """Every campaign of the company completed and every single message settled (sent or failed)."""
    from models.sending.tables import Campaign, Message

    def done():
        try:
            statuses = [Campaign.get(Campaign.public_id == c).status for c in company.campaigns]
            queued = Message.select().where((Message.tenant == company.persona.id)
                                            & (Message.status == "queued")).count()
        except Exception:
            reconnect()
            return False
        return all(status == "completed" for status in statuses) and not queued

    try:
        wait_until(done, timeout=timeout, interval=0.5, message="every campaign to complete")
    except AssertionError:
        states = {c: Campaign.get(Campaign.public_id == c).status for c in company.campaigns}
        raise AssertionError(f"campaigns not completed: {states}\n{logs_tail(cluster)}") from None


def logs_tail(cluster: LiveService, chars: int = 2500) -> str:
    names = sorted({path.stem for path in cluster.log_dir.glob("*.log")})
    return "\n".join(f"--- {name}\n{cluster.log(name)[-chars:]}" for name in names)


def replay_ledger(tenant_id: int) -> tuple[int, int]:
    from tests.test_credits import replay_ledger as replay

    return replay(tenant_id)


def assert_sent_once_and_paid_for(cluster: LiveService, company: Company, allow_unconfirmed: bool = True) -> dict:
    """No campaign recipient or single message reached the platform twice; what the platform
    accepted is exactly what was consumed; every campaign's credits add up; the ledger replays to
    the wallet; nothing is left reserved or in flight."""
    from peewee import fn

    from models.sending.campaign_counters import campaign_credits
    from models.sending.tables import Campaign, CampaignRecipient, Message
    from models.tenancy import credits
    from models.tenancy.tables import LedgerEntry

    mine = [item for item in sim_sent(cluster) if item["phone_number_id"] == company.account.phone_id]
    callbacks = collections.Counter(item["biz_opaque_callback_data"] for item in mine)
    twice = {callback: count for callback, count in callbacks.items() if count > 1}
    assert not twice, f"sent twice: {twice}"
    campaigns = [Campaign.get(Campaign.public_id == c) for c in company.campaigns]
    rows = {row.public_id: row for row in CampaignRecipient.select().where(
        CampaignRecipient.campaign.in_([c.id for c in campaigns]))}
    rows.update({row.public_id: row for row in Message.select().where(Message.tenant == company.persona.id)})
    reached = {public_id for public_id, row in rows.items() if row.status in ("sent", "delivered", "read")}
    accepted = set(callbacks)
    assert accepted <= set(rows), "the platform accepted a send the service does not know"
    late_failures = {public_id for public_id in accepted if rows[public_id].status == "failed"}
    # A 9999 recipient is accepted and later fails (refunded); nothing else accepted may fail.
    assert all(rows[public_id].to.endswith("9999") if public_id.startswith("msg_")
               else rows[public_id].wa_id.endswith("9999") for public_id in late_failures), late_failures
    assert reached == accepted - late_failures, (
        f"reached but not accepted: {sorted(reached - accepted)[:5]}; "
        f"accepted but not reached: {sorted(accepted - reached - late_failures)[:5]}")
    failed = [row for row in rows.values() if row.status == "failed" and row.public_id not in accepted]
    if not allow_unconfirmed:
        assert not [row for row in failed if row.error_code == "send_unconfirmed"]
    assert all(row.status in ("sent", "delivered", "read", "failed") for row in rows.values())
    # In one statement: the platform's statuses may still be moving recipients (and their
    # counters, in the same transactions) between two reads.
    disagreeing = set(counters_disagreeing())
    for campaign in campaigns:
        money = campaign_credits(campaign)
        assert money.reserved == money.consumed + money.released, campaign.public_id
        assert campaign.id not in disagreeing, (campaign.public_id, status_counters(campaign.id), counted(campaign.id))
    consumed = -(LedgerEntry.select(fn.SUM(LedgerEntry.amount)).where(
        (LedgerEntry.tenant == company.persona.id) & (LedgerEntry.type == "consume")).scalar() or 0)
    assert consumed == len(accepted)
    assert sum(campaign_credits(c).consumed for c in campaigns) == sum(1 for a in accepted if not a.startswith("msg_"))
    wallet = credits.wallet_of(company.persona.id)
    assert wallet.reserved == 0
    assert replay_ledger(company.persona.id) == (wallet.balance, wallet.reserved)
    return {"accepted": len(accepted), "failed": len(failed),
            "unconfirmed": sum(1 for row in failed if row.error_code == "send_unconfirmed")}


def assert_every_event_delivered(cluster: LiveService, company: Company, timeout: float = 90) -> None:
    """Every core event of the company reached its receiver, signed (retries included)."""
    from models.events.tables import Event, WebhookDelivery
    from tests.webhooks_fixtures import verify

    def missing() -> set[str]:
        expected = {e.public_id for e in Event.select(Event.public_id).where(
            (Event.tenant == company.persona.id) & Event.name.in_(CORE_EVENTS))}
        return expected - company.answers.acknowledged

    def open_deliveries() -> int:
        # A receiver acknowledges before the drain records it: wait for the record too.
        return WebhookDelivery.select().where((WebhookDelivery.tenant == company.persona.id)
                                              & (WebhookDelivery.status != "delivered")).count()

    try:
        wait_until(lambda: not missing() and not open_deliveries(), timeout=timeout, interval=1,
                   message="every event to be delivered and recorded")
    except AssertionError:
        raise AssertionError(f"{len(missing())} events not delivered, {open_deliveries()} deliveries open\n"
                             f"{logs_tail(cluster)}") from None
    now = time.time()
    assert all(verify(request, company.endpoint_secret, now=now) for request in company.receiver.requests)
