"""Portal pages over the domain operations: another company's ids are 404, roles hold, secrets are
shown once, every action is audited, and each page does what its API twin does."""

from __future__ import annotations

import csv
import io
import logging

import pytest

from config import get_settings
from jobs.webhooks import kick
from models.events import webhooks
from models.events.outbox import emit
from models.events.tables import Event, WebhookDelivery, WebhookEndpoint
from models.numbers.tables import OnboardingAttempt
from models.receivables.tables import Debt, Payment
from models.sending.tables import Campaign
from models.store.db import atomic
from models.tenancy import credits, portal
from models.tenancy.keys import authenticate
from models.tenancy.tables import ApiKey, PortalUser
from tests.campaigns_fixtures import *  # noqa: F403  (fixtures)
from tests.campaigns_fixtures import campaign_body, make_number
from tests.portal_fixtures import *  # noqa: F403
from tests.portal_fixtures import make_user, shown_secret, signed_in
from tests.webhooks_fixtures import *  # noqa: F403
from tests.webhooks_fixtures import Reply, configure, verify


def debt_body(external_id: str, account_id: str, document: str = "CC-1") -> dict:
    return {"external_id": external_id, "account_id": account_id, "deudor": {"nombre": "Ana", "documento": document},
            "moneda": "COP", "monto_original": "1000", "saldo_pendiente": "1000",
            "cuotas": [{"external_id": f"{external_id}-1", "numero": 1, "monto": "1000", "vence": "2031-01-10",
                        "estado": "pending"}]}


def make_debt(client, persona, account, external_id: str, document: str = "CC-1") -> None:
    made = client.simulate_post("/api/v1/cartera/deudas", json=debt_body(external_id, account.public_id, document),
                                headers={**persona.headers, "Idempotency-Key": f"debt-{external_id}"})
    assert made.status_code == 201, made.text


@pytest.fixture
def outsider(client, charlie, sim, immediate_queue) -> dict[str, str]:
    """Charlie's resources of every kind the portal names in a URL."""
    account = make_number(charlie.id, sim)
    immediate_queue.immediate = False  # nothing consumes this queue: the campaign stays queued
    try:
        queued = client.simulate_post("/api/v1/campaigns", json=campaign_body(account, ["5215577000002"]),
                                      headers=charlie.headers)
    finally:
        immediate_queue.immediate = True
    assert queued.status_code == 201, queued.text
    endpoint, _secret = webhooks.create_endpoint(charlie.id, "https://127.0.0.1:9/hooks", ["campaign.created"])
    webhooks.fan_out()
    event = Event.get(Event.tenant == charlie.id)
    delivery = WebhookDelivery.get(WebhookDelivery.tenant == charlie.id)
    make_debt(client, charlie, account, "FAC-CHARLIE")
    user = make_user(charlie.id, "developer")
    return {"key": charlie.key.public_id, "account": account.public_id, "campaign": queued.json["data"]["id"],
            "endpoint": endpoint.public_id, "event": event.public_id, "delivery": str(delivery.id),
            "debt": "FAC-CHARLIE", "user": user.public_id}


def snapshot(charlie, ids: dict[str, str]) -> dict:
    return {
        "key": [(k.secret_hash, k.revoked_at) for k in ApiKey.select().where(ApiKey.tenant == charlie.id)],
        "campaign": Campaign.get(Campaign.public_id == ids["campaign"]).status,
        "endpoint": WebhookEndpoint.get(WebhookEndpoint.public_id == ids["endpoint"]).status,
        "deliveries": WebhookDelivery.select().where(WebhookDelivery.tenant == charlie.id).count(),
        "debt": [(d.status, d.saldo_pendiente) for d in Debt.select().where(Debt.tenant == charlie.id)],
        "user": PortalUser.get(PortalUser.public_id == ids["user"]).role,
    }


def test_every_url_naming_another_companys_resource_is_404(client, alice, charlie, owner, outsider):
    browser = signed_in(client, owner)
    ids = outsider
    before = snapshot(charlie, ids)
    reads = [f"/portal/numbers/{ids['account']}", f"/portal/campaigns/{ids['campaign']}",
             f"/portal/campaigns/{ids['campaign']}/progress", f"/portal/webhooks/deliveries/{ids['delivery']}",
             f"/portal/receivables/debt?id={ids['debt']}"]
    writes = [(f"/portal/keys/{ids['key']}/rotate", {}), (f"/portal/keys/{ids['key']}/revoke", {}),
              (f"/portal/webhooks/endpoints/{ids['endpoint']}/disable", {}),
              (f"/portal/webhooks/endpoints/{ids['endpoint']}/test", {}),
              (f"/portal/webhooks/events/{ids['event']}/replay", {}),
              (f"/portal/campaigns/{ids['campaign']}/cancel", {}),
              ("/portal/receivables/debt/payments", {"id": ids["debt"], "amount": "10", "method": "cash"}),
              (f"/portal/users/{ids['user']}/role", {"role": "viewer"}),
              (f"/portal/users/{ids['user']}/remove", {})]
    for path in reads:
        page = browser.get(path.split("?")[0], **dict([path.split("?")[1].split("=")]) if "?" in path else {})
        assert page.status_code == 404, path
        assert "belongs to another company" in page.text
    for path, fields in writes:
        browser.get("/portal")
        assert browser.post(path, fields).status_code == 404, path
    assert snapshot(charlie, ids) == before
    # And no list of Alice's shows Charlie's.
    for path in ("/portal/keys", "/portal/webhooks", "/portal/webhooks/deliveries", "/portal/numbers",
                 "/portal/campaigns", "/portal/receivables", "/portal/users", "/portal/audit"):
        text = browser.get(path).text
        assert not any(value in text for value in ids.values() if len(value) > 8), path


def test_a_viewer_reads_but_cannot_change_anything(client, alice, owner):
    viewer = signed_in(client, make_user(alice.id, "viewer"))
    keys = viewer.get("/portal/keys")
    assert keys.status_code == 200 and "Create a key" not in keys.text and "Revoke" not in keys.text
    refused = viewer.post("/portal/keys", {"scopes": "all"})
    assert refused.status_code == 403 and "Not allowed" in refused.text and "viewer" in refused.text
    assert viewer.post(f"/portal/keys/{alice.key.public_id}/revoke").status_code == 403
    endpoint = {"url": "https://example.com/h", "events": "message.sent"}
    assert viewer.post("/portal/webhooks", endpoint).status_code == 403
    assert viewer.post("/portal/users", {"email": "x@alice.example.com", "role": "owner"}).status_code == 403
    assert viewer.get("/portal/users").status_code == 403 and viewer.get("/portal/audit").status_code == 403
    assert ApiKey.select().where(ApiKey.tenant == alice.id).count() == 1
    assert authenticate(alice.key_string) is not None

    developer = signed_in(client, make_user(alice.id, "developer"))
    assert developer.post("/portal/keys", {"scopes": "credits:read"}).status_code == 201
    assert developer.post("/portal/users", {"email": "y@alice.example.com", "role": "owner"}).status_code == 403


def test_a_key_is_shown_once_then_only_its_id(client, alice, owner, caplog):
    caplog.set_level(logging.DEBUG)
    browser = signed_in(client, owner)
    created = browser.post("/portal/keys", [("scopes", "credits:read"), ("scopes", "campaigns:read"),
                                            ("allowed_ips", "203.0.113.0/24, 198.51.100.7"), ("rate_limit", "60")])
    assert created.status_code == 201
    assert created.headers["cache-control"] == "no-store"
    key_string = shown_secret(created.text)
    assert created.text.count(key_string) == 1
    key = authenticate(key_string)
    assert key.scopes == ["campaigns:read", "credits:read"] and key.rate_limit == 60
    assert key.allowed_ips == ["203.0.113.0/24", "198.51.100.7/32"]
    secret = key_string.split(".", 1)[1]

    rotated = browser.post(f"/portal/keys/{key.public_id}/rotate")
    new_string = shown_secret(rotated.text)
    assert authenticate(key_string) is None and authenticate(new_string).public_id == key.public_id
    endpoint = browser.post("/portal/webhooks", {"url": "https://127.0.0.1:9/hooks", "events": "message.sent"})
    signing_secret = shown_secret(endpoint.text)
    assert signing_secret.startswith("whsec_")

    shown_once = [secret, new_string.split(".", 1)[1], signing_secret]
    for path in ("/portal", "/portal/keys", "/portal/webhooks", "/portal/audit", "/portal/webhooks/deliveries"):
        page = browser.get(path)
        assert page.status_code == 200 and not any(value in page.text for value in shown_once), path
    assert key.public_id in browser.get("/portal/keys").text
    assert not any(value in record.getMessage() for record in caplog.records for value in shown_once)
    audit = [(entry.action, entry.target) for entry in portal.audit_log(alice.id)]
    assert ("key.created", key.public_id) in audit and ("key.rotated", key.public_id) in audit
    assert not any(value in str(entry.details) for entry in portal.audit_log(alice.id) for value in shown_once)


def test_revoking_a_key_stops_it(client, alice, owner):
    browser = signed_in(client, owner)
    revoked = browser.post(f"/portal/keys/{alice.key.public_id}/revoke")
    assert revoked.status_code == 303 and revoked.headers["location"] == "/portal/keys?ok=key_revoked"
    assert client.simulate_get("/api/v1/credits/balance", headers=alice.headers).status_code == 401
    assert "The key is revoked" in browser.get("/portal/keys", ok="key_revoked").text


def test_the_api_records_when_a_key_was_last_used(client, alice, owner):
    assert client.simulate_get("/api/v1/credits/balance", headers=alice.headers).status_code == 200
    assert ApiKey.get_by_id(alice.key.id).last_used_at is not None
    assert "never" not in signed_in(client, owner).get("/portal/keys").text.split(alice.key.public_id)[1][:400]


@pytest.fixture
def receivers(client, make_receiver, webhook_ca):
    """`make_receiver`, trusted by the settings the app runs with (the simulator's copy)."""
    configure(get_settings(), webhook_allow_private=True, webhook_ca_bundle=webhook_ca[1])
    return make_receiver


def test_a_failed_delivery_is_replayed_and_arrives_signed(client, alice, owner, receivers):
    answers = iter([Reply(500, b"down for maintenance")])
    receiver = receivers(respond=lambda request: next(answers, Reply(200, b"thanks")))
    browser = signed_in(client, owner)
    created = browser.post("/portal/webhooks", {"url": receiver.url(), "events": "account.connected"})
    secret = shown_secret(created.text)
    endpoint = WebhookEndpoint.get(WebhookEndpoint.tenant == alice.id)
    with atomic():
        event = emit(alice.id, "account.connected", {"account": {"id": "wacc_x"}})
    kick()
    receiver.wait_for(1)
    failed = browser.get("/portal/webhooks/deliveries", status="failed")
    assert event.public_id in failed.text
    delivery = WebhookDelivery.get(WebhookDelivery.event == event.id)
    detail = browser.get(f"/portal/webhooks/deliveries/{delivery.id}")
    assert "down for maintenance" in detail.text and ">500<" in detail.text

    replayed = browser.post(f"/portal/webhooks/events/{event.public_id}/replay")
    assert replayed.status_code == 303
    [_first, again] = receiver.wait_for(2)
    assert again.headers["X-Service-Event-Id"] == event.public_id and verify(again, secret)
    assert WebhookDelivery.get((WebhookDelivery.event == event.id) & (WebhookDelivery.sequence == 1)).status \
        == "delivered"
    assert ("webhook.event_replayed", event.public_id) in [(e.action, e.target) for e in portal.audit_log(alice.id)]

    tested = browser.post(f"/portal/webhooks/endpoints/{endpoint.public_id}/test")
    assert "accepted with 200" in tested.text
    ping = receiver.wait_for(3)[2]
    assert ping.headers["X-Service-Event"] == "webhook.ping" and verify(ping, secret)


def test_replaying_what_failed_since_a_time(client, alice, owner, receivers):
    receiver = receivers(respond=lambda request: Reply(503))
    browser = signed_in(client, owner)
    browser.post("/portal/webhooks", {"url": receiver.url(), "events": "account.connected"})
    with atomic():
        for number in range(3):
            emit(alice.id, "account.connected", {"account": {"id": f"wacc_{number}"}})
    kick()
    receiver.wait_for(3)
    receiver.respond = lambda request: Reply(200)
    browser.get("/portal/webhooks/deliveries")
    assert browser.post("/portal/webhooks/replay-failed", {"hours": "1"}).status_code == 303
    assert len({r.headers["X-Service-Event-Id"] for r in receiver.wait_for(6)[3:]}) == 3
    assert browser.post("/portal/webhooks/replay-failed", {"hours": "5"}).status_code == 422


def test_the_payment_endpoint_is_configured_in_the_portal(client, alice, owner, receivers):
    receiver = receivers()
    browser = signed_in(client, owner)
    set_once = browser.post("/portal/webhooks/payment-endpoint", {"url": receiver.url(path="/payments")})
    assert set_once.status_code == 200 and "whsec_" in set_once.text
    payment = webhooks.get_payment_endpoint(alice.id)
    assert payment.url == receiver.url(path="/payments")
    assert "Payments endpoint" in browser.get("/portal/webhooks").text
    tested = browser.post(f"/portal/webhooks/endpoints/{payment.public_id}/test")
    assert "accepted with 200" in tested.text
    [ping] = receiver.wait_for(1)
    assert ping.path == "/payments" and ping.headers["X-Service-Event"] == "webhook.ping"
    assert verify(ping, shown_secret(set_once.text))


def test_a_campaign_page_shows_counters_chart_and_recipients(client, alice, owner, sim):
    account = make_number(alice.id, sim)
    made = client.simulate_post("/api/v1/campaigns", headers=alice.headers,
                                json=campaign_body(account, ["5215577100001", "5215577100002", "5215577100003"]))
    assert made.status_code == 201, made.text
    campaign_id = made.json["data"]["id"]
    browser = signed_in(client, owner)
    page = browser.get(f"/portal/campaigns/{campaign_id}")
    assert page.status_code == 200 and "<svg" in page.text and page.text.count("<rect") >= 1
    assert page.text.count("5215577100") == 3
    assert browser.get(f"/portal/campaigns/{campaign_id}", status="failed").text.count("5215577100") == 0
    assert browser.get(f"/portal/campaigns/{campaign_id}", status="bogus").status_code == 422
    progress = browser.get(f"/portal/campaigns/{campaign_id}/progress").json
    assert progress["total_recipients"] == progress["done"] == progress["handed_over"] == 3
    assert campaign_id in browser.get("/portal/campaigns").text
    assert "<dt>sent</dt><dd>3</dd>" in browser.get("/portal").text  # today's sends on the overview
    # Sent: no longer queued, so not cancellable.
    assert browser.post(f"/portal/campaigns/{campaign_id}/cancel").status_code == 409


def test_a_queued_campaign_is_cancelled(client, alice, owner, sim, queue_only):
    account = make_number(alice.id, sim)
    made = client.simulate_post("/api/v1/campaigns", headers=alice.headers,
                                json=campaign_body(account, ["5215577100009"]))
    campaign_id = made.json["data"]["id"]
    browser = signed_in(client, owner)
    assert campaign_id in browser.get("/portal").text  # running on the overview
    cancelled = browser.post(f"/portal/campaigns/{campaign_id}/cancel")
    assert cancelled.status_code == 303
    assert Campaign.get(Campaign.public_id == campaign_id).status == "cancelled"
    assert credits.wallet_of(alice.id).reserved == 0


def test_connecting_a_number_starts_onboarding_and_returns_to_the_portal(client, alice, owner, sim):
    browser = signed_in(client, owner)
    started = browser.post("/portal/numbers/connect", {"label": "Front desk"})
    assert started.status_code == 303 and "/onboarding/oba_" in started.headers["location"]
    attempt = OnboardingAttempt.get(OnboardingAttempt.tenant == alice.id)
    assert attempt.label == "Front desk" and attempt.redirect_url.endswith("/portal/numbers")
    done = client.simulate_post(f"/onboarding/{attempt.public_id}/simulate")
    assert done.status_code == 303 and "/portal/numbers?" in done.headers["location"]
    query = done.headers["location"].split("?", 1)[1]
    back = browser.get("/portal/numbers", **dict(part.split("=") for part in query.split("&")))
    assert "Number connected" in back.text
    account_id = dict(part.split("=") for part in query.split("&"))["account_id"]
    assert "hello_world" in browser.get(f"/portal/numbers/{account_id}").text


def test_credits_ledger_pages_and_exports_csv(client, alice, owner):
    for amount in range(1, 61):
        credits.grant(alice.id, amount, reason="=HYPERLINK(\"x\")" if amount == 60 else f"grant {amount}")
    browser = signed_in(client, owner)
    first = browser.get("/portal/credits")
    assert "Page 1 of 2" in first.text and "grant 59" in first.text
    assert "grant 1<" not in first.text and "grant 1<" in browser.get("/portal/credits", page="2").text
    exported = browser.get("/portal/credits/ledger.csv")
    assert exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert len(rows) == 61 and sum(int(row["amount"]) for row in rows) == 1000 + sum(range(1, 61))
    assert rows[0]["description"] == "'=HYPERLINK(\"x\")"  # never a formula in a spreadsheet


def test_receivables_search_and_a_manual_payment_by_an_owner(client, alice, owner, sim):
    account = make_number(alice.id, sim)
    make_debt(client, alice, account, "FAC-1", document="CC-777")
    make_debt(client, alice, account, "FAC-2", document="CC-888")
    browser = signed_in(client, owner)
    found = browser.get("/portal/receivables", q="CC-777")
    assert "FAC-1" in found.text and "FAC-2" not in found.text
    assert "FAC-2" in browser.get("/portal/receivables", q="FAC-2").text
    debt_page = browser.get("/portal/receivables/debt", id="FAC-1")
    assert debt_page.status_code == 200 and "FAC-1-1" in debt_page.text and "Record a payment" in debt_page.text

    developer = signed_in(client, make_user(alice.id, "developer"))
    assert "Record a payment" not in developer.get("/portal/receivables/debt", id="FAC-1").text
    refused = developer.post("/portal/receivables/debt/payments", {"id": "FAC-1", "amount": "400", "method": "cash"})
    assert refused.status_code == 403 and not Payment.select().exists()

    browser.get("/portal/receivables/debt", id="FAC-1")
    paid = browser.post("/portal/receivables/debt/payments", {"id": "FAC-1", "amount": "400", "method": "cash"})
    assert paid.status_code == 303
    assert Debt.get(Debt.external_id == "FAC-1").saldo_pendiente == 600_00  # minor units
    assert Event.select().where((Event.tenant == alice.id) & (Event.name == "debt.payment_received")).exists()
    assert browser.post("/portal/receivables/debt/payments",
                        {"id": "FAC-1", "amount": "abc", "method": "cash"}).status_code == 422


def test_owners_manage_users_and_read_the_audit_log(client, alice, owner):
    browser = signed_in(client, owner)
    invited = browser.post("/portal/users", {"email": "dev@alice.example.com", "role": "developer"})
    assert invited.status_code == 201 and "/portal/invitations/pinv_" in invited.text
    assert browser.post("/portal/users", {"email": owner.email, "role": "viewer"}).status_code == 409
    colleague = make_user(alice.id, "developer")
    browser.get("/portal/users")
    assert browser.post(f"/portal/users/{colleague.public_id}/role", {"role": "viewer"}).status_code == 303
    assert PortalUser.get_by_id(colleague.id).role == "viewer"
    # The last owner stays an owner.
    assert browser.post(f"/portal/users/{owner.public_id}/role", {"role": "viewer"}).status_code == 409
    colleague_browser = signed_in(client, colleague)
    assert browser.post(f"/portal/users/{colleague.public_id}/remove").status_code == 303
    assert colleague_browser.get("/portal").status_code == 303  # their sessions ended with them
    log = browser.get("/portal/audit").text
    for action in ("user.invited", "user.role_changed", "user.removed", "session.signed_in"):
        assert action in log


def test_unknown_pages_and_bad_filters_are_pages_not_errors(client, owner):
    browser = signed_in(client, owner)
    missing = browser.get("/portal/nothing/here")
    assert missing.status_code == 404 and "text/html" in missing.headers["content-type"]
    assert browser.get("/portal/webhooks/deliveries", status="nope").status_code == 422
    assert browser.get("/portal/webhooks/deliveries/abc").status_code == 404
    assert browser.get("/portal/campaigns", page="x").status_code == 200
    assert browser.get("/portal/receivables/debt").status_code == 404
    huge = browser.client.simulate_post("/portal/keys", body=b"a=" + b"x" * 70000, cookies=browser.cookies,
                                        headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert huge.status_code == 413
    many = browser.client.simulate_post("/portal/keys", body="&".join(["scopes=all"] * 300), cookies=browser.cookies,
                                        headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert many.status_code == 400
    nul = browser.post("/portal/keys", {"scopes": "all\x00"})
    assert nul.status_code == 400
    assert client.simulate_get("/portal/static/portal.css").headers["content-type"] == "text/css"
