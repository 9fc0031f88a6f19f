"""End to end: a company's receiver that is down for 45 s gets the event's retries on the curve
(DECISIONS: 10 s and 1 min after the first attempt), through the live service's real queue
scheduler and drains, not the sweep that runs once a minute.

SQLite, where a drain waking just before its retry was due used to find nothing and schedule
nothing. It takes about 75 s: the retries are real.
"""

from __future__ import annotations

import threading
import time

import pytest
import requests

from models.events.tables import WebhookDelivery
from tests.conftest import Persona
from tests.live import LiveService, env_for, wait_until
from tests.test_webhooks_live import live_number
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)
from tests.webhooks_fixtures import Received, Reply

pytestmark = [pytest.mark.parametrize("storage", ["sqlite"], indirect=True),
              pytest.mark.timing(cores=False)]  # the retries, to the second

DOWN_SECONDS = 45.0


class DownFor:
    """Closes every connection without an answer until `seconds` after the first request, then
    answers 200; remembers when each request came."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.lock = threading.Lock()
        self.times: list[float] = []
        self.third = threading.Event()

    def __call__(self, request: Received) -> Reply:
        with self.lock:
            self.times.append(time.monotonic())
            down = self.times[-1] - self.times[0] < self.seconds
            if len(self.times) >= 3:
                self.third.set()
        return Reply(drop=True) if down else Reply(200)


@pytest.mark.timeout(180)
def test_a_receiver_down_for_45_seconds_gets_its_retries_on_the_curve(storage, webhook_ca, webhook_settings,
                                                                     make_receiver, immediate_queue, tmp_path):
    answers = DownFor(DOWN_SECONDS)
    receiver = make_receiver(respond=answers)
    immediate_queue.immediate = False
    env = {**env_for(storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1], "SVC_WEBHOOK_ALLOW_PRIVATE": "true"}
    service = LiveService(env, tmp_path).start()
    try:
        company = Persona("Retry Co", credits=1)
        account = live_number(service, company.id, mps=20)
        created = requests.post(f"{service.api_url}/api/v1/webhooks/endpoints", headers=company.headers,
                                json={"url": receiver.url(), "events": ["campaign.created"]}, timeout=10)
        assert created.status_code == 201, created.text
        response = requests.post(f"{service.api_url}/api/v1/campaigns", headers=company.headers, timeout=30,
                                 json={"account_id": account.public_id, "template_name": "hello_world",
                                       "recipients": [{"wa_id": "5215512345677"}]})
        assert response.status_code == 201, response.text

        assert answers.third.wait(timeout=120), f"attempts seen: {len(answers.times)}\n{service.log('worker')[-3000:]}"
        wait_until(lambda: WebhookDelivery.get().status == "delivered", timeout=15, interval=0.2,
                   message="the third attempt recorded as delivered")
    finally:
        service.stop()

    first, second, third = answers.times[:3]
    assert 9.0 <= second - first <= 11.0, answers.times
    assert 54.0 <= third - first <= 66.0, answers.times
    delivery = WebhookDelivery.get()
    assert (delivery.status, delivery.attempts) == ("delivered", 3)
