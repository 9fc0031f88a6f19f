"""The platform's webhooks: verification, signatures, storage, and processing each kind of update."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import orjson
import pytest

from jobs.inbox import sweep_platform_batches
from messaging.webhooks import SIGNATURE_HEADER, sign
from models.clock import utcnow
from models.events.tables import Event
from models.inbox import batches
from models.numbers import accounts
from models.numbers.tables import (
    CLAIM_TIMEOUT,
    MAX_ATTEMPTS,
    MessagingAccount,
    PlatformWebhookBatch,
    ProcessedMessage,
    Template,
)
from tests.accounts_fixtures import *  # noqa: F403  (fixtures)
from tests.accounts_fixtures import connect_number, messages_value, notification, signed_post, sqlite_only

PATH = "/platform/webhook"


def account_of(client, persona) -> MessagingAccount:
    return MessagingAccount.get(MessagingAccount.public_id == connect_number(client, persona))


def events(name: str) -> list[Event]:
    return list(Event.select().where(Event.name == name).order_by(Event.id))


def inbound(account: MessagingAccount, wamid: str, text: str = "Hola", sender: str = "56911112222",
            at: int | None = None) -> dict:
    return notification(account.business_account_id, "messages", messages_value(
        account, contacts=[{"profile": {"name": "Ana"}, "wa_id": sender}],
        messages=[{"from": sender, "id": wamid, "timestamp": str(at or int(time.time())), "type": "text",
                   "text": {"body": text}}]))


# Verification

@sqlite_only
def test_the_verification_challenge_is_echoed_for_our_token(client, storage):
    response = client.simulate_get(PATH, params={"hub.mode": "subscribe", "hub.verify_token": storage.verify_token,
                                                 "hub.challenge": "1158201444"})
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    assert response.text == "1158201444"


@sqlite_only
@pytest.mark.parametrize("params", [
    {"hub.mode": "subscribe", "hub.verify_token": "wrong", "hub.challenge": "1"},
    {"hub.mode": "unsubscribe", "hub.verify_token": "test-verify-token", "hub.challenge": "1"},
    {"hub.verify_token": "test-verify-token", "hub.challenge": "1"},
    {"hub.mode": "subscribe", "hub.challenge": "1"},
    {"hub.mode": "subscribe", "hub.verify_token": "test-verify-token"},
])
def test_verification_fails_without_our_token(client, storage, params):
    response = client.simulate_get(PATH, params=params)
    assert response.status_code == 403
    assert response.json["success"] is False
    assert response.json["error"]["code"] == "verification_failed"
    assert response.text != "1"


# Signatures

@sqlite_only
def test_an_unsigned_post_is_refused(client, storage):
    body = orjson.dumps(notification("1", "messages", {}))
    response = client.simulate_post(PATH, body=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 401
    assert response.json["error"]["code"] == "missing_signature"
    assert PlatformWebhookBatch.select().count() == 0


@sqlite_only
def test_a_tampered_or_wrongly_signed_post_is_refused(client, storage):
    body = orjson.dumps(notification("1", "messages", {"x": 1}))
    tampered = body.replace(b'"x":1', b'"x":2')
    for raw, signature in ((tampered, sign(body, storage.app_secret)),
                           (body, sign(body, "another-secret")),
                           (body, sign(body, storage.app_secret).replace("sha256=", "sha1=")),
                           (body, "sha256=")):
        response = client.simulate_post(PATH, body=raw, headers={SIGNATURE_HEADER: signature,
                                                                 "Content-Type": "application/json"})
        assert response.status_code == 401
        assert response.json["error"]["code"] == "invalid_signature"
    assert PlatformWebhookBatch.select().count() == 0


@sqlite_only
def test_the_signature_is_checked_on_the_raw_bytes(client, storage):
    # Same JSON, different bytes: a re-serialized body would not match the platform's signature.
    raw = b'{ "object" : "whatsapp_business_account", "entry": [] }'
    assert signed_post(client, raw).status_code == 200
    assert PlatformWebhookBatch.get().body == raw.decode()


@sqlite_only
def test_a_signed_body_that_is_not_a_json_object_is_a_400(client, storage):
    for raw in (b"not json", b"[1,2]", b"\xff\xfe"):
        response = signed_post(client, raw)
        assert response.status_code == 400
        assert response.json["error"]["code"] == "bad_request"


# Inbound messages and echoes

def test_an_inbound_message_opens_the_window_and_is_reported_once(client, alice):
    account = account_of(client, alice)
    sent_at = int(time.time()) - 30
    payload = inbound(account, "wamid.IN1", "Quiero pagar", at=sent_at)
    first = signed_post(client, payload)
    assert first.status_code == 200 and first.json == {"success": True}
    assert accounts.window_open(account.id, "56911112222")
    # The platform redelivers: stored again, reported once.
    assert signed_post(client, payload).status_code == 200
    [event] = events("message.inbound.created")
    assert event.tenant_id == alice.id
    assert event.payload == {"event": "message.inbound.created", "account_id": account.public_id,
                             "from": "56911112222", "type": "text", "body": "Quiero pagar",
                             "wam_id": "wamid.IN1",
                             "timestamp": dt.datetime.fromtimestamp(sent_at, dt.UTC).isoformat().replace(
                                 "+00:00", "Z")}
    assert PlatformWebhookBatch.select().count() == 2
    assert PlatformWebhookBatch.select().where(PlatformWebhookBatch.applied_at.is_null()).count() == 0


@sqlite_only
def test_a_business_app_echo_is_reported(client, alice):
    account = account_of(client, alice)
    payload = notification(account.business_account_id, "smb_message_echoes", messages_value(
        account, message_echoes=[{"from": account.phone_number.lstrip("+"), "to": "56933334444",
                                  "id": "wamid.ECHO1", "timestamp": str(int(time.time())), "type": "image",
                                  "image": {"caption": "Your receipt", "id": "m1"}}]))
    signed_post(client, payload)
    signed_post(client, payload)
    [event] = events("message.echo.created")
    assert {key: value for key, value in event.payload.items() if key != "timestamp"} == {
        "event": "message.echo.created", "account_id": account.public_id,
        "direction": "outgoing_from_business_app", "to": "56933334444", "type": "image", "body": "Your receipt",
        "wam_id": "wamid.ECHO1"}
    assert event.payload["timestamp"].endswith("Z")
    # Replying from the app is not the customer writing: no window opens.
    assert not accounts.window_open(account.id, "56933334444")


@sqlite_only
def test_messages_for_a_number_we_do_not_know_are_dropped(client, alice):
    account = account_of(client, alice)
    MessagingAccount.update(phone_id="999").where(MessagingAccount.id == account.id).execute()
    assert signed_post(client, inbound(account, "wamid.X")).status_code == 200
    assert events("message.inbound.created") == []
    assert PlatformWebhookBatch.get().processed_at is not None or PlatformWebhookBatch.get().applied_at is not None


@sqlite_only
def test_malformed_items_do_not_stop_the_batch(client, alice):
    account = account_of(client, alice)
    payload = inbound(account, "wamid.GOOD")
    value = payload["entry"][0]["changes"][0]["value"]
    value["messages"].insert(0, {"from": "569", "type": "text"})  # no id, no timestamp
    payload["entry"].insert(0, {"id": "1", "changes": [{"field": "messages", "value": "nonsense"}]})
    assert signed_post(client, payload).status_code == 200
    assert [event.payload["wam_id"] for event in events("message.inbound.created")] == ["wamid.GOOD"]


@sqlite_only
def test_nul_characters_do_not_poison_a_batch(client, alice):
    account = account_of(client, alice)
    raw = orjson.dumps(inbound(account, "wamid.NUL", text="a")).replace(b'"body":"a"', b'"body":"a\\u0000b"')
    assert signed_post(client, raw).status_code == 200
    [event] = events("message.inbound.created")
    assert event.payload["body"] == "ab"


# Statuses: applied by the campaigns area; kept until that works

def test_statuses_are_handed_on_or_kept_for_later(client, alice):
    from models.sending.statuses import apply_status_updates

    account = account_of(client, alice)
    payload = notification(account.business_account_id, "messages", messages_value(
        account, statuses=[{"id": "wamid.OUT1", "status": "delivered", "timestamp": str(int(time.time())),
                            "recipient_id": "56911112222"}]))
    payload["entry"][0]["changes"].append(inbound(account, "wamid.IN2")["entry"][0]["changes"][0])
    signed_post(client, payload)
    batch = PlatformWebhookBatch.get()
    assert batch.applied_at is not None
    try:
        apply_status_updates([])
        implemented = True
    except NotImplementedError:
        implemented = False
    if implemented:
        assert batch.processed_at is not None
    else:
        # Left for the sweep, which retries only the statuses: the inbound is not reported twice.
        assert batch.processed_at is None and batch.claimed_at is None and batch.attempts == 0
        PlatformWebhookBatch.update(received_at=utcnow() - dt.timedelta(minutes=5)).execute()
        assert sweep_platform_batches.call_local() == 1
        assert PlatformWebhookBatch.get().processed_at is None
    assert len(events("message.inbound.created")) == 1


# The sweep

def test_the_sweep_processes_batches_whose_task_was_lost(client, alice):
    account = account_of(client, alice)
    old = utcnow() - dt.timedelta(minutes=5)
    with batches.atomic():
        lost = batches.store_batch(orjson.dumps(inbound(account, "wamid.LOST")))
        fresh = batches.store_batch(orjson.dumps(inbound(account, "wamid.FRESH")))
    PlatformWebhookBatch.update(received_at=old).where(PlatformWebhookBatch.id == lost.id).execute()
    sweep_platform_batches.call_local()
    assert [event.payload["wam_id"] for event in events("message.inbound.created")] == ["wamid.LOST"]
    assert PlatformWebhookBatch.get_by_id(fresh.id).applied_at is None  # its own task is still due


def test_a_new_batch_also_takes_on_ones_a_dead_worker_left(client, alice):
    account = account_of(client, alice)
    with batches.atomic():
        lost = batches.store_batch(orjson.dumps(inbound(account, "wamid.LOST")))
        claimed = batches.store_batch(orjson.dumps(inbound(account, "wamid.DEADCLAIM")))
    PlatformWebhookBatch.update(received_at=utcnow() - dt.timedelta(minutes=1)).execute()
    PlatformWebhookBatch.update(claimed_at=utcnow() - CLAIM_TIMEOUT - dt.timedelta(seconds=1)).where(
        PlatformWebhookBatch.id == claimed.id).execute()
    signed_post(client, inbound(account, "wamid.NEW"))
    assert {event.payload["wam_id"] for event in events("message.inbound.created")} == {
        "wamid.LOST", "wamid.DEADCLAIM", "wamid.NEW"}
    assert PlatformWebhookBatch.get_by_id(lost.id).applied_at is not None


@sqlite_only
def test_a_batch_claimed_by_a_live_worker_is_left_alone(client, alice):
    account = account_of(client, alice)
    with batches.atomic():
        batch = batches.store_batch(orjson.dumps(inbound(account, "wamid.CLAIMED")))
    PlatformWebhookBatch.update(claimed_at=utcnow()).where(PlatformWebhookBatch.id == batch.id).execute()
    assert batches.process_batch(batch.id).claimed is False
    assert events("message.inbound.created") == []
    # A claim older than the timeout belongs to a dead worker.
    PlatformWebhookBatch.update(claimed_at=utcnow() - CLAIM_TIMEOUT - dt.timedelta(seconds=1)).where(
        PlatformWebhookBatch.id == batch.id).execute()
    assert batches.process_batch(batch.id).claimed is True
    assert len(events("message.inbound.created")) == 1


def test_a_batch_keeps_the_callback_data_of_its_statuses(client, alice):
    account = account_of(client, alice)
    statuses = [{"id": f"wamid.CB{n}", "status": "sent", "timestamp": str(int(time.time())),
                 "recipient_id": "56911112222", "biz_opaque_callback_data": callback}
                for n, callback in enumerate(["rcp_one", "msg_two", "rcp_one"])]
    statuses.append({"id": "wamid.CB9", "status": "sent", "timestamp": str(int(time.time())),
                     "recipient_id": "56911112222"})
    payload = notification(account.business_account_id, "messages", messages_value(account, statuses=statuses))
    payload["entry"][0]["changes"].append(inbound(account, "wamid.IN3")["entry"][0]["changes"][0])
    signed_post(client, payload)
    assert PlatformWebhookBatch.get().callbacks.split() == ["rcp_one", "msg_two"]


def test_a_batch_failing_every_run_is_parked_with_its_error_and_can_be_retried(client, alice):
    # A body no run can read (the intake refuses one now; a row can still hold it).
    batch = PlatformWebhookBatch.create(body="{not json", callbacks="")
    PlatformWebhookBatch.update(received_at=utcnow() - dt.timedelta(minutes=5)).execute()
    for attempt in range(1, MAX_ATTEMPTS + 1):
        assert batches.pending_batches(dt.timedelta(seconds=15)) == [batch.id]
        assert batches.process_batch(batch.id).claimed is True
        row = PlatformWebhookBatch.get_by_id(batch.id)
        assert row.attempts == attempt and row.claimed_at is None and row.last_error.startswith("JSONDecodeError")
        assert (row.parked_at is not None) == (attempt == MAX_ATTEMPTS)
    assert batches.pending_batches(dt.timedelta(seconds=15)) == []
    assert batches.process_batch(batch.id).claimed is False
    [parked] = batches.parked_batches()
    assert (parked.id, parked.attempts, parked.sends_named) == (batch.id, MAX_ATTEMPTS, 0)
    assert batches.retry_parked(batch.id) and not batches.retry_parked(batch.id)
    assert PlatformWebhookBatch.get_by_id(batch.id).attempts == 0
    assert batches.pending_batches(dt.timedelta(seconds=15)) == [batch.id]


def test_the_same_wamid_in_two_concurrent_batches_is_reported_once(client, alice, storage):
    import threading

    from models.store.db import connection

    account = account_of(client, alice)
    with batches.atomic():
        ids = [batches.store_batch(orjson.dumps(inbound(account, "wamid.RACE"))).id for _ in range(4)]
    errors = []

    def process(batch_id):
        try:
            with connection():
                batches.process_batch(batch_id)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=process, args=(batch_id,)) for batch_id in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(events("message.inbound.created")) == 1
    assert ProcessedMessage.select().count() == 1
    assert PlatformWebhookBatch.select().where(PlatformWebhookBatch.applied_at.is_null()).count() == 0


# Template status updates

def template_status(account: MessagingAccount, event: str, name: str, language: str, template_id=None) -> dict:
    return notification(account.business_account_id, "message_template_status_update", {
        "event": event, "message_template_id": template_id, "message_template_name": name,
        "message_template_language": language, "reason": None})


def listed_templates(client, persona, account) -> list[str]:
    return [item["name"] for item in client.simulate_get(f"/api/v1/accounts/{account.public_id}/templates",
                                                         headers=persona.headers).json["data"]]


def test_a_template_status_update_changes_the_template(client, alice):
    account = account_of(client, alice)
    reminder = Template.get((Template.account == account.id) & (Template.name == "payment_reminder"))
    signed_post(client, template_status(account, "PAUSED", "payment_reminder", "es", int(reminder.platform_id)))
    assert "payment_reminder" not in listed_templates(client, alice, account)
    signed_post(client, template_status(account, "APPROVED", "payment_reminder", "es"))
    assert "payment_reminder" in listed_templates(client, alice, account)
    signed_post(client, template_status(account, "DELETED", "payment_reminder", "es"))
    assert "payment_reminder" not in listed_templates(client, alice, account)
    assert not Template.get_by_id(reminder.id).active


@sqlite_only
def test_a_status_for_an_unknown_template_resyncs_the_number(client, alice, simulator):
    account = account_of(client, alice)
    name = f"late_fee_{uuid.uuid4().hex[:8]}"  # the simulator is shared by the whole session
    simulator.set_template(name, "es", body="Recargo de {{1}}")
    assert name not in listed_templates(client, alice, account)
    signed_post(client, template_status(account, "APPROVED", name, "es"))
    assert name in listed_templates(client, alice, account)


# Quality and account updates

def quality(account: MessagingAccount, event: str, limit: str | None = None) -> dict:
    return notification(account.business_account_id, "phone_number_quality_update", {
        "display_phone_number": account.phone_number.lstrip("+"), "event": event, "current_limit": limit})


def test_a_flagged_number_is_paused_and_resumed_when_unflagged(client, alice, simulator):
    account = account_of(client, alice)
    signed_post(client, quality(account, "FLAGGED", "TIER_250"))
    flagged = MessagingAccount.get_by_id(account.id)
    assert (flagged.status, flagged.quality_rating) == ("paused", "RED")
    assert flagged.paused_reason.startswith("quality_flagged")
    assert client.simulate_get(f"/api/v1/accounts/{account.public_id}", headers=alice.headers).json["data"][
        "status"] == "paused"
    signed_post(client, quality(account, "UNFLAGGED", "TIER_250"))
    unflagged = MessagingAccount.get_by_id(account.id)
    # Resumed, and the rating re-read from the platform (the event does not carry it).
    assert (unflagged.status, unflagged.paused_reason, unflagged.quality_rating) == ("active", None, "GREEN")


@sqlite_only
def test_unflagging_does_not_resume_a_number_an_administrator_paused(client, alice):
    account = account_of(client, alice)
    accounts.pause_account(account.id, accounts.ADMIN_PAUSE)
    signed_post(client, quality(account, "FLAGGED"))
    signed_post(client, quality(account, "UNFLAGGED"))
    assert MessagingAccount.get_by_id(account.id).status == "paused"


@sqlite_only
@pytest.mark.parametrize("tier, limit", [("TIER_10K", 10000), ("TIER_UNLIMITED", None), ("TIER_1K", 1000)])
def test_a_tier_change_moves_the_daily_limit(client, alice, tier, limit):
    account = account_of(client, alice)
    signed_post(client, quality(account, "UPGRADE", tier))
    assert MessagingAccount.get_by_id(account.id).daily_limit == limit
    signed_post(client, quality(account, "DOWNGRADE", "TIER_SOMETHING_NEW"))  # unknown: keep what we have
    assert MessagingAccount.get_by_id(account.id).daily_limit == limit


def test_an_account_restriction_pauses_and_its_lifting_resumes(client, alice):
    account = account_of(client, alice)
    restriction = notification(account.business_account_id, "account_update", {
        "event": "ACCOUNT_RESTRICTION",
        "restriction_info": [{"restriction_type": "RESTRICTED_BIZ_INITIATED_MESSAGING", "expiration": 1}]})
    signed_post(client, restriction)
    paused = MessagingAccount.get_by_id(account.id)
    assert paused.status == "paused" and "RESTRICTED_BIZ_INITIATED_MESSAGING" in paused.paused_reason
    signed_post(client, notification(account.business_account_id, "account_update", {
        "event": "ACCOUNT_RESTRICTION", "restriction_info": []}))
    assert MessagingAccount.get_by_id(account.id).status == "active"


@sqlite_only
def test_a_disabled_business_account_pauses_its_numbers(client, alice):
    account = account_of(client, alice)
    signed_post(client, notification(account.business_account_id, "account_update", {
        "event": "DISABLED_UPDATE", "ban_info": {"waba_ban_state": "DISABLE", "waba_ban_date": "2025-01-01"}}))
    assert MessagingAccount.get_by_id(account.id).paused_reason.startswith("account_disabled")
    signed_post(client, notification(account.business_account_id, "account_update", {
        "event": "DISABLED_UPDATE", "ban_info": {"waba_ban_state": "REINSTATE"}}))
    assert MessagingAccount.get_by_id(account.id).status == "active"
