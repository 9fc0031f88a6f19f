"""End to end in a real browser: a company's user connects a number on the onboarding page.

Runs against the live stack (gunicorn, the worker and `svcctl sim` as processes) with the system
Chromium driven by Playwright; `scripts/install-test-deps` installs the browser. Outside CI a
missing browser skips; in CI (`CI=true`) it fails.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import requests

from models.events.tables import Event
from models.numbers.tables import MessagingAccount
from tests.accounts_fixtures import REDIRECT_URL, sqlite_only
from tests.browser_fixtures import *  # noqa: F403
from tests.live import wait_until
from tests.live_fixtures import *  # noqa: F403


def connected_events(account_id: str) -> list[Event]:
    return [event for event in Event.select().where(Event.name == "account.connected")
            if event.payload["account"]["id"] == account_id]


@sqlite_only
def test_a_user_connects_a_number_on_the_onboarding_page(live_service, alice, browser):
    api = f"{live_service.api_url}/api/v1"
    created = requests.post(f"{api}/accounts/coexistence-link", headers=alice.headers, timeout=10,
                            json={"redirect_url": REDIRECT_URL, "label": "Front desk"})
    assert created.status_code == 201, created.text
    onboarding_url = created.json()["data"]["onboarding_url"]
    attempt_id = created.json()["data"]["attempt_id"]
    assert onboarding_url.startswith(live_service.api_url + "/onboarding/oba_")

    page = browser.new_page()
    # The company's redirect_url is answered here: the test never leaves the machine.
    page.route("https://example.test/**", lambda route: route.fulfill(
        status=200, content_type="text/html", body="<title>Company</title><h1>Back at the company</h1>"))
    page.goto(onboarding_url)
    assert "Alice Corp" in page.content()
    page.click("#connect")
    page.wait_for_url(REDIRECT_URL + "?**", timeout=20_000)
    assert page.title() == "Company"
    params = {name: values[0] for name, values in parse_qs(urlsplit(page.url).query).items()}
    assert params["success"] == "true" and params["attempt_id"] == attempt_id
    account_id = params["account_id"]

    shown = requests.get(f"{api}/accounts/{account_id}", headers=alice.headers, timeout=10)
    assert shown.status_code == 200
    account = shown.json()["data"]
    assert (account["status"], account["connection_mode"], account["label"]) == ("active", "coexistence",
                                                                                "Front desk")
    [event] = connected_events(account_id)
    assert event.tenant_id == alice.id
    assert event.payload["account"]["status"] == "active"

    # The worker finishes the connection: templates synced, the app subscribed.
    assert live_service.processes["worker"].poll() is None, live_service.log("worker")[-3000:]
    wait_until(lambda: MessagingAccount.get(MessagingAccount.public_id == account_id).templates_synced_at,
               timeout=20, message="the template sync", interval=0.2)
    templates = requests.get(f"{api}/accounts/{account_id}/templates", headers=alice.headers, timeout=10)
    assert {item["name"] for item in templates.json()["data"]} == {"hello_world", "order_update",
                                                                   "payment_reminder"}
    assert MessagingAccount.get(MessagingAccount.public_id == account_id).subscribed_to_webhooks

    # A customer writes: the simulator's signed webhook reaches the service and becomes an event.
    phone_id = MessagingAccount.get(MessagingAccount.public_id == account_id).phone_id
    sent = requests.post(f"{live_service.sim_url}/_sim/inbound", timeout=10,
                         json={"from": "56911112222", "to": phone_id, "text": "Hola"})
    assert sent.status_code == 200, sent.text
    inbound = wait_until(lambda: Event.select().where(Event.name == "message.inbound.created").first(),
                         timeout=20, message="message.inbound.created", interval=0.2)
    assert inbound.payload["account_id"] == account_id and inbound.payload["body"] == "Hola"

    # Back to the link later: the attempt is over, the user is sent to the outcome again.
    again = requests.get(onboarding_url, allow_redirects=False, timeout=10)
    assert again.status_code == 303 and again.headers["Location"] == page.url
    assert len(connected_events(account_id)) == 1
