"""Rotating the secret key under a live service: sends (the number's token, stored encrypted) and
signed webhook deliveries (the endpoint's signing secret, stored encrypted) keep working with the
old key, with the new key added in front, while `svcctl secrets rotate` runs, and after the old
key is removed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import requests
from cryptography.fernet import Fernet

from models.events.tables import WebhookEndpoint
from models.numbers.tables import MessagingAccount
from tests.campaigns_fixtures import make_number, sim_signup
from tests.conftest import Persona
from tests.live import ROOT, LiveService, env_for, wait_until
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)
from tests.webhooks_fixtures import verify

pytestmark = pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)


def restart_with_keys(service: LiveService, keys: list[str]) -> None:
    service.env["SVC_SECRET_KEY"] = ",".join(keys)
    for name in ("api", "worker"):
        service.kill(name, sig=15)
    service.start_api()
    service.start_worker()
    wait_until(lambda: LiveService._answers(f"{service.api_url}/healthz"), message="the API")


def rotate(service: LiveService) -> dict:
    result = subprocess.run([sys.executable, "-m", "svcctl.main", "secrets", "rotate", "--json", "--batch", "1"],
                            cwd=ROOT, env=service.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_sends_and_deliveries_keep_working_through_a_key_rotation(storage, webhook_ca, webhook_settings, receiver,
                                                                   immediate_queue, tmp_path):
    immediate_queue.immediate = False
    old_key, new_key = storage.secret_key, Fernet.generate_key().decode()
    # At debug: huey's own lines about each task, which carry the request id, are debug lines.
    service = LiveService({**env_for(storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1], "SVC_LOG_LEVEL": "debug"},
                          tmp_path).start()
    try:
        alice = Persona("Alice Rotates", credits=1000)
        phone_id, token = sim_signup(service.sim_url, service.env["SVC_APP_SECRET"], 1000)
        account = make_number(alice.id, mps=1000, connection_mode="internal", phone_id=phone_id, token=token)
        created = requests.post(f"{service.api_url}/api/v1/webhooks/endpoints", headers=alice.headers, timeout=10,
                                json={"url": receiver.url(), "events": ["message.sent"]})
        assert created.status_code == 201, created.text
        signing_secret = created.json()["data"]["signing_secret"]
        sent = 0

        def start_campaign(size: int = 3) -> None:
            nonlocal sent
            response = requests.post(f"{service.api_url}/api/v1/campaigns", headers=alice.headers, timeout=30,
                                     json={"account_id": account.public_id, "template_name": "hello_world",
                                           "recipients": [{"wa_id": f"521558{sent + n:06d}7"} for n in range(size)]})
            assert response.status_code == 201, response.text
            sent += size

        def all_went_through() -> None:
            # Each send needs the decrypted token; each delivery, the decrypted signing secret.
            requests_seen = receiver.wait_for(sent, timeout=45)
            assert all(verify(request, signing_secret) for request in requests_seen)

        def campaign_goes_through() -> None:
            start_campaign()
            all_went_through()

        def stored_under(key: str) -> bool:
            fernet = Fernet(key.encode())
            ciphertexts = [MessagingAccount.get_by_id(account.id).access_token,
                           WebhookEndpoint.get(WebhookEndpoint.tenant == alice.id).secret_ciphertext]
            try:
                return all(fernet.decrypt(ciphertext.encode()) for ciphertext in ciphertexts)
            except Exception:
                return False

        campaign_goes_through()
        assert stored_under(old_key)

        restart_with_keys(service, [new_key, old_key])  # the new key encrypts, both decrypt
        campaign_goes_through()
        assert stored_under(old_key) and not stored_under(new_key)  # nothing rewritten yet

        start_campaign(200)
        first = rotate(service)  # while that campaign sends and delivers
        all_went_through()
        assert first["rotated"] >= 2 and first["unreadable"] == 0
        assert stored_under(new_key) and not stored_under(old_key)
        again = rotate(service)  # resumable: what is under the first key is left alone
        assert again["rotated"] == 0 and again["unreadable"] == 0

        restart_with_keys(service, [new_key])  # the old key is gone
        campaign_goes_through()
        assert "InvalidToken" not in service.log("worker") + service.log("api")
        # The readable (text) logs carry the request ids too: the access log and the tasks.
        created_ids = re.findall(r'"POST /api/v1/campaigns HTTP/1.1" 201 .* rid=(req_[0-9a-f]+)', service.log("api"))
        assert len(created_ids) == 4  # one line per campaign created
        assert re.search(rf"\[request_id={created_ids[-1]} task=jobs\.sending\.dispatch\]", service.log("worker"))
    finally:
        service.stop()
