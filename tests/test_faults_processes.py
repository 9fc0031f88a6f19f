"""Processes killed with SIGKILL under load: API workers (gunicorn respawns them) and consumers
(restarted by hand, as a supervisor would).

Real processes on a PostgreSQL and a Redis of this session's own (tests/faults_fixtures.py).
After each kill: every write a client retried with its Idempotency-Key happened exactly once and
whole, every campaign completes, nobody is sent twice, the credits add up and every event reaches
the company's receiver.
"""

from __future__ import annotations

import collections
import itertools
import math
import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from models.receivables.tables import Debt
from models.sending.campaign_counters import campaign_credits
from models.sending.engine import Settings as EngineSettings
from models.sending.tables import Campaign, CampaignRecipient
from models.tenancy import credits
from tests.faults_fixtures import *  # noqa: F403  (fixtures)
from tests.faults_fixtures import (
    assert_every_event_delivered,
    assert_sent_once_and_paid_for,
    cluster_fixture,
    company,
    replay_ledger,
    start_campaign,
    wait_for_progress,
    wait_until_completed,
)
from tests.live import wait_until
from tests.test_faults_storage import recipients

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


# The per-minute limits of a company's writes would answer 429 long before the kills are done.
module_cluster, cluster = cluster_fixture(nodes=2, consumers=2, web_workers=2, env={
    "SVC_TENANT_RATE_LIMIT": "1000000", "SVC_WRITE_RATE_LIMIT": "1000000"})
KILLS = 6
CLIENTS = 8


RETRIES = collections.Counter()


def until_answered(method: str, url: str, headers: dict, body: dict, deadline: float) -> requests.Response:
    """What a careful client does: on a dropped connection, a 5xx or a 409 `in_progress`, the same
    request again with the same Idempotency-Key, until it gets an answer that settles it."""
    delay = 0.1
    tries = 0
    while True:
        tries += 1
        if tries > 1:
            RETRIES[url.rsplit("/api/v1", 1)[1]] += 1
        try:
            response = requests.request(method, url, headers=headers, json=body, timeout=15)
            in_progress = response.status_code == 409 and \
                response.json()["error"]["details"].get("reason") == "in_progress"
            if response.status_code < 500 and not in_progress:
                return response  # done, replayed, or 409 `applied` (done, its answer lost)
        except requests.RequestException:  # dropped, refused or timed out: it may or may not have run
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{method} {url} never settled")
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def test_api_workers_killed_mid_request_write_everything_once(cluster, webhook_ca):
    acme = company(cluster, webhook_ca[0], "Acme API kill", mps=200)
    killed = threading.Event()
    kills: list[int] = []
    indexes = itertools.count()

    def killer():
        # A worker of each node in turn, every 1.2 s: long enough for gunicorn to boot the
        # replacement, so the nodes keep serving while their workers die under them.
        rng = random.Random(7)
        while len(kills) < KILLS:
            time.sleep(1.2)
            workers = cluster.gunicorn_workers(len(kills) % len(cluster.node_ports))
            if workers:
                victim = rng.choice(workers)
                os.kill(victim, signal.SIGKILL)
                kills.append(victim)
        killed.set()

    def client() -> list[tuple[str, int, requests.Response]]:
        # More clients than workers: every worker is busy with a write whenever it is killed.
        answers = []
        while not killed.is_set():
            index = next(indexes)
            node = cluster.node_urls[index % len(cluster.node_urls)]
            headers = {**acme.persona.headers, "Idempotency-Key": f"kill-{index}"}
            deadline = time.monotonic() + 90
            if index % 10 == 1 and index < 400:  # within the 60 campaigns a minute a company may create
                body = {"account_id": acme.account.public_id, "template_name": "hello_world",
                        "external_reference": f"kill-{index}",
                        "recipients": [{"wa_id": f"5215540{index:04d}{n:02d}"} for n in range(1, 6)]}
                answers.append(("campaign", index, until_answered("POST", f"{node}/api/v1/campaigns", headers, body,
                                                                   deadline)))
            else:
                body = {"external_id": f"debt-{index}", "account_id": acme.account.public_id,
                        "deudor": {"nombre": f"Deudor {index}", "documento": f"99{index:06d}"}, "moneda": "COP",
                        "monto_original": "150000", "saldo_pendiente": "150000"}
                answers.append(("debt", index, until_answered("POST", f"{node}/api/v1/cartera/deudas", headers, body,
                                                               deadline)))
        return answers

    killing = threading.Thread(target=killer, daemon=True)
    killing.start()
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = [answer for batch in pool.map(lambda _n: client(), range(CLIENTS)) for answer in batch]
    killing.join()
    try:
        assert sum(RETRIES.values()) >= 1, "no request was caught by a kill"
        # Every write settled: done (or replayed), or 409 `applied` when the kill came between its
        # commit and its stored answer; it happened once either way (checked below).
        applied = [response for _kind, _index, response in answers if response.status_code == 409
                   and response.json()["error"]["details"] == {"reason": "applied"}]
        assert all(response.status_code in (200, 201) for _kind, _index, response in answers
                   if response not in applied), [(kind, response.status_code, response.text[:200])
                                                 for kind, _index, response in answers][:5]
        assert len(applied) <= len(kills), "a kill loses at most the answer of the request it interrupts"
        # Exactly one campaign per key, each whole: its five recipients and their reservation.
        campaigns = list(Campaign.select().where(Campaign.tenant == acme.persona.id))
        assert sorted(c.external_reference for c in campaigns) == sorted(
            f"kill-{index}" for kind, index, _response in answers if kind == "campaign")
        answered = {response.json()["data"]["id"] for kind, _index, response in answers
                    if kind == "campaign" and response not in applied}
        assert answered <= {c.public_id for c in campaigns}
        for campaign in campaigns:
            assert CampaignRecipient.select().where(CampaignRecipient.campaign == campaign.id).count() == 5
            assert campaign_credits(campaign).reserved == 5
        debts = sorted(d.external_id for d in Debt.select().where(Debt.tenant == acme.persona.id))
        assert debts == sorted(f"debt-{index}" for kind, index, _response in answers if kind == "debt")
        acme.campaigns = [c.public_id for c in campaigns]
        wait_until_completed(cluster, acme, timeout=90)
        assert_sent_once_and_paid_for(cluster, acme, allow_unconfirmed=False)
        assert_every_event_delivered(cluster, acme)
        # gunicorn replaced every worker it lost.
        wait_until(lambda: all(len(cluster.gunicorn_workers(node)) == 2 for node in range(2)), timeout=30,
                   message="gunicorn to respawn its workers")
    finally:
        acme.receiver.close()


def test_consumers_killed_mid_campaign_and_restarted_send_nobody_twice(cluster, webhook_ca):
    acme = company(cluster, webhook_ca[0], "Acme consumer kill", mps=80)
    try:
        campaign_id = start_campaign(cluster, acme, recipients(1600))
        # Each consumer in turn dies mid-dispatch and comes back: whichever ran the engine, it
        # died with sends on the wire at least once.
        for name, progress in (("worker", 300), ("worker2", 700)):
            wait_for_progress(campaign_id, progress)
            cluster.kill(name)
            time.sleep(1.0)
            cluster.start_worker(name, periodic=name == "worker")
        wait_until_completed(cluster, acme, timeout=150)
        stats = assert_sent_once_and_paid_for(cluster, acme)
        # A killed engine takes with it the sends it had claimed and not yet started, which it may
        # or may not have sent: at most one tick plus the pacing burst at the number's rate. They
        # fail as unconfirmed (refunded), never sent twice; everything else goes out.
        engine = EngineSettings()
        stranded_per_kill = math.ceil((engine.tick + engine.burst_seconds) * 80)
        assert stats["accepted"] >= 1600 - 2 * stranded_per_kill
        assert_every_event_delivered(cluster, acme)
        wallet = credits.wallet_of(acme.persona.id)
        assert replay_ledger(acme.persona.id) == (wallet.balance, wallet.reserved)
        assert set(cluster.alive()) == {"sim", "api", "api2", "worker", "worker2"}
    finally:
        acme.receiver.close()
