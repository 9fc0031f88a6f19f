"""Coexistence onboarding without a browser: the link, the page, completion against the simulator."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs.accounts import after_connect
from models.clock import utcnow
from models.events.tables import Event
from models.numbers import onboarding
from models.numbers.graph import account_token
from models.numbers.tables import MessagingAccount, OnboardingAttempt, Template
from tests.accounts_fixtures import *  # noqa: F403  (fixtures)
from tests.accounts_fixtures import (
    REDIRECT_URL,
    code_for_number,
    connect_number,
    create_link,
    post_form,
    redirect_params,
    sim_number,
    sqlite_only,
    unreachable_platform,
)

LINK = "/api/v1/accounts/coexistence-link"


def attempt(public_id: str) -> OnboardingAttempt:
    return OnboardingAttempt.get(OnboardingAttempt.public_id == public_id)


def connected_events(persona) -> list[Event]:
    return list(Event.select().where((Event.tenant == persona.id) & (Event.name == "account.connected"))
                .order_by(Event.id))


# The link

def test_it_creates_a_link_that_expires_in_an_hour(client, alice):
    before = utcnow()
    response = client.simulate_post(LINK, json={"redirect_url": REDIRECT_URL, "label": "Sales",
                                                "external_reference": "crm-7"}, headers=alice.headers)
    assert response.status_code == 201
    assert response.json["success"] is True
    data = response.json["data"]
    assert set(data) == {"onboarding_url", "attempt_id", "expires_at"}
    assert data["attempt_id"].startswith("oba_") and len(data["attempt_id"]) == 28
    assert data["onboarding_url"] == f"https://svc.example.test/onboarding/{data['attempt_id']}"
    expires = dt.datetime.fromisoformat(data["expires_at"]).replace(tzinfo=None)
    assert dt.timedelta(minutes=59) < expires - before <= dt.timedelta(hours=1, seconds=5)
    stored = attempt(data["attempt_id"])
    assert (stored.tenant_id, stored.label, stored.external_reference, stored.status) == (
        alice.id, "Sales", "crm-7", "pending")


@sqlite_only
@pytest.mark.parametrize("body, field", [
    ({"redirect_url": "http://example.test/done"}, "redirect_url"),
    ({"redirect_url": "ftp://example.test/done"}, "redirect_url"),
    ({"redirect_url": "https://"}, "redirect_url"),
    ({"redirect_url": "https://example.test/" + "a" * 1000}, "redirect_url"),
    ({}, "redirect_url"),
    ({"redirect_url": REDIRECT_URL, "label": "x" * 121}, "label"),
    ({"redirect_url": REDIRECT_URL, "external_reference": "x" * 121}, "external_reference"),
    ({"redirect_url": REDIRECT_URL, "label": 5}, "label"),
    ({"redirect_url": REDIRECT_URL, "colour": "red"}, "colour"),
])
def test_it_rejects_a_bad_link_request(client, alice, body, field):
    response = client.simulate_post(LINK, json=body, headers=alice.headers)
    assert response.status_code == 422
    assert response.json["success"] is False
    assert response.json["error"]["code"] == "validation_failed"
    assert field in response.json["error"]["details"]["errors"]


@sqlite_only
def test_a_body_that_is_not_json_is_a_422(client, alice):
    response = client.simulate_post(LINK, body=b"redirect_url=https://x", headers={
        **alice.headers, "Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code == 422
    assert response.json["error"]["code"] == "validation_failed"


@sqlite_only
def test_the_link_needs_the_connect_scope_and_a_key(client, alice):
    response = client.simulate_post(LINK, json={"redirect_url": REDIRECT_URL},
                                     headers=alice.with_key(["accounts:read"]))
    assert response.status_code == 403
    assert response.json["error"]["code"] == "missing_scope"
    assert client.simulate_post(LINK, json={"redirect_url": REDIRECT_URL}).status_code == 401


def test_an_idempotency_key_replays_the_same_link(client, alice):
    headers = {**alice.headers, "Idempotency-Key": "link-1"}
    first = client.simulate_post(LINK, json={"redirect_url": REDIRECT_URL}, headers=headers)
    again = client.simulate_post(LINK, json={"redirect_url": REDIRECT_URL}, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json == first.json
    assert again.headers["X-Service-Idempotent-Replay"] == "true"
    assert OnboardingAttempt.select().count() == 1
    other = client.simulate_post(LINK, json={"redirect_url": REDIRECT_URL + "/x"}, headers=headers)
    assert other.status_code == 409
    assert other.json["error"]["code"] == "idempotency_conflict"


def test_links_are_limited_to_20_a_minute(client, alice):
    statuses = [client.simulate_post(LINK, json={"redirect_url": REDIRECT_URL}, headers=alice.headers).status_code
                for _ in range(21)]
    assert statuses == [201] * 20 + [429]


# The page

@sqlite_only
def test_the_page_shows_the_connect_button_in_simulator_mode(client, alice):
    attempt_id = create_link(client, alice, label="Front desk")
    response = client.simulate_get(f"/onboarding/{attempt_id}")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/html")
    assert 'id="connect"' in response.text
    assert f'action="{attempt_id}/simulate"' in response.text
    assert "Alice Corp" in response.text and "Front desk" in response.text
    assert response.headers["Cache-Control"] == "no-store"


@sqlite_only
def test_the_page_escapes_what_the_company_wrote(client, alice):
    attempt_id = create_link(client, alice, label="<script>alert(1)</script>")
    response = client.simulate_get(f"/onboarding/{attempt_id}")
    assert "<script>alert(1)</script>" not in response.text
    assert "&lt;script&gt;" in response.text


@sqlite_only
def test_with_a_real_platform_the_page_runs_embedded_signup(client, alice, simulator):
    import dataclasses

    from config import get_settings, use_settings

    attempt_id = create_link(client, alice)
    use_settings(dataclasses.replace(get_settings(), graph_url="https://graph.facebook.com", app_id="1234",
                                     signup_config_id="cfg-99"))
    response = client.simulate_get(f"/onboarding/{attempt_id}")
    assert response.status_code == 200
    page = response.text
    assert "connect.facebook.net/en_US/sdk.js" in page
    assert "whatsapp_business_app_onboarding" in page and "sessionInfoVersion: '3'" in page
    assert '"appId":"1234"' in page and '"configId":"cfg-99"' in page
    assert f'action="{attempt_id}/complete"' in page and "/simulate" not in page
    # No shortcut to the simulator outside simulator mode.
    refused = client.simulate_post(f"/onboarding/{attempt_id}/simulate")
    assert refused.status_code == 404
    assert attempt(attempt_id).status == "pending"


@sqlite_only
def test_an_unknown_attempt_is_a_404(client, storage):
    response = client.simulate_get("/onboarding/oba_doesnotexist")
    assert response.status_code == 404
    assert response.json["error"]["code"] == "attempt_not_found"
    html = client.simulate_get("/onboarding/oba_doesnotexist", headers={"Accept": "text/html"})
    assert html.status_code == 404 and html.headers["Content-Type"].startswith("text/html")
    posted = client.simulate_post("/onboarding/oba_doesnotexist/complete", body="code=x",
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert posted.status_code == 404
    assert posted.json["error"]["code"] == "attempt_not_found"


# Completion

def test_completing_connects_an_active_number(client, alice, simulator):
    attempt_id = create_link(client, alice, label="Sales", external_reference="crm-7")
    params = redirect_params(client.simulate_post(f"/onboarding/{attempt_id}/simulate"))
    assert params["success"] == "true" and params["attempt_id"] == attempt_id
    account = MessagingAccount.get(MessagingAccount.public_id == params["account_id"])
    number = sim_number(simulator, account.phone_id)
    assert account.tenant_id == alice.id
    assert account.status == "active" and account.connection_mode == "coexistence"
    assert (account.label, account.external_reference) == ("Sales", "crm-7")
    assert account.phone_id == number["id"] and account.business_account_id == number["waba_id"]
    assert account.phone_number == "+" + "".join(ch for ch in number["display_phone_number"] if ch.isdigit())
    assert account.name == number["verified_name"]
    assert (account.quality_rating, account.daily_limit, account.mps) == ("GREEN", 250, 20)
    assert account.connected_at is not None and account.subscribed_to_webhooks
    # The token is stored encrypted, never as sent.
    assert account.access_token != number["token"] and account_token(account) == number["token"]
    assert account.contacts_synced_at is not None and account.history_synced_at is not None
    assert {"smb_app_state_sync", "history"} <= set(simulator.platform.state.numbers[number["id"]].synced)
    assert Template.select().where(Template.account == account.id).count() == 4
    assert attempt(attempt_id).status == "completed"


def test_account_connected_is_written_with_the_contract_payload(client, alice):
    account_id = connect_number(client, alice, label="Sales", external_reference="crm-7")
    [event] = connected_events(alice)
    account = MessagingAccount.get(MessagingAccount.public_id == account_id)
    assert event.public_id.startswith("evt_")
    assert event.payload == {"event": "account.connected", "account": {
        "id": account_id, "label": "Sales", "external_reference": "crm-7",
        "phone_number": account.phone_number, "connection_mode": "coexistence", "status": "active"}}
    # And the API shows the number active.
    shown = client.simulate_get(f"/api/v1/accounts/{account_id}", headers=alice.headers)
    assert shown.json["data"]["status"] == "active"


@sqlite_only
def test_a_redirect_url_keeps_its_own_query(client, alice):
    response = client.simulate_post(LINK, json={"redirect_url": "https://example.test/done?tab=wa&success=x#top"},
                                     headers=alice.headers)
    attempt_id = response.json["data"]["attempt_id"]
    location = client.simulate_post(f"/onboarding/{attempt_id}/simulate").headers["Location"]
    assert location.startswith("https://example.test/done?tab=wa&success=true&account_id=wacc_")
    assert location.endswith(f"&attempt_id={attempt_id}#top")


def test_an_attempt_completes_at_most_once(client, alice, simulator):
    attempt_id = create_link(client, alice)
    numbers_before = len(simulator.numbers())
    first = client.simulate_post(f"/onboarding/{attempt_id}/simulate")
    account_id = redirect_params(first)["account_id"]
    # Again through the shortcut, and with a valid code for another number: the first outcome stands.
    again = client.simulate_post(f"/onboarding/{attempt_id}/simulate")
    signup = simulator.signup()
    other = post_form(client, f"/onboarding/{attempt_id}/complete", {
        "code": signup["code"], "waba_id": signup["waba_id"], "phone_number_id": signup["phone_number_id"]})
    for response in (again, other):
        assert response.headers["Location"] == first.headers["Location"]
    # The shortcut did not sign up a number the second time either.
    assert len(simulator.numbers()) == numbers_before + 2
    assert MessagingAccount.select().count() == 1
    assert [MessagingAccount.get().public_id] == [account_id]
    assert len(connected_events(alice)) == 1
    # The page now sends the user straight back with the outcome.
    page = client.simulate_get(f"/onboarding/{attempt_id}")
    assert page.status_code == 303 and page.headers["Location"] == first.headers["Location"]


def test_an_expired_attempt_sends_the_user_back_with_an_error(client, alice):
    attempt_id = create_link(client, alice)
    OnboardingAttempt.update(expires_at=utcnow() - dt.timedelta(seconds=1)).where(
        OnboardingAttempt.public_id == attempt_id).execute()
    page = client.simulate_get(f"/onboarding/{attempt_id}")
    assert redirect_params(page) == {"success": "false", "error": "attempt_expired", "attempt_id": attempt_id}
    completion = client.simulate_post(f"/onboarding/{attempt_id}/simulate")
    assert redirect_params(completion)["error"] == "attempt_expired"
    assert attempt(attempt_id).status == "expired"
    assert MessagingAccount.select().count() == 0 and connected_events(alice) == []


def test_a_code_the_platform_rejects_fails_the_attempt(client, alice, simulator):
    attempt_id = create_link(client, alice)
    signup = simulator.signup()
    response = client.simulate_post(f"/onboarding/{attempt_id}/complete", body=(
        f"code=not-a-code&waba_id={signup['waba_id']}&phone_number_id={signup['phone_number_id']}"),
        headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert redirect_params(response) == {"success": "false", "error": "code_exchange_failed",
                                         "attempt_id": attempt_id}
    stored = attempt(attempt_id)
    assert stored.status == "failed" and "code" in stored.error_detail.lower()
    assert MessagingAccount.select().count() == 0 and connected_events(alice) == []
    # Failed is final: the right code afterwards does not revive the attempt.
    retry = post_form(client, f"/onboarding/{attempt_id}/complete", {
        "code": signup["code"], "waba_id": signup["waba_id"], "phone_number_id": signup["phone_number_id"]})
    assert redirect_params(retry)["error"] == "code_exchange_failed"
    assert MessagingAccount.select().count() == 0


def test_a_code_used_twice_is_refused_by_the_platform(client, alice, simulator):
    signup = simulator.signup()
    fields = {"code": signup["code"], "waba_id": signup["waba_id"], "phone_number_id": signup["phone_number_id"]}
    first = post_form(client, f"/onboarding/{create_link(client, alice)}/complete", fields)
    assert redirect_params(first)["success"] == "true"
    second = post_form(client, f"/onboarding/{create_link(client, alice)}/complete", fields)
    assert redirect_params(second)["error"] == "code_exchange_failed"
    assert MessagingAccount.select().count() == 1


@sqlite_only
def test_a_completion_without_the_numbers_ids_fails(client, alice, simulator):
    attempt_id = create_link(client, alice)
    response = client.simulate_post(f"/onboarding/{attempt_id}/complete", json={"code": simulator.signup()["code"]})
    assert redirect_params(response)["error"] == "signup_failed"
    assert "phone_number_id" in attempt(attempt_id).error_detail


@sqlite_only
def test_a_number_the_token_cannot_read_fails(client, alice, simulator):
    mine, other = simulator.signup(), simulator.signup()
    response = post_form(client, f"/onboarding/{create_link(client, alice)}/complete", {
        "code": mine["code"], "waba_id": mine["waba_id"], "phone_number_id": other["phone_number_id"]})
    assert redirect_params(response)["error"] == "number_unavailable"


@sqlite_only
def test_a_cancelled_signup_sends_the_user_back(client, alice):
    attempt_id = create_link(client, alice)
    response = client.simulate_post(f"/onboarding/{attempt_id}/complete", body="error=cancelled",
                                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert redirect_params(response) == {"success": "false", "error": "signup_cancelled", "attempt_id": attempt_id}
    assert attempt(attempt_id).status == "cancelled"


@sqlite_only
def test_an_error_reported_by_the_signup_fails_the_attempt(client, alice):
    attempt_id = create_link(client, alice)
    response = post_form(client, f"/onboarding/{attempt_id}/complete",
                         {"error": "failed", "detail": "Phone number is already in use"})
    assert redirect_params(response)["error"] == "signup_failed"
    assert attempt(attempt_id).error_detail == "Phone number is already in use"


@sqlite_only
def test_an_unreachable_platform_fails_with_platform_unavailable(client, alice):
    attempt_id = create_link(client, alice)
    unreachable_platform()
    response = client.simulate_post(f"/onboarding/{attempt_id}/simulate")
    assert redirect_params(response)["error"] == "platform_unavailable"


@sqlite_only
def test_a_misconfigured_platform_app_ends_the_attempt(client, alice):
    import dataclasses

    from config import get_settings, use_settings

    attempt_id = create_link(client, alice)
    use_settings(dataclasses.replace(get_settings(), app_id=""))  # the code exchange needs the app id
    response = client.simulate_post(f"/onboarding/{attempt_id}/simulate")
    assert redirect_params(response)["error"] == "platform_unavailable"
    assert attempt(attempt_id).status == "failed" and "app_id" in attempt(attempt_id).error_detail


@sqlite_only
def test_a_garbled_completion_form_is_a_400(client, alice):
    attempt_id = create_link(client, alice)
    response = client.simulate_post(f"/onboarding/{attempt_id}/complete", body=b"[1,2]",
                                    headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json["error"]["code"] == "bad_request"
    assert attempt(attempt_id).status == "pending"


def test_connecting_the_same_number_again_updates_its_account(client, alice, simulator):
    account_id = connect_number(client, alice, label="Old label")
    account = MessagingAccount.get(MessagingAccount.public_id == account_id)
    MessagingAccount.update(status="paused", paused_reason="administrator").where(
        MessagingAccount.id == account.id).execute()
    attempt_id = create_link(client, alice, label="New label")
    response = post_form(client, f"/onboarding/{attempt_id}/complete", {
        "code": code_for_number(simulator, account.phone_id), "waba_id": account.business_account_id,
        "phone_number_id": account.phone_id})
    assert redirect_params(response)["account_id"] == account_id
    again = MessagingAccount.get_by_id(account.id)
    assert MessagingAccount.select().count() == 1
    assert (again.label, again.status, again.paused_reason) == ("New label", "active", None)
    # Keeps what was not given this time, and the one-time syncs are not requested again.
    assert again.external_reference is None
    assert (again.contacts_synced_at, again.history_synced_at) == (account.contacts_synced_at,
                                                                   account.history_synced_at)
    assert len(connected_events(alice)) == 2


def test_a_number_of_another_company_is_not_taken_over(client, alice, charlie, simulator):
    account_id = connect_number(client, charlie)
    account = MessagingAccount.get(MessagingAccount.public_id == account_id)
    response = post_form(client, f"/onboarding/{create_link(client, alice)}/complete", {
        "code": code_for_number(simulator, account.phone_id), "waba_id": account.business_account_id,
        "phone_number_id": account.phone_id})
    assert redirect_params(response)["error"] == "number_connected_elsewhere"
    assert MessagingAccount.get_by_id(account.id).tenant_id == charlie.id
    assert connected_events(alice) == []


# The one-time coexistence syncs

def test_the_coexistence_syncs_run_once(client, alice, simulator):
    account = MessagingAccount.get(MessagingAccount.public_id == connect_number(client, alice))
    stamps = (account.contacts_synced_at, account.history_synced_at)
    assert None not in stamps
    assert onboarding.coexistence_sync(account) == []
    after_connect(account.id)
    again = MessagingAccount.get_by_id(account.id)
    assert (again.contacts_synced_at, again.history_synced_at) == stamps


@sqlite_only
def test_the_coexistence_syncs_are_not_requested_after_24_hours(client, alice, simulator):
    account = MessagingAccount.get(MessagingAccount.public_id == connect_number(client, alice))
    MessagingAccount.update(contacts_synced_at=None, history_synced_at=None,
                            connected_at=utcnow() - dt.timedelta(hours=25)).where(
        MessagingAccount.id == account.id).execute()
    assert onboarding.coexistence_sync(MessagingAccount.get_by_id(account.id)) == []
    assert MessagingAccount.get_by_id(account.id).contacts_synced_at is None


@sqlite_only
def test_a_sync_that_never_reached_the_platform_may_be_retried(client, alice, simulator):
    from messaging.errors import PlatformUnavailableError

    account = MessagingAccount.get(MessagingAccount.public_id == connect_number(client, alice))
    MessagingAccount.update(contacts_synced_at=None).where(MessagingAccount.id == account.id).execute()
    unreachable_platform()
    with pytest.raises(PlatformUnavailableError):
        onboarding.coexistence_sync(MessagingAccount.get_by_id(account.id))
    # Refused connection: provably not sent, so it stays due.
    assert MessagingAccount.get_by_id(account.id).contacts_synced_at is None
