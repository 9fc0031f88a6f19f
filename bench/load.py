"""A mixed workload held at a fixed rate (open loop), then a check that nothing was lost.

    .venv/bin/python -m bench.load [--profile embedded|scaleout] [--rate 100] [--seconds 300]

Profiles (bench/stack.py): `embedded` is the default installation (one API node, one
consumer, SQLite and the SQLite queue); `scaleout` is two API nodes and two consumers on
PostgreSQL and Redis (`python -m bench.scaleout` runs the same). Both with the platform
simulator, and an HTTPS receiver (bench/webhooks.py's) for every company's webhook endpoint.

1. Seeds TENANTS companies through the API: each connects NUMBERS numbers (coexistence link and
   the simulator's signup; the tier is raised to unlimited through the simulator's quality
   webhook), registers a webhook endpoint for every core event, opens the 24-hour window of
   CONTACTS customers per number (`/_sim/inbound`), and syncs a first batch of debts.
2. Open loop: request i is due at start + i / rate, whatever became of the earlier ones (a
   pacer thread hands each to a pool of threads), so a slow service shows up as latency rather
   than as a lower offered rate. Latency is measured from the due time. Requests go round-robin
   to the nodes; the mix is WEIGHTS (reads, campaigns, single messages, debts, batches,
   payments). The simulator posts status webhooks for every send on its own.
3. Drain: waits until every campaign is completed, every message settled, every send's last
   status (read) recorded and every event delivered, then checks: no 5xx, no recipient sent
   twice (`/_sim/sent`), each wallet equal to its ledger replayed with nothing left reserved and
   consumption equal to the platform's accepted sends, every core event delivered to the receiver.
4. Prints the rate held, p50/p99 latency per endpoint, errors by status, memory (RSS) of the API
   and consumer processes at start and end, and writes a PNG (throughput, latency, memory over
   time; needs matplotlib: `pip install -e '.[bench]'`) and a JSON summary under bench/out/.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import itertools
import json
import math
import os
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import requests

from bench.common import ROOT
from bench.stack import DEFAULT_POSTGRES, DEFAULT_REDIS, PROFILES, Stack

OUT_DIR = ROOT / "bench" / "out"
TENANTS = 4
NUMBERS = 2
CONTACTS = 20
CAMPAIGN_SIZE = 25
DEBT_BATCH = 10
WARMUP_SECONDS = 10
DRAIN_TIMEOUT = 240
CORE_EVENTS = ["account.connected", "campaign.created", "campaign.completed", "message.sent", "message.delivered",
               "message.read", "message.failed", "message.inbound.created", "message.echo.created"]

# The mix, per 100 requests.
WEIGHTS = {
    "GET /health": 4,
    "GET /credits/balance": 12,
    "GET /credits/ledger": 4,
    "GET /accounts": 4,
    "GET /accounts/{id}/templates": 4,
    "GET /campaigns": 6,
    "GET /campaigns/{id}": 10,
    "GET /campaigns/{id}/recipients": 5,
    "GET /messages/{id}": 6,
    "GET /webhooks/endpoints": 2,
    "GET /cartera/deudas/{external_id}": 8,
    "POST /campaigns": 1,
    "POST /messages": 9,
    "POST /cartera/deudas": 10,
    "POST /cartera/deudas/lote": 4,
    "POST /cartera/pagos": 11,
}


@dataclass
class Tenant:
    index: int
    id: int
    key: str
    accounts: list[dict] = field(default_factory=list)
    contacts: dict[str, list[str]] = field(default_factory=dict)  # account id -> wa_ids with an open window
    campaigns: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    debts: list[str] = field(default_factory=list)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@dataclass
class World:
    stack: Stack
    tenants: list[Tenant]
    run: str = field(default_factory=lambda: f"{int(time.time()) % 100000:05d}")
    serial: itertools.count = field(default_factory=lambda: itertools.count(1))


# --- seeding -----------------------------------------------------------------------------------


def _check(response: requests.Response, *expected: int) -> dict:
    if response.status_code not in expected:
        raise SystemExit(f"{response.request.method} {response.request.url}: {response.status_code} {response.text}")
    return response.json() if response.content else {}


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def connect_number(stack: Stack, tenant: Tenant) -> dict:
    """A number connected the way a company's user does it (simulator mode), then unlimited."""
    api = stack.node_urls[0] + "/api/v1"
    link = _check(requests.post(f"{api}/accounts/coexistence-link", headers=tenant.headers, timeout=30,
                                json={"redirect_url": "https://example.test/done"}), 201)["data"]
    done = requests.post(f"{stack.node_urls[0]}/onboarding/{link['attempt_id']}/simulate", allow_redirects=False,
                         timeout=30)
    params = parse_qs(urlsplit(done.headers.get("Location", "")).query)
    if params.get("success") != ["true"]:
        raise SystemExit(f"onboarding failed: {done.status_code} {done.headers.get('Location')}")
    account_id = params["account_id"][0]
    account = _check(requests.get(f"{api}/accounts/{account_id}", headers=tenant.headers, timeout=30), 200)["data"]
    # The platform raises the number's tier; its quality webhook lifts the daily limit.
    _check(requests.post(f"{stack.sim_url}/_sim/numbers/{account['phone_id']}", timeout=10,
                         json={"messaging_limit_tier": "TIER_UNLIMITED"}), 200)

    def ready():
        shown = requests.get(f"{api}/accounts/{account_id}", headers=tenant.headers, timeout=30).json()["data"]
        templates = requests.get(f"{api}/accounts/{account_id}/templates", headers=tenant.headers,
                                 timeout=30).json()["data"]
        return shown if shown["daily_limit"] is None and templates else None

    return _wait(ready, 60, f"{account_id} to be unlimited with its templates")


def seed(stack: Stack, tenants: int = TENANTS, numbers_per_tenant: int = NUMBERS, contacts: int = CONTACTS,
         webhook_url: str | None = None, credits_each: int = 10_000_000) -> World:
    from models.store.db import connection
    from models.tenancy import credits
    from models.tenancy.keys import create_key
    from models.tenancy.tenants import create_tenant

    stack.install_settings()
    world = World(stack, [])
    with connection():
        for index in range(tenants):
            tenant = create_tenant(f"Load Co {index + 1}")
            credits.grant(tenant.id, credits_each, reason="load test")
            _key, key_string = create_key(tenant, ["all"], rate_limit=1_000_000)
            world.tenants.append(Tenant(index, tenant.id, key_string))
    api = stack.node_urls[0] + "/api/v1"
    for tenant in world.tenants:
        if webhook_url:
            _check(requests.post(f"{api}/webhooks/endpoints", headers=tenant.headers, timeout=30,
                                 json={"url": f"{webhook_url}/t{tenant.index}", "events": CORE_EVENTS}), 201)
        for _ in range(numbers_per_tenant):
            account = connect_number(stack, tenant)
            tenant.accounts.append(account)
            wa_ids = [f"57{tenant.index + 1}{len(tenant.accounts)}{n:08d}" for n in range(1, contacts + 1)]
            for wa_id in wa_ids:
                _check(requests.post(f"{stack.sim_url}/_sim/inbound", timeout=30,
                                     json={"from": wa_id, "to": account["phone_id"], "text": "hola"}), 200)
            tenant.contacts[account["id"]] = wa_ids
    for tenant in world.tenants:
        body = {"deudas": [debt_body(world, tenant) for _ in range(50)]}
        result = _check(requests.post(f"{api}/cartera/deudas/lote", headers={**tenant.headers,
                                      "Idempotency-Key": f"seed-{world.run}-{tenant.index}"}, json=body,
                                      timeout=60), 200)["data"]
        tenant.debts += [item["external_id"] for item in result["results"] if item["success"]]
        response = requests.post(f"{api}/campaigns", headers=tenant.headers, timeout=60,
                                 json=campaign_body(world, tenant, random.Random(tenant.index)))
        tenant.campaigns.append(_check(response, 201)["data"]["id"])
    return world


# --- the workload ------------------------------------------------------------------------------


def debt_body(world: World, tenant: Tenant) -> dict:
    n = next(world.serial)
    account = tenant.accounts[n % len(tenant.accounts)]
    return {"external_id": f"L{world.run}-{tenant.index}-{n}", "account_id": account["id"], "external_version": 1,
            "deudor": {"nombre": f"Deudor {n}", "documento": f"{world.run}{tenant.index}{n:08d}",
                       "telefono": f"5731{tenant.index}{n:07d}"},
            "moneda": "COP", "referencia": f"Factura {n}", "monto_original": "1000000.00",
            "saldo_pendiente": "1000000.00"}


def campaign_body(world: World, tenant: Tenant, rng: random.Random) -> dict:
    n = next(world.serial)
    account = tenant.accounts[n % len(tenant.accounts)]
    wa_ids = [f"58{tenant.index}{n:06d}{i:03d}" for i in range(CAMPAIGN_SIZE)]
    if n % 10 == 0:
        # Now and then the platform's other answers: rejected at send, failed later, throttled once.
        wa_ids[-3:] = [f"58{tenant.index}{n:06d}0000", f"58{tenant.index}{n:06d}9999",
                       f"58{tenant.index}{n:06d}0429"]
    if rng.random() < 0.5:
        return {"account_id": account["id"], "template_name": "hello_world", "language": "en_US",
                "external_reference": f"load-{n}", "recipients": [{"wa_id": wa_id} for wa_id in wa_ids]}
    return {"account_id": account["id"], "template_name": "payment_reminder", "language": "es",
            "external_reference": f"load-{n}",
            "recipients": [{"wa_id": wa_id, "external_contact_id": f"c-{wa_id}", "vars": ["Ana", f"${n}"]}
                           for wa_id in wa_ids]}


@dataclass
class Request:
    label: str
    method: str
    path: str
    json: dict | None = None
    params: dict | None = None
    idempotent: bool = False
    on_success: object = None  # callable(body) recording what was created


def build(label: str, world: World, tenant: Tenant, rng: random.Random) -> Request:
    """The request for one slot of the mix."""
    pick = rng.choice
    account = pick(tenant.accounts)
    if label == "GET /health":
        return Request(label, "GET", "/health")
    if label == "GET /credits/balance":
        return Request(label, "GET", "/credits/balance")
    if label == "GET /credits/ledger":
        return Request(label, "GET", "/credits/ledger", params={"per_page": 20})
    if label == "GET /accounts":
        return Request(label, "GET", "/accounts")
    if label == "GET /accounts/{id}/templates":
        return Request(label, "GET", f"/accounts/{account['id']}/templates")
    if label == "GET /campaigns":
        return Request(label, "GET", "/campaigns", params={"per_page": 20})
    if label == "GET /campaigns/{id}":
        return Request(label, "GET", f"/campaigns/{pick(tenant.campaigns[-50:])}")
    if label == "GET /campaigns/{id}/recipients":
        return Request(label, "GET", f"/campaigns/{pick(tenant.campaigns[-50:])}/recipients",
                       params={"per_page": 50})
    if label == "GET /messages/{id}":
        if not tenant.messages:
            return Request("GET /credits/balance", "GET", "/credits/balance")
        return Request(label, "GET", f"/messages/{pick(tenant.messages[-200:])}")
    if label == "GET /webhooks/endpoints":
        return Request(label, "GET", "/webhooks/endpoints")
    if label == "GET /cartera/deudas/{external_id}":
        return Request(label, "GET", f"/cartera/deudas/{pick(tenant.debts)}")
    if label == "POST /campaigns":
        return Request(label, "POST", "/campaigns", json=campaign_body(world, tenant, rng),
                       on_success=lambda body: tenant.campaigns.append(body["data"]["id"]))
    if label == "POST /messages":
        return Request(label, "POST", "/messages", idempotent=True,
                       json={"account_id": account["id"], "to": pick(tenant.contacts[account["id"]]),
                             "type": "text", "text": {"body": f"Hola, mensaje {next(world.serial)}"}},
                       on_success=lambda body: tenant.messages.append(body["data"]["id"]))
    if label == "POST /cartera/deudas":
        body = debt_body(world, tenant)
        return Request(label, "POST", "/cartera/deudas", json=body, idempotent=True,
                       on_success=lambda _body: tenant.debts.append(body["external_id"]))
    if label == "POST /cartera/deudas/lote":
        body = {"deudas": [debt_body(world, tenant) for _ in range(DEBT_BATCH)]}
        return Request(label, "POST", "/cartera/deudas/lote", json=body, idempotent=True,
                       on_success=lambda answer: tenant.debts.extend(
                           item["external_id"] for item in answer["data"]["results"] if item["success"]))
    if label == "POST /cartera/pagos":
        n = next(world.serial)
        return Request(label, "POST", "/cartera/pagos", idempotent=True,
                       json={"external_id": f"P{world.run}-{tenant.index}-{n}", "deuda_external_id": pick(tenant.debts),
                             "monto": "1500.00", "moneda": "COP", "metodo": "transfer",
                             "pagado_en": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
    raise ValueError(label)


@dataclass
class Sample:
    label: str
    node: int
    due: float  # seconds since the start of the run
    latency: float  # seconds from due to the end of the response
    status: int  # 0: no HTTP answer
    error: str | None = None


class OpenLoop:
    """Fires request i at start + i / rate from a pool of threads, whatever the earlier ones did."""

    def __init__(self, world: World, rate: float, threads: int = 128, seed: int = 1, name: str = "load"):
        self.world = world
        self.name = name
        self.rate = rate
        self.threads = threads
        self.samples: list[Sample] = []
        self.max_lag = 0.0
        self._local = threading.local()
        labels = list(WEIGHTS)
        self._mix = random.Random(seed)
        self._labels = labels
        self._weights = [WEIGHTS[label] for label in labels]

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.trust_env = False
        return session

    def _fire(self, index: int, label: str, due: float, start: float) -> None:
        world = self.world
        nodes = world.stack.node_urls
        node = index % len(nodes)
        tenant = world.tenants[(index // len(nodes)) % len(world.tenants)]
        request = build(label, world, tenant, random.Random(index))
        headers = dict(tenant.headers)
        if request.idempotent:
            headers["Idempotency-Key"] = f"{self.name}-{world.run}-{index}"
        status, error = 0, None
        try:
            response = self._session().request(request.method, f"{nodes[node]}/api/v1{request.path}",
                                               headers=headers, json=request.json, params=request.params, timeout=60)
            status = response.status_code
            if status < 300 and request.on_success is not None:
                request.on_success(response.json())
            elif status >= 300:
                error = response.text[:300]
        except requests.RequestException as failure:
            error = f"{type(failure).__name__}: {failure}"[:300]
        finished = time.monotonic()
        self.samples.append(Sample(request.label, node, due - start, finished - due, status, error))

    def run(self, seconds: float, start: float | None = None) -> float:
        start = start or time.monotonic()
        total = int(seconds * self.rate)
        with ThreadPoolExecutor(self.threads, thread_name_prefix="load") as pool:
            for index in range(total):
                due = start + index / self.rate
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    self.max_lag = max(self.max_lag, -delay)
                label = self._mix.choices(self._labels, self._weights)[0]
                pool.submit(self._fire, index, label, due, start)
        return start


class MemoryWatch(threading.Thread):
    def __init__(self, stack: Stack, every: float = 5.0):
        super().__init__(daemon=True)
        self.stack = stack
        self.every = every
        self.readings: list[tuple[float, dict[str, float]]] = []
        self.stopped = threading.Event()
        self.started_at = time.monotonic()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.readings.append((time.monotonic() - self.started_at, self.stack.memory()))
            self.stopped.wait(self.every)


# --- drain and checks --------------------------------------------------------------------------


# Where a send stands until the platform's last status for it (the simulator posts delivered, then
# read, for every send it accepts): each such status is still to come, with its event.
AWAITING_STATUSES = ("sent", "delivered")


def outstanding(world: World, receiver) -> dict[str, int]:
    """What is still in motion: open campaigns, unsettled messages, statuses the platform has still
    to post, undelivered events."""
    from models.events.tables import Event, WebhookDelivery
    from models.sending.tables import ACTIVE_STATUSES, Campaign, CampaignRecipient, Message
    from models.store.db import connection

    ids = [tenant.id for tenant in world.tenants]
    with connection():
        events = Event.select().where(Event.tenant.in_(ids) & Event.name.in_(CORE_EVENTS)).count()
        left = {
            "campaigns": Campaign.select().where(Campaign.tenant.in_(ids) & Campaign.status.in_(ACTIVE_STATUSES))
            .count(),
            "messages": Message.select().where(Message.tenant.in_(ids) & (Message.status == "queued")).count(),
            "statuses to come": Message.select().where(Message.tenant.in_(ids)
                                                       & Message.status.in_(AWAITING_STATUSES)).count()
            + CampaignRecipient.select().join(Campaign).where(Campaign.tenant.in_(ids)
                                                              & CampaignRecipient.status.in_(AWAITING_STATUSES))
            .count(),
            "deliveries": WebhookDelivery.select().where(WebhookDelivery.status.in_(("pending", "failed"))).count(),
        }
    left["events not received"] = max(0, events - receiver()["unique"])
    return left


def replay_ledger(tenant_id: int) -> tuple[int, int]:
    from models.tenancy import credits
    from models.tenancy.tables import LedgerEntry

    balance = reserved = 0
    for entry in LedgerEntry.select().where(LedgerEntry.tenant == tenant_id).order_by(LedgerEntry.id):
        if entry.type in credits.BALANCE_TYPES:
            balance += entry.amount
        if entry.type in ("reserve", "release"):
            reserved -= entry.amount
        elif entry.type == "consume":
            reserved += entry.amount
        if (entry.balance_after, entry.reserved_after) != (balance, reserved):
            return -1, -1
    return balance, reserved


def checks(world: World, receiver) -> dict[str, object]:
    """Everything that must hold once the system is idle; the values, with `ok` for each."""
    from peewee import fn

    from models.events.tables import Event, WebhookDelivery
    from models.numbers.tables import PlatformWebhookBatch
    from models.sending.tables import Campaign, CampaignRecipient, Message
    from models.store.db import connection
    from models.tenancy import credits
    from models.tenancy.tables import LedgerEntry

    sent = requests.get(f"{world.stack.sim_url}/_sim/sent", timeout=60).json()["data"]
    callbacks = collections.Counter(item["biz_opaque_callback_data"] for item in sent)
    tenant_of_phone = {account["phone_id"]: tenant.id for tenant in world.tenants for account in tenant.accounts}
    accepted = collections.Counter(tenant_of_phone.get(item["phone_number_id"]) for item in sent)
    results: dict[str, object] = {"platform accepted sends": len(sent),
                                  "recipients or messages sent twice": sum(1 for c in callbacks.values() if c > 1)}
    ids = [tenant.id for tenant in world.tenants]
    with connection():
        results["campaigns by status"] = dict(Campaign.select(Campaign.status, fn.COUNT(Campaign.id))
                                              .where(Campaign.tenant.in_(ids)).group_by(Campaign.status).tuples())
        results["recipients by status"] = dict(
            CampaignRecipient.select(CampaignRecipient.status, fn.COUNT(CampaignRecipient.id)).join(Campaign)
            .where(Campaign.tenant.in_(ids)).group_by(CampaignRecipient.status).tuples())
        results["messages by status"] = dict(Message.select(Message.status, fn.COUNT(Message.id))
                                             .where(Message.tenant.in_(ids)).group_by(Message.status).tuples())
        wallets = []
        for tenant in world.tenants:
            wallet = credits.wallet_of(tenant.id)
            consumed = -(LedgerEntry.select(fn.SUM(LedgerEntry.amount)).where(
                (LedgerEntry.tenant == tenant.id) & (LedgerEntry.type == "consume")).scalar() or 0)
            wallets.append({"replay == wallet": replay_ledger(tenant.id) == (wallet.balance, wallet.reserved),
                            "reserved": wallet.reserved, "consumed": consumed, "accepted": accepted[tenant.id]})
        results["wallets"] = wallets
        events = Event.select().where(Event.tenant.in_(ids) & Event.name.in_(CORE_EVENTS)).count()
        results["core events"] = events
        results["deliveries by status"] = dict(WebhookDelivery.select(WebhookDelivery.status,
                                                                      fn.COUNT(WebhookDelivery.id))
                                               .group_by(WebhookDelivery.status).tuples())
        results["platform webhook POSTs received"] = PlatformWebhookBatch.select().count()
    received = receiver()
    results["events received (distinct)"] = received["unique"]
    results["event POSTs received"] = received["received"]
    results["ok"] = {
        "no duplicate sends": results["recipients or messages sent twice"] == 0,
        "campaigns all completed": set(results["campaigns by status"]) == {"completed"},
        "no recipient left pending or queued": not ({"pending", "queued"} & set(results["recipients by status"])),
        "no message left queued": "queued" not in results["messages by status"],
        "wallets add up": all(w["replay == wallet"] and w["reserved"] == 0 and w["consumed"] == w["accepted"]
                              for w in wallets),
        "every core event delivered": received["unique"] == events
        and set(results["deliveries by status"]) == {"delivered"},
    }
    return results


# --- the report --------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summarize(samples: list[Sample], seconds: float, rate: float) -> dict:
    by_label: dict[str, list[Sample]] = collections.defaultdict(list)
    for sample in samples:
        by_label[sample.label].append(sample)
    answered = [s for s in samples if s.status]
    last_due = max((s.due for s in samples), default=0.0)
    return {
        "offered_rate": rate,
        "seconds": seconds,
        "requests": len(samples),
        # Responses per second from the start to the last response: below the offered rate when
        # the service fell behind (the open loop kept sending regardless).
        "held_rate": len(answered) / max(seconds, max((s.due + s.latency for s in answered), default=0.0)),
        "completed_within_1s_of_due": sum(1 for s in samples if s.latency <= 1.0) / max(1, len(samples)),
        "last_due": last_due,
        "errors_by_status": dict(collections.Counter(s.status for s in samples if not 200 <= s.status < 300)),
        "p50_ms": percentile([s.latency for s in answered], 0.50) * 1000,
        "p99_ms": percentile([s.latency for s in answered], 0.99) * 1000,
        "endpoints": {
            label: {"count": len(items), "p50_ms": percentile([s.latency for s in items], 0.50) * 1000,
                    "p99_ms": percentile([s.latency for s in items], 0.99) * 1000,
                    "max_ms": max(s.latency for s in items) * 1000,
                    "errors": sum(1 for s in items if not 200 <= s.status < 300)}
            for label, items in sorted(by_label.items())
        },
        "error_examples": [f"{s.label} -> {s.status}: {s.error}" for s in samples if s.error][:10],
    }


def plot(path: Path, samples: list[Sample], memory: list[tuple[float, dict[str, float]]], offset: float,
         title: str, rate: float) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is missing (pip install -e '.[bench]')"
    seconds = int(max((s.due for s in samples), default=0)) + 1
    done_per_second = [0] * (seconds + 60)
    for sample in samples:
        index = int(sample.due + sample.latency)
        if index < len(done_per_second):
            done_per_second[index] += 1
    window = 5
    buckets: dict[int, list[float]] = collections.defaultdict(list)
    for sample in samples:
        buckets[int(sample.due // window)].append(sample.latency * 1000)
    times = sorted(buckets)
    figure, (top, middle, bottom) = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    figure.suptitle(title)
    top.plot(range(seconds), done_per_second[:seconds], linewidth=0.8, label="responses/s")
    top.axhline(rate, color="grey", linestyle="--", linewidth=0.8, label=f"offered {rate:g}/s")
    top.set_ylabel("responses per second")
    top.legend(loc="lower right")
    middle.plot([t * window for t in times], [statistics.median(buckets[t]) for t in times], label="p50")
    middle.plot([t * window for t in times], [percentile(buckets[t], 0.99) for t in times], label="p99")
    middle.set_ylabel(f"latency, ms (per {window} s)")
    middle.set_yscale("log")
    middle.legend(loc="upper right")
    names = sorted({name for _, reading in memory for name in reading})
    for name in names:
        bottom.plot([t - offset for t, reading in memory if name in reading],
                    [reading[name] for _t, reading in memory if name in reading], label=name)
    bottom.set_ylabel("RSS, MB")
    bottom.set_xlabel("seconds since the load started")
    bottom.legend(loc="lower right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return str(path)


def report(profile_name: str, stack: Stack, summary: dict, memory_start: dict, memory_end: dict,
           results: dict, drain_seconds: float, plot_note: str) -> None:
    profile = stack.profile
    storage = "PostgreSQL + Redis" if profile.distributed else "SQLite + SQLite queue"
    print(f"\nprofile {profile_name}: {profile.nodes} API node(s) x {profile.web_workers} gunicorn workers, "
          f"{profile.consumers} consumer(s) x {profile.worker_threads} threads, {storage}")
    print(f"offered {summary['offered_rate']:g} req/s for {summary['seconds']:g} s (open loop): "
          f"{summary['requests']} requests, {summary['held_rate']:.1f} answers/s; "
          f"{summary['completed_within_1s_of_due'] * 100:.2f}% answered within 1 s of their due time; "
          f"pacer's worst lag {summary['max_lag_ms']:.0f} ms")
    print(f"all endpoints: p50 {summary['p50_ms']:.1f} ms, p99 {summary['p99_ms']:.1f} ms")
    print(f"{'endpoint':<36}{'count':>7}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}")
    for label, row in summary["endpoints"].items():
        print(f"{label:<36}{row['count']:>7}{row['p50_ms']:>9.1f}{row['p99_ms']:>9.1f}{row['max_ms']:>9.0f}"
              f"{row['errors']:>8}")
    print(f"errors by status: {summary['errors_by_status'] or 'none'}")
    for example in summary["error_examples"]:
        print(f"  {example}")
    print("memory (RSS, MB): " + ", ".join(
        f"{name} {memory_start.get(name, float('nan')):.0f} -> {memory_end.get(name, float('nan')):.0f}"
        for name in sorted(set(memory_start) | set(memory_end))))
    print(f"drained in {drain_seconds:.0f} s after the load stopped")
    print(f"machine load average (1 min) at start and end: {summary['loadavg_start']:.1f}, "
          f"{summary['loadavg_end']:.1f} on {os.cpu_count()} cores")
    cpu = summary["cpu_seconds"]
    requests_count = max(1, summary["requests"])
    print("CPU while the rate was held (s, and ms per request): " + ", ".join(
        f"{name} {seconds:.0f} ({seconds * 1000 / requests_count:.1f})" for name, seconds in sorted(cpu.items()))
        + f"; all {sum(cpu.values()):.0f} s = {sum(cpu.values()) / summary['seconds']:.2f} cores")
    for name, value in results.items():
        if name != "ok":
            print(f"  {name}: {value}")
    for name, passed in results["ok"].items():
        print(f"  [{'ok' if passed else 'FAILED'}] {name}")
    print(plot_note)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="embedded")
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second offered")
    parser.add_argument("--seconds", type=float, default=300.0, help="how long the rate is held")
    parser.add_argument("--threads", type=int, default=128, help="the generator's request threads")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="admin URL (scaleout)")
    parser.add_argument("--redis", default=DEFAULT_REDIS, help="Redis URL (scaleout)")
    parser.add_argument("--keep", action="store_true", help="keep the data and logs (prints where)")
    args = parser.parse_args(argv)

    from bench.webhooks import receiver_stats, start_receiver

    profile = PROFILES[args.profile]
    stack = Stack(profile, args.postgres, args.redis)
    receiver_process, receiver_port, ca_path = start_receiver(stack.workdir)
    stack.env["SVC_WEBHOOK_CA_BUNDLE"] = ca_path
    failed = True
    try:
        stack.start()
        print(f"{profile.name}: started ({', '.join(stack.node_urls)}; logs in {stack.log_dir})", file=sys.stderr)
        world = seed(stack, webhook_url=f"https://127.0.0.1:{receiver_port}/hooks")
        print(f"seeded {len(world.tenants)} companies x {NUMBERS} numbers; warming up {WARMUP_SECONDS} s",
              file=sys.stderr)
        OpenLoop(world, args.rate, args.threads, seed=2, name="warmup").run(WARMUP_SECONDS)
        watch = MemoryWatch(stack)
        watch.start()
        time.sleep(0.2)
        memory_start = watch.readings[0][1]
        print(f"holding {args.rate:g} req/s for {args.seconds:g} s", file=sys.stderr)
        loop = OpenLoop(world, args.rate, args.threads)
        loadavg_start = os.getloadavg()[0]
        cpu_start, own_start = stack.cpu(), time.process_time()
        started = time.monotonic()
        loop.run(args.seconds, start=started)
        load_ended = time.monotonic()
        cpu_end, own_end = stack.cpu(), time.process_time()
        loadavg_end = os.getloadavg()[0]
        memory_end = stack.memory()

        def receiver():
            return receiver_stats(receiver_port, ca_path)

        drain_started = time.monotonic()
        deadline = drain_started + DRAIN_TIMEOUT
        left = outstanding(world, receiver)
        while any(left.values()) and time.monotonic() < deadline:
            time.sleep(2)
            left = outstanding(world, receiver)
        drain_seconds = time.monotonic() - drain_started
        if any(left.values()):
            print(f"still outstanding after {DRAIN_TIMEOUT} s: {left}", file=sys.stderr)
        watch.stopped.set()
        results = checks(world, receiver)
        summary = summarize(loop.samples, args.seconds, args.rate)
        summary["max_lag_ms"] = loop.max_lag * 1000
        summary["load_seconds_actual"] = load_ended - started
        summary["loadavg_start"], summary["loadavg_end"] = loadavg_start, loadavg_end
        summary["cpu_seconds"] = {name: cpu_end.get(name, 0.0) - cpu_start.get(name, 0.0) for name in cpu_start}
        summary["cpu_seconds"]["load generator"] = own_end - own_start
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        png = OUT_DIR / f"load-{profile.name}-{stamp}.png"
        plot_note = plot(png, loop.samples, watch.readings, started - watch.started_at,
                         f"{profile.name}: {args.rate:g} req/s offered for {args.seconds:g} s", args.rate)
        (OUT_DIR / f"load-{profile.name}-{stamp}.json").write_text(json.dumps(
            {"profile": profile.name, "summary": summary, "memory_start": memory_start, "memory_end": memory_end,
             "memory_readings": watch.readings, "drain_seconds": drain_seconds, "checks": results},
            indent=2, default=str))
        report(profile.name, stack, summary, memory_start, memory_end, results, drain_seconds,
               f"plot: {plot_note}\nsummary: {OUT_DIR / f'load-{profile.name}-{stamp}.json'}")
        exited = stack.exited()
        if exited:
            print(f"processes that exited during the run: {exited}")
        failed = bool(exited) or not all(results["ok"].values()) or any(
            status >= 500 or status == 0 for status in summary["errors_by_status"])
    finally:
        receiver_process.terminate()
        receiver_process.wait(timeout=10)
        stack.stop(keep=args.keep)
        if args.keep:
            print(f"kept: {stack.workdir} (database {stack.database or stack.env['SVC_DATA_DIR']})")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
