"""Secrets never reach a log: a live stack (gunicorn with its access log on, two consumers, the
simulator) goes through onboarding, template sync, a campaign with the platform failing for a
moment, a webhook endpoint's creation and deliveries to a receiver that fails some of them, a
wrong key, then every process's log is searched for the API key's secret, the webhook signing
secret, the platform access token, the app secret and the secret key that encrypts them at rest.
"""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from models.events.tables import Event
from models.numbers.graph import account_token
from models.numbers.tables import MessagingAccount
from tests.conftest import Persona
from tests.faults_fixtures import CORE_EVENTS, Cluster
from tests.live import env_for, wait_until
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)
from tests.webhooks_fixtures import Receiver, Reply

pytestmark = [pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True), pytest.mark.timeout(240)]


class FailingAtFirst:
    """Answers 500 to each event's first delivery, 200 to its retry."""

    def __init__(self):
        self.seen: set[str] = set()

    def __call__(self, request):
        event_id = request.headers["X-Service-Event-Id"]
        if event_id in self.seen:
            return Reply(200)
        self.seen.add(event_id)
        return Reply(500, body=b"try again")


@pytest.fixture
def service(storage, tmp_path, immediate_queue, webhook_ca):
    immediate_queue.immediate = False
    env = {**env_for(storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1],
           # gunicorn's access log too: a secret in a URL would land there.
           "GUNICORN_CMD_ARGS": "--access-logfile -",
           # The most a log holds: huey's lines about every task run, and every other debug line.
           "SVC_LOG_LEVEL": "debug"}
    cluster = Cluster(env, tmp_path, nodes=1, consumers=2).start()
    yield cluster
    cluster.stop()


def test_no_secret_reaches_any_log(service, storage, webhook_ca):
    api = f"{service.api_url}/api/v1"
    alice = Persona("Alice Secrets", credits=10_000)
    receiver = Receiver(webhook_ca[0], respond=FailingAtFirst())
    try:
        created = requests.post(f"{api}/webhooks/endpoints", headers=alice.headers, timeout=30,
                                json={"url": receiver.url(), "events": CORE_EVENTS})
        assert created.status_code == 201, created.text
        signing_secret = created.json()["data"]["signing_secret"]

        # Onboarding the way a company's user does it (simulator mode), then the worker's sync.
        link = requests.post(f"{api}/accounts/coexistence-link", headers=alice.headers, timeout=30,
                             json={"redirect_url": "https://example.test/done"}).json()["data"]
        done = requests.post(f"{service.api_url}/onboarding/{link['attempt_id']}/simulate", allow_redirects=False,
                             timeout=30)
        account_id = parse_qs(urlsplit(done.headers["Location"]).query)["account_id"][0]
        synced = (MessagingAccount.public_id == account_id) & MessagingAccount.templates_synced_at.is_null(False)
        account = wait_until(lambda: MessagingAccount.get_or_none(synced), timeout=30, message="the template sync")
        access_token = account_token(account)

        # A campaign, with the platform answering 500 for a moment, and a customer writing in.
        assert requests.post(f"{service.sim_url}/_sim/fail", json={"mode": "500", "seconds": 1.5},
                             timeout=10).status_code == 200
        campaign = requests.post(f"{api}/campaigns", headers=alice.headers, timeout=30, json={
            "account_id": account_id, "template_name": "hello_world",
            "recipients": [{"wa_id": f"52155566{n:05d}"} for n in range(1, 41)] + [{"wa_id": "5215556699999"}]})
        assert campaign.status_code == 201, campaign.text
        requests.post(f"{service.sim_url}/_sim/inbound", timeout=10,
                      json={"from": "5215556600001", "to": account.phone_id, "text": "hola"})
        # A wrong key, a key used with another's secret, a revoked-looking one.
        for header in (alice.key_string + "x", alice.key_string.rsplit(".", 1)[0] + ".wrong", "svc_live_nope"):
            assert requests.get(f"{api}/credits/balance", headers={"Authorization": f"Bearer {header}"},
                                timeout=10).status_code == 401

        def settled():
            data = requests.get(f"{api}/campaigns/{campaign.json()['data']['id']}", headers=alice.headers,
                                timeout=10).json()["data"]
            events = Event.select().where(Event.tenant == alice.id).count()
            delivered = {request.headers["X-Service-Event-Id"] for request in receiver.requests
                         if request.headers["X-Service-Event-Id"] in receiver.respond.seen}
            return data["status"] == "completed" and len(receiver.requests) >= 2 * events > 0 and \
                len(delivered) == events

        wait_until(settled, timeout=90, interval=0.5, message="the campaign and its deliveries (retries included)")
        time.sleep(1)  # the last log lines flushed
    finally:
        receiver.close()

    secrets = {
        "API key secret": alice.key_string.rsplit(".", 1)[1],
        "webhook signing secret": signing_secret,
        "platform access token": access_token,
        "app secret": service.env["SVC_APP_SECRET"],
        "secret key (at rest)": service.env["SVC_SECRET_KEY"],
    }
    logs = {path.name: path.read_text(errors="replace") for path in service.log_dir.glob("*.log")}
    assert set(logs) >= {"api.log", "worker.log", "worker2.log", "sim.log"}
    assert "POST /api/v1/campaigns" in logs["api.log"], "the access log is on"
    assert "Executing jobs." in logs["worker.log"] + logs["worker2.log"]
    for name, text in logs.items():
        for what, secret in secrets.items():
            assert secret and secret not in text, f"the {what} is in {name}"
