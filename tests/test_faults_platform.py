"""Faults outside the service while a campaign runs: the messaging platform failing for 30 seconds
(answering 500, or hanging past the client's timeout and accepting anyway), and the company's
webhook receiver down for a while.

Real processes (gunicorn, two consumers, the simulator) on a PostgreSQL and a Redis of this
session's own. After each fault the campaign completes, nobody is sent twice (the simulator's
`/_sim/sent`), what the platform accepted is exactly what was consumed, and every event reaches
the receiver.
"""

from __future__ import annotations

import time

import pytest
import requests

from tests.faults_fixtures import *  # noqa: F403  (fixtures)
from tests.faults_fixtures import (
    api,
    assert_every_event_delivered,
    assert_sent_once_and_paid_for,
    cluster_fixture,
    company,
    start_campaign,
    wait_for_progress,
    wait_until_completed,
)
from tests.test_faults_storage import recipients

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
OUTAGE = 30.0
CUSTOMERS = ["5215561000101", "5215561000102", "5215561000103", "5215561000104", "5215561000105"]


module_cluster, cluster = cluster_fixture(nodes=1, consumers=2)


def platform_fails(cluster, mode: str, seconds: float) -> None:
    response = requests.post(f"{cluster.sim_url}/_sim/fail", json={"mode": mode, "seconds": seconds}, timeout=10)
    assert response.status_code == 200, response.text


def open_windows(cluster, account, wa_ids) -> None:
    """The customers write first (the simulator's inbound webhook), so single messages may go."""
    from models.numbers.tables import ContactWindow
    from tests.live import wait_until

    for wa_id in wa_ids:
        answer = requests.post(f"{cluster.sim_url}/_sim/inbound", timeout=10,
                               json={"from": wa_id, "to": account.phone_id, "text": "hola"})
        assert answer.status_code == 200, answer.text
    wait_until(lambda: ContactWindow.select().where(ContactWindow.account == account.id).count() == len(wa_ids),
               timeout=20, message="the inbound webhooks to open the windows")


def send_messages(cluster, acme) -> list[str]:
    ids = []
    for wa_id in CUSTOMERS:
        response = api(cluster, acme.persona, "POST", "/messages",
                       json={"account_id": acme.account.public_id, "to": wa_id, "type": "text",
                             "text": {"body": "Su pedido va en camino"}})
        assert response.status_code == 202, response.text
        ids.append(response.json()["data"]["id"])
    return ids


@pytest.mark.parametrize("mode", ["500", "timeout"])
def test_the_platform_failing_for_30_seconds_delays_sends_but_loses_and_repeats_none(cluster, webhook_ca, mode):
    acme = company(cluster, webhook_ca[0], f"Acme platform {mode}", mps=60)
    try:
        open_windows(cluster, acme.account, CUSTOMERS)
        campaign_id = start_campaign(cluster, acme, recipients(900))
        wait_for_progress(campaign_id, 150)
        platform_fails(cluster, mode, OUTAGE)
        failing_since = time.monotonic()
        message_ids = []
        if mode == "500":
            # Single messages sent while the platform answers 500 are retried (2, 4, 8, 16 s) and go
            # out once it is back; sent 10 s into the outage, their retries outlast it.
            time.sleep(10)
            message_ids = send_messages(cluster, acme)
        wait_until_completed(cluster, acme, timeout=150)
        assert time.monotonic() - failing_since > OUTAGE * 0.8, "the outage did not hold the campaign up"
        stats = assert_sent_once_and_paid_for(cluster, acme)
        # Only 0000 is refused. A 500 is a definite answer, so nothing else fails; a send that
        # timed out is never resent: it is sent if the platform's status webhooks say so, else
        # (the platform turned it down after the client gave up) failed as `send_unconfirmed`.
        assert stats["failed"] - stats["unconfirmed"] == 1, stats
        if mode == "500":
            assert stats["unconfirmed"] == 0, stats
        for message_id in message_ids:
            shown = api(cluster, acme.persona, "GET", f"/messages/{message_id}").json()["data"]
            assert shown["status"] == "sent" and shown["wam_id"], shown
        assert_every_event_delivered(cluster, acme)
    finally:
        acme.receiver.close()


@pytest.mark.timing  # the campaign completes within the receiver's 12 s down
def test_a_webhook_receiver_down_neither_blocks_sending_nor_loses_events(cluster, webhook_ca):
    acme = company(cluster, webhook_ca[0], "Acme receiver down", mps=80)
    try:
        acme.answers.go_down(12)
        down_until = acme.answers.down_until
        start_campaign(cluster, acme, recipients(480))
        wait_until_completed(cluster, acme, timeout=60)
        # The campaign finished while its company's receiver refused every delivery.
        assert time.monotonic() < down_until
        assert acme.answers.refused > 0
        assert_sent_once_and_paid_for(cluster, acme, allow_unconfirmed=False)
        assert_every_event_delivered(cluster, acme, timeout=90)
    finally:
        acme.receiver.close()
