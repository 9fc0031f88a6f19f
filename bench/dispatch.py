"""bench/dispatch: campaign dispatch throughput, POST /campaigns latency and worker memory.

    python -m bench.dispatch [--workers 2] [--numbers 50] [--per-number 200] [--big 5000]
                             [--posts 30] [--webhooks] [--sqlite] [--postgres URL] [--redis URL]

Against real processes on loopback (gunicorn, `svcctl worker` consumers, `svcctl sim`) sharing
a fresh PostgreSQL database (made on the `--postgres` server, dropped at the end) and Redis
(`--redis`, the bench's keys under a prefix of their own), or SQLite with --sqlite:

1. `--numbers` coexistence numbers (20 messages/s each, capped by the simulator too) with one
   campaign of `--per-number` recipients each, spread over 5 companies, created while the
   workers are stopped so they all start together: the rate achieved together, as a share of
   the sum of the caps (target: 0.95 or more).
2. One number raised to 1000 messages/s (account and simulator) with a `--big` campaign: the
   rate achieved, against 1000 (target: 0.95 or more).
3. `POST /campaigns` with 5000 recipients, `--posts` times (workers stopped, so the API is
   measured alone): median and p99 latency.
4. The peak resident memory of each worker process.

Rates are the simulator's: accepted sends over the time between the first and the last one.
Each profile also prints the sends the simulator throttled (130429: target 0) and, from its
record of accepted sends, the most any number made in any one-second window against its cap
(target: 1.0 at most, as the platform counts throughput).
By default the simulator posts no status webhooks, so the figure is the dispatcher's; with
`--webhooks` every send also brings delivered and read updates through the API and the worker.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import requests

from bench.common import free_port, stop, wait_for

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432"
REDIS = "redis://127.0.0.1:6379/0"
APP_SECRET = "bench-app-secret"
TENANTS = 5


class Stack:
    """The service's processes against one storage."""

    def __init__(self, env: dict[str, str], log_dir: Path, webhooks: bool):
        self.env = env
        self.log_dir = log_dir
        self.api_port, self.sim_port = free_port(), free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.sim_url = f"http://127.0.0.1:{self.sim_port}"
        self.env.update({"SVC_PUBLIC_URL": self.api_url, "SVC_GRAPH_URL": self.sim_url, "SVC_APP_SECRET": APP_SECRET,
                         "SVC_WEB_CONCURRENCY": "2", "PYTHONUNBUFFERED": "1"})
        self.webhooks = webhooks
        self.workers: list[subprocess.Popen] = []
        self.others: list[subprocess.Popen] = []

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        return subprocess.Popen([sys.executable, "-m", "svcctl.main", *args], cwd=ROOT, env={**os.environ, **self.env},
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self) -> None:
        subprocess.run([sys.executable, "-m", "svcctl.main", "db", "upgrade"], cwd=ROOT,
                       env={**os.environ, **self.env}, check=True, capture_output=True)
        sim_args = ["sim", "--bind", f"127.0.0.1:{self.sim_port}"]
        if self.webhooks:
            sim_args += ["--webhook-url", f"{self.api_url}/platform/webhook"]
        self.others.append(self._spawn("sim", *sim_args))
        self.others.append(self._spawn("api", "serve", "--bind", f"127.0.0.1:{self.api_port}"))
        wait_for(f"{self.sim_url}/_sim/health")
        wait_for(f"{self.api_url}/api/v1/openapi.json")

    def start_workers(self, count: int) -> None:
        for index in range(count):
            args = ["worker", "--threads", "8"] + ([] if index == 0 else ["--no-periodic"])
            self.workers.append(self._spawn(f"worker{index}", *args))

    def stop_workers(self) -> list[float]:
        """Stop the consumers; returns each one's peak resident memory in MiB."""
        peaks = [peak_rss_mib(worker.pid) for worker in self.workers]
        for worker in self.workers:
            stop(worker)
        self.workers = []
        return peaks

    def stop(self) -> None:
        self.stop_workers()
        for process in self.others:
            stop(process)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its reaped children, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def storage_env(use_sqlite: bool, pg_admin: str = PG_ADMIN, redis_url: str = REDIS) -> tuple[dict[str, str], callable]:
    data_dir = tempfile.mkdtemp(prefix="bench-dispatch-")
    env = {"SVC_DATA_DIR": data_dir, "SVC_SECRET_KEY": "qVnZ0D4K7wSxg8Yb8w8i3bq0Zp9dfqg3zB5Qk0Yp2pM=",
           "SVC_WEBHOOK_ALLOW_PRIVATE": "true", "SVC_TENANT_RATE_LIMIT": "100000000"}
    if use_sqlite:
        return env, lambda: None
    import psycopg2
    import redis

    name = f"bench_{uuid.uuid4().hex[:10]}"
    pg_admin = pg_admin.rstrip("/")
    admin = psycopg2.connect(pg_admin + "/postgres")
    admin.autocommit = True
    admin.cursor().execute(f'CREATE DATABASE "{name}"')
    env.update({"SVC_DATABASE_URL": f"{pg_admin}/{name}", "SVC_REDIS_URL": redis_url, "SVC_QUEUE_NAME": name,
                "SVC_DB_POOL_SIZE": "40"})

    def cleanup():
        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(f"{name}*"):
            client.delete(key)
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()

    return env, cleanup


# Data, made in this process against the same storage.

TEMPLATE = {"name": "hello_world", "language": "en_US", "status": "approved", "category": "UTILITY",
            "body_text": "Hello World", "header_type": None, "variable_count": 0}


def prepare(env: dict[str, str]):
    from config import load_settings, use_settings
    from models.setup import init_db
    from models.store.db import connection

    settings = use_settings(load_settings(env))
    init_db(settings)
    return connection


def make_company(index: int, credits_amount: int) -> str:
    from models.tenancy import credits
    from models.tenancy.keys import create_key
    from models.tenancy.tenants import create_tenant

    tenant = create_tenant(f"Bench Co {index}")
    credits.grant(tenant.id, credits_amount)
    _key, key_string = create_key(tenant, ["all"], rate_limit=1_000_000)
    return tenant.id, key_string


def make_number(stack: Stack, tenant_id: int, mps: int, mode: str):
    from messaging.client import GraphClient
    from models.clock import utcnow
    from models.ids import new_id
    from models.numbers.tables import MessagingAccount, Template
    from models.store.secrets import encrypt

    signup = requests.post(f"{stack.sim_url}/_sim/signup", json={"mps": mps}, timeout=5).json()
    with GraphClient(stack.sim_url, app_id="sim-app", app_secret=APP_SECRET) as graph:
        token = graph.exchange_code(signup["code"])
    account = MessagingAccount.create(
        public_id=new_id("wacc_"), tenant=tenant_id, status="active", connection_mode=mode,
        business_account_id=signup["waba_id"], phone_id=signup["phone_number_id"], access_token=encrypt(token),
        subscribed_to_webhooks=True, daily_limit=None, mps=mps, connected_at=utcnow(),
        phone_number="+" + "".join(ch for ch in signup["display_phone_number"] if ch.isdigit()))
    Template.create(account=account.id, **TEMPLATE)
    return account


def recipients(prefix: str, count: int) -> list[dict]:
    # Ending in 7: none of the simulator's special behaviours (0000, 0429, 9999).
    return [{"wa_id": f"{prefix}{n:06d}7"} for n in range(count)]


def post_campaign(stack: Stack, key: str, account_id: str, items: list[dict]) -> tuple[float, str]:
    started = time.perf_counter()
    response = requests.post(f"{stack.api_url}/api/v1/campaigns", timeout=120,
                             headers={"Authorization": f"Bearer {key}"},
                             json={"account_id": account_id, "template_name": "hello_world", "recipients": items})
    elapsed = time.perf_counter() - started
    if response.status_code != 201:
        raise SystemExit(f"POST /campaigns answered {response.status_code}: {response.text[:300]}")
    return elapsed, response.json()["data"]["id"]


def wait_finished(campaign_ids: list[str], timeout: float) -> None:
    from models.sending.tables import Campaign

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = Campaign.select().where(Campaign.public_id.in_(campaign_ids)
                                       & Campaign.status.not_in(["completed", "failed", "cancelled"])).count()
        if not left:
            return
        time.sleep(0.2)
    raise SystemExit(f"campaigns not finished after {timeout}s")


def resent(campaign_ids: list[str]) -> int:
    """Recipients sent more than once: throttled by the platform, or held back by the engine
    when it fell behind its pacing slots (a stalled process), then sent again."""
    from models.sending.tables import Campaign, CampaignRecipient

    return (CampaignRecipient.select().join(Campaign)
            .where(Campaign.public_id.in_(campaign_ids) & (CampaignRecipient.attempts > 1)).count())


def sim_sent(stack: Stack) -> list[dict]:
    return requests.get(f"{stack.sim_url}/_sim/sent", timeout=30).json()["data"]


def sim_throttled(stack: Stack) -> int:
    """Sends the simulator answered 130429 past a number's cap, so far."""
    return requests.get(f"{stack.sim_url}/_sim/health", timeout=10).json()["throttled"]


def achieved_rate(sent: list[dict], phone_ids: set[str]) -> tuple[int, float, float]:
    mine = [dt.datetime.fromisoformat(item["at"]) for item in sent if item["phone_number_id"] in phone_ids]
    if len(mine) < 2:
        return len(mine), 0.0, 0.0
    seconds = (max(mine) - min(mine)).total_seconds()
    return len(mine), seconds, len(mine) / seconds


def fullest_second(sent: list[dict], caps: dict[str, int]) -> float:
    """The most sends any of these numbers made in any one-second window (by the simulator's
    acceptance times), as a share of that number's cap: above 1.0 the platform would throttle."""
    times: dict[str, list[float]] = {phone_id: [] for phone_id in caps}
    for item in sent:
        if item["phone_number_id"] in times:
            times[item["phone_number_id"]].append(dt.datetime.fromisoformat(item["at"]).timestamp())
    share = 0.0
    for phone_id, stamps in times.items():
        stamps.sort()
        start = 0
        for end, at in enumerate(stamps):
            while at - stamps[start] >= 1.0:
                start += 1
            share = max(share, (end - start + 1) / caps[phone_id])
    return share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="consumer processes")
    parser.add_argument("--numbers", type=int, default=50)
    parser.add_argument("--per-number", type=int, default=200)
    parser.add_argument("--big", type=int, default=5000)
    parser.add_argument("--posts", type=int, default=30)
    parser.add_argument("--webhooks", action="store_true", help="simulator posts status webhooks too")
    parser.add_argument("--sqlite", action="store_true", help="SQLite instead of PostgreSQL + Redis")
    parser.add_argument("--postgres", default=PG_ADMIN,
                        help=f"PostgreSQL server to make the bench's database on (default {PG_ADMIN})")
    parser.add_argument("--redis", default=REDIS, help=f"Redis database for the queue and counters (default {REDIS})")
    args = parser.parse_args()

    env, cleanup = storage_env(args.sqlite, args.postgres, args.redis)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-dispatch-logs-"))
    stack = Stack(env, log_dir, args.webhooks)
    peaks: list[float] = []
    try:
        stack.start()
        connection = prepare(stack.env)
        with connection():
            companies = [make_company(i, args.numbers * args.per_number + args.big + args.posts * 5000)
                         for i in range(TENANTS)]
            numbers = [(companies[i % TENANTS], make_number(stack, companies[i % TENANTS][0], 20, "coexistence"))
                       for i in range(args.numbers)]
            print(f"storage: {'SQLite' if args.sqlite else 'PostgreSQL + Redis'}; {args.workers} worker process(es); "
                  f"status webhooks {'on' if args.webhooks else 'off'}; logs in {log_dir}", flush=True)

            # 1. Many coexistence numbers at once.
            ids = [post_campaign(stack, company[1], account.public_id, recipients(f"52{i:03d}", args.per_number))[1]
                   for i, (company, account) in enumerate(numbers)]
            throttled = sim_throttled(stack)
            started = time.monotonic()
            stack.start_workers(args.workers)
            sim_cpu = cpu_seconds(stack.others[0].pid)
            wait_finished(ids, timeout=300)
            wall = time.monotonic() - started
            worker_cpu = sum(cpu_seconds(worker.pid) for worker in stack.workers)
            sim_cpu = cpu_seconds(stack.others[0].pid) - sim_cpu
            cap = 20 * args.numbers
            sent = sim_sent(stack)
            count, seconds, rate = achieved_rate(sent, {account.phone_id for _, account in numbers})
            fullest = fullest_second(sent, {account.phone_id: 20 for _, account in numbers})
            print(f"{args.numbers} coexistence numbers x {args.per_number}: {count} sent in {seconds:.2f} s = "
                  f"{rate:.0f} msg/s of a {cap} msg/s cap ({rate / cap:.2f}); {wall:.1f} s from worker start "
                  f"to the last campaign completed; {sim_throttled(stack) - throttled} throttled by the platform, "
                  f"{resent(ids)} resent; fullest one-second window of any number {fullest:.2f} of its cap",
                  flush=True)
            print(f"  CPU per message: workers {worker_cpu / max(1, count) * 1000:.2f} ms (start-up included), "
                  f"simulator {sim_cpu / max(1, count) * 1000:.2f} ms", flush=True)

            # 2. One number at 1000 messages/s.
            company = companies[0]
            fast = make_number(stack, company[0], 1000, "internal")
            throttled = sim_throttled(stack)
            worker_cpu = sum(cpu_seconds(worker.pid) for worker in stack.workers)
            _, big_id = post_campaign(stack, company[1], fast.public_id, recipients("53", args.big))
            wait_finished([big_id], timeout=300)
            worker_cpu = sum(cpu_seconds(worker.pid) for worker in stack.workers) - worker_cpu
            sent = sim_sent(stack)
            count, seconds, rate = achieved_rate(sent, {fast.phone_id})
            fullest = fullest_second(sent, {fast.phone_id: 1000})
            print(f"1 number at 1000 msg/s x {args.big}: {count} sent in {seconds:.2f} s = {rate:.0f} msg/s "
                  f"of 1000 ({rate / 1000:.2f}); {sim_throttled(stack) - throttled} throttled by the platform, "
                  f"{resent([big_id])} resent; fullest one-second window {fullest:.2f} of its cap", flush=True)
            print(f"  CPU per message: workers {worker_cpu / max(1, count) * 1000:.2f} ms (running already: "
                  "the steady cost)", flush=True)
            peaks = stack.stop_workers()
            print("worker peak memory: " + ", ".join(f"{peak:.0f} MiB" for peak in peaks), flush=True)

            # 3. POST /campaigns latency, workers stopped.
            items = recipients("54", 5000)
            post_campaign(stack, company[1], fast.public_id, items)  # warm-up
            latencies = sorted(post_campaign(stack, company[1], fast.public_id, items)[0] for _ in range(args.posts))
            p99 = latencies[min(len(latencies) - 1, int(round(0.99 * (len(latencies) - 1))))]
            print(f"POST /campaigns with 5000 recipients, {args.posts} times: median "
                  f"{statistics.median(latencies) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms", flush=True)
    finally:
        stack.stop()
        cleanup()


if __name__ == "__main__":
    main()
