"""End to end: a 5000-recipient campaign through the live service (gunicorn, a huey consumer and
the platform simulator as processes) delivers its `message.sent` events to two endpoints of the
company: a receiver that stays up gets each exactly once, a receiver that flaps gets each at
least once, every request signed. Retries run on the real schedule (10 s after a failure).

PostgreSQL + Redis only, like the other live tests: the path is the same on SQLite, covered by
the unit tests, and one run of this costs about a minute.
"""

from __future__ import annotations

import threading
import time
import zlib

import pytest
import requests

from config import get_settings
from messaging.client import GraphClient
from models.events.tables import Event, WebhookDelivery
from tests.campaigns_fixtures import make_number
from tests.conftest import Persona
from tests.live import LiveService, env_for, wait_until
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)
from tests.webhooks_fixtures import Received, Reply, verify

pytestmark = [pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True),
              pytest.mark.timing]  # 10,000 signed deliveries, and how long the steady receiver waited

RECIPIENTS = 5000


class Flapping:
    """Fails the ways receivers do, early on: a run of 503s, a run of connections closed without
    an answer, and the first request of every 7th event answered 500 after it was processed (its
    retry is then a duplicate). Every retry, 10 s later, is accepted."""

    def __init__(self):
        self.lock = threading.Lock()
        self.count = 0
        self.seen: set[str] = set()
        self.acknowledged: set[str] = set()  # answered 2xx

    def __call__(self, request: Received) -> Reply:
        event_id = request.headers["X-Service-Event-Id"]
        with self.lock:
            self.count += 1
            count = self.count
            first_time = event_id not in self.seen
            self.seen.add(event_id)
        if 300 <= count < 450:
            return Reply(503)
        if 900 <= count < 950:
            return Reply(drop=True)  # restarting: the connection closes without an answer
        if count < 2500 and first_time and zlib.crc32(event_id.encode()) % 7 == 0:
            return Reply(500)
        with self.lock:
            self.acknowledged.add(event_id)
        return Reply(200)


def live_number(service: LiveService, tenant_id: int, mps: int):
    """A number onboarded on the live simulator (signup + token exchange), stored as onboarding does."""
    signup = requests.post(f"{service.sim_url}/_sim/signup", json={"mps": mps}, timeout=5).json()
    with GraphClient(service.sim_url, app_id=get_settings().app_id, app_secret=service.env["SVC_APP_SECRET"]) as graph:
        token = graph.exchange_code(signup["code"])
    return make_number(tenant_id, mps=mps, phone_id=signup["phone_number_id"], token=token)


@pytest.mark.timeout(240)
def test_a_5000_recipient_campaign_reaches_a_steady_and_a_flapping_receiver(storage, webhook_ca, webhook_settings,
                                                                          make_receiver, immediate_queue, tmp_path):
    steady = make_receiver()
    flaps = Flapping()
    flapping = make_receiver(respond=flaps)
    immediate_queue.immediate = False
    env = {**env_for(storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1], "SVC_WEBHOOK_ALLOW_PRIVATE": "true"}
    service = LiveService(env, tmp_path).start()
    try:
        company = Persona("Campaign Co", credits=RECIPIENTS)
        account = live_number(service, company.id, mps=1000)
        secrets = {}
        for name, receiver in (("steady", steady), ("flapping", flapping)):
            created = requests.post(f"{service.api_url}/api/v1/webhooks/endpoints", headers=company.headers,
                                    json={"url": receiver.url(), "events": ["message.sent"]}, timeout=10)
            assert created.status_code == 201, created.text
            secrets[name] = created.json()["data"]["signing_secret"]
        recipients = [{"wa_id": f"5215{index:07d}7"} for index in range(RECIPIENTS)]
        response = requests.post(f"{service.api_url}/api/v1/campaigns", headers=company.headers, timeout=60,
                                 json={"account_id": account.public_id, "template_name": "hello_world",
                                       "recipients": recipients})
        assert response.status_code == 201, response.text

        def check_processes() -> None:
            for name in ("api", "worker", "sim"):
                if service.processes[name].poll() is not None:
                    raise AssertionError(f"{name} exited:\n{service.log(name)[-3000:]}")

        def sent_ids() -> set[str]:
            return {row[0] for row in Event.select(Event.public_id)
                    .where((Event.tenant == company.id) & (Event.name == "message.sent")).tuples()}

        expected: set[str] = set()

        def steady_has_all() -> bool:
            # Cheap polls: the receivers share this process, and the outbox is read only until
            # the campaign has recorded all its message.sent events.
            nonlocal expected
            check_processes()
            if len(steady.requests) < RECIPIENTS:
                return False
            if len(expected) < RECIPIENTS:
                expected = sent_ids()
            return {request.headers["X-Service-Event-Id"] for request in list(steady.requests)} == expected

        def flapping_acknowledged_all() -> bool:
            check_processes()
            with flaps.lock:
                return flaps.acknowledged == expected

        started = time.monotonic()
        wait_until(steady_has_all, timeout=150, interval=1, message="the steady receiver to get every message.sent")
        steady_seconds = time.monotonic() - started
        wait_until(flapping_acknowledged_all, timeout=90, interval=1,
                   message="the flapping receiver to acknowledge every message.sent")
        wait_until(lambda: not WebhookDelivery.select().where(WebhookDelivery.status != "delivered").exists(),
                   timeout=15, interval=0.2, message="every delivery recorded as delivered")
    finally:
        service.stop()

    assert sent_ids() == expected and len(expected) == RECIPIENTS
    assert len(steady.requests) == RECIPIENTS, "a receiver that stays up gets each event exactly once"
    assert all(verify(request, secrets["steady"], now=time.time()) for request in steady.requests)
    assert all(verify(request, secrets["flapping"], now=time.time()) for request in flapping.requests)
    assert {request.headers["X-Service-Event-Id"] for request in flapping.requests} == expected
    assert len(flapping.requests) > RECIPIENTS  # the flaps were real: some events arrived twice
    assert WebhookDelivery.select().count() == 2 * RECIPIENTS
    # The flapping endpoint's retries (10 s and more) did not hold the steady one up.
    assert steady_seconds < 120
