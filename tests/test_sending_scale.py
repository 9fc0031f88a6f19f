"""The sending core at scale-out load, on real processes: PostgreSQL and Redis, two consumers
(`svcctl worker` and `svcctl worker --no-periodic`), one API node, and the simulator with its
duplicated and reordered status webhooks.

24 campaigns of 2000 recipients and a stream of single messages go out through one number at
1000 messages a second while the platform's status webhooks for them flow in. Every
transaction that touches the wallet, campaigns, recipients and messages keeps the lock order
of docs/reliability.md, so the database never has to break a deadlock: none is logged, every
campaign completes, nobody is sent twice and the credits add up to what the platform accepted.
"""

from __future__ import annotations

import re
import time

import pytest

from models.clock import utcnow
from models.numbers import accounts
from tests.conftest import Persona
from tests.faults_fixtures import *  # noqa: F403  (fixtures)
from tests.faults_fixtures import (
    Company,
    Switchable,
    api,
    assert_sent_once_and_paid_for,
    cluster_fixture,
    connect_number,
    logs_tail,
    wait_until_completed,
)
from tests.test_faults_storage import recipients

# Both cores, for a minute and more: alone, in the timing group.
pytestmark = [pytest.mark.timeout(600), pytest.mark.timing]

CAMPAIGNS, RECIPIENTS, MESSAGES = 24, 2000, 100
MPS = 1000
# What PostgreSQL says when it breaks a deadlock, and what a lost batch record would say.
TROUBLE = re.compile(r"deadlock|failed to record", re.IGNORECASE)

# One status webhook POST in ten is sent twice, and they arrive out of order.
module_cluster, cluster = cluster_fixture(nodes=1, consumers=2, sim_options=["--duplicate-rate", "0.1", "--shuffle"])


def test_campaigns_and_single_messages_on_one_number_complete_without_a_deadlock(cluster, private_storage):
    persona = Persona("Acme at scale", credits=CAMPAIGNS * RECIPIENTS + MESSAGES + 100, rate_limit=1_000_000)
    account = connect_number(cluster, persona, MPS)
    acme = Company(persona, account, "", receiver=None, answers=Switchable())
    started = time.monotonic()
    for index in range(CAMPAIGNS):
        # Distinct users per campaign; the simulator's planted answers (rejected, failed after
        # acceptance, throttled once) come with each.
        body = {"account_id": account.public_id, "template_name": "hello_world",
                "recipients": [{"wa_id": wa_id} for wa_id in recipients(RECIPIENTS - 3, prefix=f"52{index:03d}")]}
        response = api(cluster, persona, "POST", "/campaigns", json=body)
        assert response.status_code == 201, response.text
        acme.campaigns.append(response.json()["data"]["id"])
    # Single messages to users who wrote in, while the campaigns go out.
    users = [f"52190{n:07d}1" for n in range(MESSAGES)]
    for wa_id in users:
        accounts.open_window(account.id, wa_id, utcnow())
    for wa_id in users:
        response = api(cluster, persona, "POST", "/messages",
                       json={"account_id": account.public_id, "to": wa_id, "type": "text",
                             "text": {"body": f"hello {wa_id}"}})
        assert response.status_code == 202, response.text

    wait_until_completed(cluster, acme, timeout=420)
    elapsed = time.monotonic() - started
    trouble = [line for name in ("worker", "worker2", "api")
               for line in cluster.log(name).splitlines() if TROUBLE.search(line)]
    assert not trouble, f"{len(trouble)} lines, first: {trouble[:3]}\n{logs_tail(cluster)}"
    outcome = assert_sent_once_and_paid_for(cluster, acme)
    # Every recipient but the planted rejections reached the platform.
    assert outcome["accepted"] >= CAMPAIGNS * (RECIPIENTS - 1) + MESSAGES, outcome
    print(f"\n{CAMPAIGNS} x {RECIPIENTS} recipients and {MESSAGES} messages in {elapsed:.0f} s: {outcome}")
