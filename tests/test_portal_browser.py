"""End to end in a real browser: a company's owner runs the API from the portal.

One live service (gunicorn, the worker and `svcctl sim` as processes) and the system Chromium:
invitation → password → sign-in without, then with, two-factor → a key created in the portal
calls the API → an endpoint registered in the portal → a campaign's `message.sent` events fail
at the receiver and show in the delivery log → one is replayed and arrives signed → the key is
revoked and the API refuses it. Along the way the pages are photographed for docs/portal.md.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyotp
import pytest
import requests

from config import get_settings
from messaging.client import GraphClient
from models.events.tables import WebhookDelivery
from models.tenancy import portal
from portal import web
from tests.browser_fixtures import *  # noqa: F403
from tests.browser_fixtures import SHOTS, shoot
from tests.campaigns_fixtures import make_number
from tests.live import LiveService, env_for, wait_until
from tests.portal_fixtures import PASSWORD
from tests.webhooks_fixtures import *  # noqa: F403
from tests.webhooks_fixtures import Received, Reply, verify

pytestmark = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)

# Enough for a few seconds of sends at the number's pace: the chart has bars to show.
RECIPIENTS = [f"52155990{index:04d}7" for index in range(120)]
MPS = 40


@pytest.fixture
def service(storage, webhook_ca, webhook_settings, immediate_queue, tmp_path):
    immediate_queue.immediate = False
    env = {**env_for(storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1], "SVC_WEBHOOK_ALLOW_PRIVATE": "true"}
    live = LiveService(env, tmp_path).start()
    yield live
    live.stop()


class Switchable:
    """Answers 500 until switched, then 200; remembers what it got after the switch."""

    def __init__(self):
        self.up = False

    def __call__(self, request: Received) -> Reply:
        return Reply(200, b"ok") if self.up else Reply(500, b"receiver down")


def secret_on(page) -> str:
    return page.locator("#secret-value").inner_text().strip()


def live_number(service: LiveService, tenant_id: int):
    """A number onboarded on the live simulator, stored as onboarding stores it."""
    signup = requests.post(f"{service.sim_url}/_sim/signup", json={"mps": MPS}, timeout=5).json()
    with GraphClient(service.sim_url, app_id=get_settings().app_id,
                     app_secret=service.env["SVC_APP_SECRET"]) as graph:
        token = graph.exchange_code(signup["code"])
    return make_number(tenant_id, mps=MPS, phone_id=signup["phone_number_id"], token=token)


@pytest.mark.timeout(180)
def test_an_owner_runs_the_api_from_the_portal(service, alice, browser, make_receiver):
    base, api = f"{service.api_url}/portal", f"{service.api_url}/api/v1"
    _invitation, token = portal.invite(alice.id, "owner@alice.example.com", "owner")
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    page.on("dialog", lambda dialog: dialog.accept())

    # The invitation: a password, and the owner is in.
    page.goto(f"{base}/invitations/{token}")
    shoot(page, "invitation")
    page.fill("input[name=password]", PASSWORD)
    page.fill("input[name=password_again]", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(base)
    assert "owner@alice.example.com" in page.content()

    # Sign out, sign in with the password alone.
    page.click("text=Sign out")
    page.wait_for_url(f"{base}/login**")
    page.fill("input[name=email]", "owner@alice.example.com")
    page.fill("input[name=password]", PASSWORD)
    shoot(page, "sign-in")
    page.click("main button[type=submit]")
    page.wait_for_url(base)
    cookie = next(c for c in page.context.cookies() if c["name"] == "svc_portal")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/portal"

    # Two-factor on, then a sign-in that needs the code.
    page.goto(f"{base}/security")
    page.click("text=Set up two-factor")
    totp = pyotp.TOTP(page.locator("#totp-secret").inner_text().strip())
    page.fill("input[name=code]", totp.now())
    page.click("text=Turn on")
    page.wait_for_url(f"{base}/security?ok=two_factor_on")
    shoot(page, "security")
    page.click("text=Sign out")
    page.fill("input[name=email]", "owner@alice.example.com")
    page.fill("input[name=password]", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{base}/login/two-factor**")
    page.fill("input[name=code]", totp.at(time.time() + 30))  # the step after the one already used
    page.click("main button[type=submit]")
    page.wait_for_url(base)

    # A key made in the portal calls the API.
    page.goto(f"{base}/keys")
    for scope in ("accounts:read", "campaigns:read", "campaigns:write", "credits:read", "webhooks:read"):
        page.check(f"input[value='{scope}']")
    page.fill("input[name=rate_limit]", "300")
    page.click("text=Create key")
    key_string = secret_on(page)
    shoot(page, "key-created")
    headers = {"Authorization": f"Bearer {key_string}"}
    assert requests.get(f"{api}/credits/balance", headers=headers, timeout=10).status_code == 200
    page.goto(f"{base}/keys")
    assert key_string.split(".", 1)[1] not in page.content()

    # An endpoint registered in the portal; the receiver is down at first.
    switch = Switchable()
    receiver = make_receiver(respond=switch)
    page.goto(f"{base}/webhooks")
    page.fill("form[action='/portal/webhooks'] input[name=url]", receiver.url())
    page.check("input[value='message.sent']")
    page.click("text=Add endpoint")
    signing_secret = secret_on(page)
    assert signing_secret.startswith("whsec_")

    # A campaign through the API with that key: its events reach the receiver and fail.
    account = live_number(service, alice.id)
    created = requests.post(f"{api}/campaigns", headers=headers, timeout=10,
                            json={"account_id": account.public_id, "template_name": "hello_world",
                                  "recipients": [{"wa_id": wa_id} for wa_id in RECIPIENTS]})
    assert created.status_code == 201, created.text
    campaign_id = created.json()["data"]["id"]
    # Opened while it runs, the campaign's page follows it to the end by itself.
    page.goto(f"{base}/campaigns/{campaign_id}")
    page.wait_for_selector("[data-field=status] >> text=completed", timeout=30_000)
    receiver.wait_for(len(RECIPIENTS), timeout=30)

    wait_until(lambda: WebhookDelivery.select().where(WebhookDelivery.status == "failed").count() == len(RECIPIENTS),
               timeout=20, interval=0.2, message="every delivery failed once")
    # Every failure is in the log: the first page full, the rest behind its Older links.
    page.goto(f"{base}/webhooks/deliveries?status=failed")
    listed = page.locator("tr.delivery").count()
    while page.locator("a[rel=next]").count():
        older = page.locator("a[rel=next]").get_attribute("href")
        assert "status=failed" in older
        page.goto(f"{service.api_url}{older}")
        listed += page.locator("tr.delivery").count()
    assert listed == len(RECIPIENTS)
    page.goto(f"{base}/webhooks/deliveries?status=failed")
    assert page.locator("tr.delivery").count() == web.PER_PAGE and "Older →" in page.content()
    shoot(page, "deliveries", full_page=False)
    event_id = page.locator("tr.delivery").first.get_attribute("data-event")
    with page.expect_navigation():  # the delivery's page, loaded before it is read
        page.click(f"tr.delivery[data-event='{event_id}'] a")
    assert "receiver down" in page.content()
    shoot(page, "delivery")

    # The receiver is back: the replay of one event arrives, signed with the endpoint's secret.
    switch.up = True
    page.click("text=Replay this event")
    page.wait_for_url(f"{base}/webhooks/deliveries**")

    def replayed() -> Received | None:
        return next((request for request in list(receiver.requests)[len(RECIPIENTS):]
                     if request.headers["X-Service-Event-Id"] == event_id), None)

    arrived = wait_until(replayed, timeout=20, interval=0.2, message="the replayed event")
    assert verify(arrived, signing_secret)
    page.goto(f"{base}/webhooks")
    assert signing_secret not in page.content()
    shoot(page, "webhooks")

    page.goto(f"{base}/campaigns/{campaign_id}")
    assert page.locator("svg.chart rect").count() >= 1
    shoot(page, "campaign", full_page=False)
    page.goto(base)
    shoot(page, "overview")
    phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
    phone.context.add_cookies(page.context.cookies())
    phone.goto(base)
    shoot(phone, "overview-phone")

    # Revoked in the portal: the API refuses the key.
    page.goto(f"{base}/keys")
    page.click(f"tr:has(code:text('{key_string.split('.')[0].removeprefix('svc_live_')}')) >> text=Revoke")
    page.wait_for_url(f"{base}/keys?ok=key_revoked")
    refused = requests.get(f"{api}/credits/balance", headers=headers, timeout=10)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"

    # Nothing shown once is in any process's log.
    logs = "".join(service.log(name) for name in ("api", "worker", "sim"))
    for secret in (key_string.split(".", 1)[1], signing_secret, PASSWORD, token, totp.secret):
        assert secret not in logs
    assert Path(SHOTS / "overview.png").stat().st_size > 10_000
