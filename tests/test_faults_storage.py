"""Faults of the storage under a running campaign: Redis and PostgreSQL restarted mid-dispatch.

Real processes (gunicorn, two consumers, the simulator) on a PostgreSQL and a Redis of this
session's own (tests/faults_fixtures.py), so a restart disturbs nothing else. Redis runs without
persistence, as in CI: a restart loses the queue, the rate-limit counters, the pacing buckets
and the dispatch engines' heartbeats. After each fault the campaign completes, nobody is sent
twice, the credits add up and every event reaches the company's receiver.
"""

from __future__ import annotations

import threading

import pytest
import requests

from tests.faults_fixtures import *  # noqa: F403  (fixtures)
from tests.faults_fixtures import (
    assert_every_event_delivered,
    assert_sent_once_and_paid_for,
    cluster_fixture,
    company,
    reconnect,
    start_campaign,
    wait_for_progress,
    wait_until_completed,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def recipients(count: int, prefix: str = "52155") -> list[str]:
    """`count` ordinary numbers (no simulator suffix), then one of each of its special answers:
    rejected at send (0000), failed after acceptance (9999), throttled once (0429)."""
    plain = [f"{prefix}{n:08d}" for n in range(1, count * 2)
             if not f"{n:08d}".endswith(("0000", "9999", "0429"))][:count]
    return plain + [f"{prefix}77770000", f"{prefix}77779999", f"{prefix}77770429"]


def answers_while(cluster, persona, action) -> set[int]:
    """The statuses of a read polled every 0.1 s while `action` runs (0: no answer at all)."""
    statuses: set[int] = set()
    done = threading.Event()

    def poll():
        while not done.is_set():
            try:
                response = requests.get(f"{cluster.api_url}/api/v1/credits/balance", headers=persona.headers,
                                        timeout=10)
                statuses.add(response.status_code)
                if response.status_code == 503:
                    assert response.json()["error"]["code"] == "service_unavailable"
                    assert response.headers["Retry-After"]
            except requests.RequestException:
                statuses.add(0)
            done.wait(0.1)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        action()
    finally:
        done.set()
        poller.join()
    return statuses


module_cluster, cluster = cluster_fixture(nodes=1, consumers=2)


def restart_mid_campaign(cluster, acme, restart, reconnect_after: bool = False) -> None:
    """A 1200-recipient campaign with `restart` a quarter of the way in: while the server is down
    the API answers 503, never an error; then the campaign completes, nobody is sent twice, the
    credits add up, every event is delivered and every process is still up."""
    try:
        campaign_id = start_campaign(cluster, acme, recipients(1200))
        wait_for_progress(campaign_id, 300)
        during = answers_while(cluster, acme.persona, restart)
        assert 503 in during and during <= {200, 503}, during
        if reconnect_after:
            reconnect()  # the test's own connection, cut by the restart
        wait_until_completed(cluster, acme, timeout=150)
        assert_sent_once_and_paid_for(cluster, acme)
        assert_every_event_delivered(cluster, acme)
        assert set(cluster.alive()) == {"sim", "api", "worker", "worker2"}
        assert requests.get(f"{cluster.api_url}/api/v1/credits/balance", headers=acme.persona.headers,
                            timeout=10).status_code == 200
    finally:
        acme.receiver.close()


def test_a_redis_restart_mid_campaign_loses_nothing(cluster, private_servers, webhook_ca):
    acme = company(cluster, webhook_ca[0], "Acme Redis", mps=60)
    restart_mid_campaign(cluster, acme, lambda: private_servers.redis.restart(down_seconds=2))


def test_a_postgres_restart_mid_campaign_loses_nothing(cluster, private_servers, webhook_ca):
    acme = company(cluster, webhook_ca[0], "Acme Postgres", mps=60)
    restart_mid_campaign(cluster, acme, lambda: private_servers.postgres.restart(down_seconds=2), reconnect_after=True)
