"""Processes killed with SIGKILL under load: API workers (gunicorn respawns them) and consumers
(restarted by hand, as a supervisor would).

Real processes on a PostgreSQL and a Redis of this session's own (tests/faults_fixtures.py).
After each kill: every write a client retried with its Idempotency-Key happened exactly once and
whole, every campaign completes, nobody is sent twice, the credits add up and every event reaches
the company's receiver.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from models import credits
from models.campaigns import Campaign, CampaignRecipient
from models.cartera import Debt
from tests.faults_fixtures import *  # noqa: F403  (fixtures)
from tests.faults_fixtures import (
    Cluster,
    assert_every_event_delivered,
    assert_sent_once_and_paid_for,
    company,
    replay_ledger,
    start_campaign,
    wait_for_progress,
    wait_until_completed,
)
from tests.live import env_for, wait_until
from tests.test_faults_storage import recipients

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def cluster(private_storage, webhook_ca, tmp_path):
    env = {**env_for(private_storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1]}
    cluster = Cluster(env, tmp_path, nodes=2, consumers=2, web_workers=2).start()
    yield cluster
    cluster.stop()


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
    stop = threading.Event()
    kills: list[int] = []

    def killer():
        # A worker of each node in turn, every 1.2 s: long enough for gunicorn to boot the
        # replacement, so the nodes keep serving while their workers die under them.
        rng = random.Random(7)
        while not stop.wait(1.2) and len(kills) < 8:
            workers = cluster.gunicorn_workers(len(kills) % len(cluster.node_ports))
            if workers:
                victim = rng.choice(workers)
                os.kill(victim, signal.SIGKILL)
                kills.append(victim)

    def write(index: int) -> tuple[str, requests.Response]:
        time.sleep(0.4)  # 4 clients at ~2 writes/s each: the stream lasts as long as the kills
        node = cluster.node_urls[index % len(cluster.node_urls)]
        headers = {**acme.persona.headers, "Idempotency-Key": f"kill-{index}"}
        deadline = time.monotonic() + 90
        if index % 2:
            body = {"account_id": acme.account.public_id, "template_name": "hello_world",
                    "external_reference": f"kill-{index}",
                    "recipients": [{"wa_id": f"5215540{index:04d}{n:02d}"} for n in range(1, 6)]}
            return "campaign", until_answered("POST", f"{node}/api/v1/campaigns", headers, body, deadline)
        body = {"external_id": f"debt-{index}", "account_id": acme.account.public_id,
                "deudor": {"nombre": f"Deudor {index}", "documento": f"99{index:06d}"}, "moneda": "COP",
                "monto_original": "150000", "saldo_pendiente": "150000"}
        return "debt", until_answered("POST", f"{node}/api/v1/cartera/deudas", headers, body, deadline)

    killing = threading.Thread(target=killer, daemon=True)
    killing.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(write, range(80)))
    finally:
        stop.set()
        killing.join()
    try:
        assert len(kills) >= 3, "the workers were not killed often enough to test anything"
        assert sum(RETRIES.values()) >= 1, "no request was caught by a kill"
        # Every write settled: done (or replayed), or 409 `applied` when the kill came between its
        # commit and its stored answer; it happened once either way (checked below).
        applied = [response for _kind, response in answers if response.status_code == 409
                   and response.json()["error"]["details"] == {"reason": "applied"}]
        assert all(response.status_code in (200, 201) for _kind, response in answers
                   if response not in applied), [(kind, response.status_code, response.text[:200])
                                                 for kind, response in answers][:5]
        assert len(applied) <= len(kills), "a kill loses at most the answer of the request it interrupts"
        # Exactly one campaign per key, each whole: its five recipients and their reservation.
        campaigns = list(Campaign.select().where(Campaign.tenant == acme.persona.id))
        assert sorted(c.external_reference for c in campaigns) == sorted(f"kill-{i}" for i in range(1, 80, 2))
        answered = {response.json()["data"]["id"] for kind, response in answers
                    if kind == "campaign" and response not in applied}
        assert answered <= {c.public_id for c in campaigns} and len(answered) == 40 - sum(
            1 for kind, response in answers if kind == "campaign" and response in applied)
        for campaign in campaigns:
            assert CampaignRecipient.select().where(CampaignRecipient.campaign == campaign.id).count() == 5
            assert campaign.reserved_credits == 5
        assert Debt.select().where(Debt.tenant == acme.persona.id).count() == 40
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
        assert stats["accepted"] >= 1500
        assert_every_event_delivered(cluster, acme)
        wallet = credits.wallet_of(acme.persona.id)
        assert replay_ledger(acme.persona.id) == (wallet.balance, wallet.reserved)
        assert set(cluster.alive()) == {"sim", "api", "api2", "worker", "worker2"}
    finally:
        acme.receiver.close()
