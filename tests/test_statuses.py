"""Platform status updates: forward only, each once, found by wamid or callback data, refunds."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from models.events.tables import Event
from models.sending import campaign_reads
from models.sending.campaign_counters import campaign_credits
from models.sending.campaigns import create_campaign
from models.sending.statuses import apply_status_updates
from models.sending.tables import Campaign, CampaignRecipient, Message
from models.store.db import connection
from models.tenancy.tables import LedgerEntry
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import campaign_body, let_write, make_number, set_recipients, status_update, wa, wallet
from tests.test_credits import replay_ledger

sqlite_only = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
T0 = dt.datetime(2026, 11, 22, 9, 0, tzinfo=dt.UTC)


def sent_campaign(persona, number, count: int) -> tuple[Campaign, list[CampaignRecipient]]:
    campaign = create_campaign(persona.id, campaign_body(number, [wa() for _ in range(count)]))
    from jobs.campaigns import enqueue_dispatch

    enqueue_dispatch(campaign.id)
    rows = list(CampaignRecipient.select().where(CampaignRecipient.campaign == campaign.id)
                .order_by(CampaignRecipient.id))
    assert {row.status for row in rows} == {"sent"}
    return Campaign.get_by_id(campaign.id), rows


def names(tenant_id: int) -> list[str]:
    return [e.name for e in Event.select().where((Event.tenant == tenant_id) & Event.name.startswith("message."))
            .order_by(Event.id)]


def reload(row):
    return type(row).get_by_id(row.id)


@sqlite_only
def test_statuses_move_forward_and_a_late_delivered_after_read_is_ignored(alice, number):
    campaign, [row] = sent_campaign(alice, number, 1)
    apply_status_updates([status_update(number, row.wam_id, "read", at=T0 + dt.timedelta(seconds=5))])
    apply_status_updates([status_update(number, row.wam_id, "delivered", at=T0)])
    row = reload(row)
    assert row.status == "read" and row.delivered_at is None
    assert names(alice.id) == ["message.sent", "message.read"]


@sqlite_only
def test_delivered_then_read_in_one_batch_emits_both_in_order(alice, number):
    campaign, [row] = sent_campaign(alice, number, 1)
    apply_status_updates([status_update(number, row.wam_id, "read", at=T0 + dt.timedelta(seconds=2)),
                          status_update(number, row.wam_id, "delivered", at=T0)])
    row = reload(row)
    assert row.status == "read" and row.delivered_at == T0.replace(tzinfo=None)
    assert names(alice.id) == ["message.sent", "message.delivered", "message.read"]
    read = Event.get((Event.tenant == alice.id) & (Event.name == "message.read")).payload
    assert read == {"event": "message.read", "account_id": number.public_id, "campaign_id": campaign.public_id,
                    "recipient": row.wa_id, "external_contact_id": None, "wam_id": row.wam_id, "status": "read",
                    "timestamp": "2026-11-22T09:00:02Z", "recipient_id": row.public_id}


def test_duplicates_are_processed_once(alice, number):
    campaign, rows = sent_campaign(alice, number, 2)
    updates = [status_update(number, row.wam_id, "delivered", at=T0) for row in rows]
    apply_status_updates(updates + updates)
    apply_status_updates(updates)
    assert names(alice.id) == ["message.sent", "message.sent", "message.delivered", "message.delivered"]
    assert campaign_reads.campaign_dict(campaign)["delivered"] == 2


def test_concurrent_processors_apply_each_update_once(alice, number, storage):
    campaign, rows = sent_campaign(alice, number, 20)
    updates = [status_update(number, row.wam_id, status, at=T0)
               for row in rows for status in ("delivered", "read")]
    errors = []

    def process():
        try:
            with connection():
                apply_status_updates(list(updates))
        except Exception as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=process) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert names(alice.id).count("message.read") == 20
    assert names(alice.id).count("message.delivered") <= 20
    assert campaign_reads.campaign_dict(campaign)["read"] == 20


def test_a_late_failure_refunds_the_credit(alice, number):
    campaign, [failing, fine] = sent_campaign(alice, number, 2)
    apply_status_updates([status_update(number, failing.wam_id, "failed", at=T0, error_code=131026),
                          status_update(number, fine.wam_id, "delivered", at=T0)])
    failing = reload(failing)
    assert (failing.status, failing.error_code) == ("failed", "131026")
    assert failing.last_error == "The recipient could not be reached."
    campaign = Campaign.get_by_id(campaign.id)
    money = campaign_credits(campaign)
    assert (money.consumed, money.released, money.refunded) == (2, 0, 1)
    refund = LedgerEntry.get((LedgerEntry.tenant == alice.id) & (LedgerEntry.type == "refund"))
    assert (refund.amount, refund.campaign_id) == (1, campaign.id)
    assert (wallet(alice.id).balance, wallet(alice.id).reserved) == (999, 0)
    assert replay_ledger(alice.id) == (999, 0)
    failed = Event.get((Event.tenant == alice.id) & (Event.name == "message.failed")).payload
    assert failed["error"] == {"code": "131026", "message": "The recipient could not be reached."}
    assert failed["wam_id"] == failing.wam_id
    # Read after failed (or failed twice) changes nothing, and refunds nothing more.
    apply_status_updates([status_update(number, failing.wam_id, "read"),
                          status_update(number, failing.wam_id, "failed", error_code=131026)])
    assert reload(failing).status == "failed"
    assert LedgerEntry.select().where(LedgerEntry.type == "refund").count() == 1


def claimed_by_a_gone_engine(persona, number, immediate_queue) -> tuple[Campaign, CampaignRecipient]:
    """A one-recipient campaign whose recipient an engine claimed (`queued`) and never reported on."""
    immediate_queue.immediate = False
    campaign = create_campaign(persona.id, campaign_body(number, [wa()]))
    immediate_queue.immediate = True
    row = CampaignRecipient.get(CampaignRecipient.campaign == campaign.id)
    set_recipients(CampaignRecipient.id == row.id, status="queued", claim_token="gone.1")
    return campaign, row


def test_a_queued_recipient_is_found_by_its_callback_data(alice, number, immediate_queue):
    campaign, row = claimed_by_a_gone_engine(alice, number, immediate_queue)
    Campaign.update(status="processing").where(Campaign.id == campaign.id).execute()
    apply_status_updates([status_update(number, "wamid.lost-answer", "read", callback=row.public_id, at=T0)])
    row = reload(row)
    assert (row.status, row.wam_id, row.claim_token) == ("read", "wamid.lost-answer", None)
    assert row.message_id.startswith("msg_")
    campaign = Campaign.get_by_id(campaign.id)
    assert (campaign.status, campaign_credits(campaign).consumed) == ("completed", 1)
    assert names(alice.id) == ["message.sent", "message.read"]


@sqlite_only
def test_a_failure_for_a_queued_recipient_is_consumed_then_refunded(alice, number, immediate_queue):
    _campaign, row = claimed_by_a_gone_engine(alice, number, immediate_queue)
    apply_status_updates([status_update(number, "wamid.x", "failed", callback=row.public_id, error_code=131026)])
    assert [(e.type, e.amount) for e in LedgerEntry.select().where(LedgerEntry.tenant == alice.id)
            .order_by(LedgerEntry.id)][-2:] == [("consume", -1), ("refund", 1)]
    assert names(alice.id) == ["message.sent", "message.failed"]


@sqlite_only
def test_updates_for_unknown_messages_or_another_number_are_ignored(alice, number, sim):
    campaign, [row] = sent_campaign(alice, number, 1)
    other = make_number(alice.id, sim)
    apply_status_updates([status_update(number, "wamid.unknown", "delivered"),
                          status_update(other, row.wam_id, "delivered"),
                          status_update(number, "wamid.other", "delivered", callback="rcp_notours")])
    assert reload(row).status == "sent"
    assert names(alice.id) == ["message.sent"]


@sqlite_only
def test_a_callback_for_a_row_with_another_wamid_does_not_move_it(alice, number):
    campaign, [row] = sent_campaign(alice, number, 1)
    apply_status_updates([status_update(number, "wamid.someone-else", "read", callback=row.public_id)])
    assert reload(row).status == "sent"


@sqlite_only
def test_single_messages_move_forward_and_refund_a_late_failure(client, alice, number):
    to = wa()
    let_write(number, to)
    body = {"account_id": number.public_id, "to": to, "type": "text", "text": {"body": "hello"}}
    data = client.simulate_post("/api/v1/messages", json=body, headers=alice.headers).json["data"]
    message = Message.get(Message.public_id == data["id"])
    assert message.status == "sent"
    apply_status_updates([status_update(number, message.wam_id, "delivered", at=T0),
                          status_update(number, message.wam_id, "delivered", at=T0)])
    apply_status_updates([status_update(number, message.wam_id, "failed", error_code=131026)])
    apply_status_updates([status_update(number, message.wam_id, "delivered")])
    message = reload(message)
    assert (message.status, message.error_code) == ("failed", "131026")
    assert names(alice.id) == ["message.sent", "message.delivered", "message.failed"]
    delivered = Event.get((Event.tenant == alice.id) & (Event.name == "message.delivered")).payload
    assert (delivered["campaign_id"], delivered["recipient"], delivered["message_id"]) == (None, to, data["id"])
    assert (wallet(alice.id).balance, wallet(alice.id).reserved) == (1000, 0)
    assert replay_ledger(alice.id) == (1000, 0)
    read = client.simulate_get(f"/api/v1/messages/{data['id']}", headers=alice.headers).json["data"]
    assert read["status"] == "failed"


@sqlite_only
def test_evidence_after_recovery_accepts_the_send_late_and_charges_it(alice, number, immediate_queue):
    immediate_queue.immediate = False
    campaign = create_campaign(alice.id, campaign_body(number, [wa(), wa()]))
    immediate_queue.immediate = True
    rows = list(CampaignRecipient.select().where(CampaignRecipient.campaign == campaign.id))
    earlier = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=5)
    # Claimed and started by an engine that then died: whether they reached the platform, only
    # a status can tell.
    set_recipients(CampaignRecipient.campaign == campaign.id, status="queued", claim_token="deadengine.1",
                   claimed_at=earlier, send_started_at=earlier)
    from models.sending.recovery import recover_stuck

    assert recover_stuck() == 2
    assert Campaign.get_by_id(campaign.id).status == "completed"
    # The status webhook the dead worker was holding is applied at last: the platform had it.
    apply_status_updates([status_update(number, "wamid.late", "delivered", callback=rows[0].public_id)])
    late = reload(rows[0])
    assert (late.status, late.wam_id, late.error_code) == ("delivered", "wamid.late", None)
    campaign = Campaign.get_by_id(campaign.id)
    money = campaign_credits(campaign)
    assert (money.reserved, money.consumed, money.released) == (3, 1, 2)
    assert money.reserved == money.consumed + money.released
    assert (wallet(alice.id).balance, wallet(alice.id).reserved) == (999, 0)
    assert replay_ledger(alice.id) == (999, 0)
    assert names(alice.id) == ["message.failed", "message.failed", "message.sent", "message.delivered"]
    # A wallet that cannot pay leaves the recipient failed rather than overdraw.
    from models.tenancy import credits

    credits.adjust(alice.id, -999)
    apply_status_updates([status_update(number, "wamid.late2", "read", callback=rows[1].public_id)])
    assert reload(rows[1]).status == "failed"
    assert replay_ledger(alice.id) == (0, 0)


def stored_batch(account, statuses: list[dict]):
    """A status webhook as the platform posts it, stored by the intake."""
    import orjson

    from models.inbox import batches
    from tests.accounts_fixtures import messages_value, notification

    body = notification(account.business_account_id, "messages", messages_value(account, statuses=statuses))
    with batches.atomic():
        return batches.store_batch(orjson.dumps(body))


def platform_status(row, status: str, at: dt.datetime, error_code: int | None = None) -> dict:
    item = {"id": row.wam_id, "status": status, "timestamp": str(int(at.timestamp())), "recipient_id": row.wa_id}
    if error_code:
        item["errors"] = [{"code": error_code, "title": "Message undeliverable",
                           "error_data": {"details": "The recipient could not be reached."}}]
    return item


def test_status_batches_keep_order_duplicates_and_failures(alice, number, storage):
    from jobs.inbox import process_platform_batch
    from models.numbers.tables import PlatformWebhookBatch

    campaign, [read, delivered, failing] = sent_campaign(alice, number, 3)
    later = T0 + dt.timedelta(seconds=5)
    first = stored_batch(number, [platform_status(read, "read", later), platform_status(delivered, "delivered", T0),
                                  platform_status(failing, "failed", T0, error_code=131026),
                                  platform_status(delivered, "delivered", T0)])
    # The platform keeps no order and redelivers: a `delivered` after `read`, the same
    # `delivered` and `failed` again, and the first batch itself once more.
    second = stored_batch(number, [platform_status(read, "delivered", T0),
                                   platform_status(delivered, "delivered", T0),
                                   platform_status(failing, "failed", T0, error_code=131026)])
    again = stored_batch(number, [platform_status(read, "read", later),
                                  platform_status(delivered, "delivered", T0)])

    for batch in (first, second, again):
        process_platform_batch.call_local(batch.id)
    stamped = PlatformWebhookBatch.select().where(PlatformWebhookBatch.processed_at.is_null(False)
                                                  & PlatformWebhookBatch.applied_at.is_null(False)
                                                  & PlatformWebhookBatch.claimed_at.is_null())
    assert {b.id for b in stamped} == {first.id, second.id, again.id}
    read, delivered, failing = reload(read), reload(delivered), reload(failing)
    assert (read.status, read.delivered_at, read.read_at) == ("read", None, later.replace(tzinfo=None))
    assert (delivered.status, delivered.delivered_at) == ("delivered", T0.replace(tzinfo=None))
    assert (failing.status, failing.error_code, failing.last_error) == (
        "failed", "131026", "The recipient could not be reached.")
    assert sorted(names(alice.id)) == sorted(["message.sent"] * 3 + ["message.read", "message.delivered",
                                                                     "message.failed"])
    failed = Event.get((Event.tenant == alice.id) & (Event.name == "message.failed")).payload
    assert failed["error"] == {"code": "131026", "message": "The recipient could not be reached."}
    money = campaign_credits(Campaign.get_by_id(campaign.id))
    assert (money.consumed, money.refunded) == (3, 1)
    assert LedgerEntry.select().where((LedgerEntry.tenant == alice.id) & (LedgerEntry.type == "refund")).count() == 1
    assert replay_ledger(alice.id) == (wallet(alice.id).balance, wallet(alice.id).reserved)
    counted = campaign_reads.campaign_dict(Campaign.get_by_id(campaign.id))
    assert (counted["delivered"], counted["read"], counted["failed"]) == (1, 1, 1)
