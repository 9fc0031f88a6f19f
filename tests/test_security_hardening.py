"""The smaller holes, each run against the real thing: key guessing, a forged Host header, waiting
clients holding every thread, the demo's SSRF guard and file modes, a signup naming a business
account that is not the token's."""

from __future__ import annotations

import concurrent.futures
import json
import os
import stat
import subprocess
import sys
import time

import pytest
import requests

from api.auth import FAILED_AUTH_WINDOW
from models.clock import utcnow
from models.numbers.accounts import open_window
from models.numbers.tables import MessagingAccount
from tests.accounts_fixtures import *  # noqa: F403  (simulator, client)
from tests.accounts_fixtures import create_link, post_form, redirect_params
from tests.campaigns_fixtures import make_number
from tests.live import ROOT, LiveService, env_for, wait_until
from tests.live_fixtures import *  # noqa: F403  (live_service)
from tests.test_security_master_key import demo_installation  # noqa: F401  (svcctl up --sim)


def test_guessing_keys_gets_an_address_blocked(live_service, alice, storage):
    url = live_service.api_url + "/api/v1/credits/balance"
    # Failures are counted per clock minute (docs/api.md): guesses that straddle a minute's end
    # would be counted in two, so they start in a minute with time enough left for all of them.
    wait_until(lambda: time.time() % FAILED_AUTH_WINDOW < FAILED_AUTH_WINDOW - 20, timeout=25,
               message="a minute with 20 s left")
    statuses = []
    with requests.Session() as session:
        for n in range(storage.failed_auth_limit + 10):
            guess = f"svc_live_{alice.key.public_id}.guess{n}"
            statuses.append(session.get(url, headers={"Authorization": f"Bearer {guess}"}, timeout=10).status_code)
        assert statuses == [401] * storage.failed_auth_limit + [429] * 10
        # A right key from that address waits out the block too: guessing on cannot pay off.
        blocked = session.get(url, headers=alice.headers, timeout=10)
    assert blocked.status_code == 429
    assert blocked.json()["error"]["details"]["scope"] == "failed_authentications"
    assert 1 <= int(blocked.headers["Retry-After"]) <= 60
    assert blocked.headers["RateLimit-Remaining"] == "0"


def test_other_addresses_are_not_blocked_by_one_guessing(client, alice, storage):
    bad = {"Authorization": "Bearer svc_live_key_nope.nope"}
    for _ in range(storage.failed_auth_limit + 1):
        client.simulate_get("/api/v1/credits/balance", headers=bad, remote_addr="198.51.100.20")
    assert client.simulate_get("/api/v1/credits/balance", headers=alice.headers,
                               remote_addr="198.51.100.20").status_code == 429
    assert client.simulate_get("/api/v1/credits/balance", headers=alice.headers,
                               remote_addr="198.51.100.21").status_code == 200


def test_pagination_links_ignore_a_forged_host(live_service, alice):
    make_number(alice.id)
    make_number(alice.id)
    response = requests.get(live_service.api_url + "/api/v1/accounts?per_page=1", timeout=10,
                            headers={**alice.headers, "Host": "evil.example", "X-Forwarded-Host": "evil.example"})
    assert response.status_code == 200, response.text
    body = response.json()
    links = [body["meta"]["path"], *(link for link in body["links"].values() if link)]
    assert len(links) >= 3
    for link in links:
        assert link.startswith(live_service.api_url + "/api/v1/accounts"), link


@pytest.fixture
def few_threads(storage, tmp_path, immediate_queue):
    """One API process with four request threads, and no consumer: every message stays queued."""
    immediate_queue.immediate = False
    service = LiveService({**env_for(storage), "SVC_WEB_THREADS": "4"}, tmp_path, web_workers=1)
    service._spawn("api", ["serve", "--bind", f"127.0.0.1:{service.api_port}"])
    wait_until(lambda: service._answers(f"{service.api_url}/api/v1/openapi.json"), message="the API")
    yield service
    service.stop()


@pytest.mark.timing
def test_waiting_clients_cannot_hold_every_thread(few_threads, alice):
    account = make_number(alice.id)
    wa_ids = [f"1555123{n:04d}" for n in range(8)]
    for wa_id in wa_ids:
        open_window(account.id, wa_id, utcnow())

    def send(wa_id: str) -> requests.Response:
        return requests.post(few_threads.api_url + "/api/v1/messages", timeout=30,
                             headers={**alice.headers, "Prefer": "wait=4"},
                             json={"account_id": account.public_id, "to": wa_id, "type": "text",
                                   "text": {"body": "hello"}})

    with concurrent.futures.ThreadPoolExecutor(len(wa_ids)) as pool:
        started = time.monotonic()
        sends = [pool.submit(send, wa_id) for wa_id in wa_ids]
        # While they are all asking to wait, the API still answers others at once.
        time.sleep(0.5)
        health = requests.get(few_threads.api_url + "/api/v1/health", headers=alice.headers, timeout=5)
        answered_in = time.monotonic() - started - 0.5
        replies = [future.result() for future in sends]
    assert health.status_code == 200 and answered_in < 1.0
    assert all(reply.status_code == 202 for reply in replies)
    waited = [reply for reply in replies if "Preference-Applied" in reply.headers]
    assert len(waited) == 1  # four threads: one may wait


def test_the_demo_keeps_the_ssrf_guard_and_its_files_private(demo_installation):  # noqa: F811
    _process, api, _sim, data_dir, _log = demo_installation
    svcctl = [sys.executable, "-m", "svcctl.main"]
    env = {**os.environ, "SVC_DATA_DIR": str(data_dir)}
    for name in ("SVC_SECRET_KEY", "SVC_WEBHOOK_ALLOW_PRIVATE", "SVC_DATABASE_URL", "SVC_REDIS_URL"):
        env.pop(name, None)
    tenant = json.loads(subprocess.run([*svcctl, "tenants", "create", "Probe", "--json"], cwd=ROOT, env=env,
                                       check=True, capture_output=True).stdout)["id"]
    key = json.loads(subprocess.run([*svcctl, "keys", "create", "--tenant", tenant, "--scope", "all", "--json"],
                                    cwd=ROOT, env=env, check=True, capture_output=True).stdout)["key"]
    refused = requests.post(api + "/api/v1/webhooks/endpoints", timeout=10,
                            headers={"Authorization": f"Bearer {key}"},
                            json={"url": "https://127.0.0.1:9/hook", "events": ["message.sent"]})
    assert refused.status_code == 422, refused.text

    files = [path for path in data_dir.iterdir() if path.is_file()]
    assert {"service.db", "service.db-writer", "queue.db", "secret.key"} <= {path.name for path in files}
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700


def test_a_signup_naming_another_business_account_is_refused(client, alice, simulator):
    attempt_id = create_link(client, alice)
    signup = simulator.signup()
    response = post_form(client, f"/onboarding/{attempt_id}/complete", {
        "code": signup["code"], "waba_id": "424242424242", "phone_number_id": signup["phone_number_id"]})
    assert redirect_params(response)["error"] == "signup_failed"
    assert MessagingAccount.select().where(MessagingAccount.tenant == alice.id).count() == 0
