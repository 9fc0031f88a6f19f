"""Recovery of a dead engine's claims, told apart by the send-started mark, on both storages.

- Claimed and never started: back to the queue with no attempt used, sent later once.
- Started, and a status webhook proves the platform had it: `sent`, charged once, one event.
- Started and unproven: left alone within the window, then failed `send_unconfirmed`.

The sends the platform "had" are real calls to the simulator; the proof is the platform's
webhook batch stored and applied by the intake, as the webhook endpoint does.
"""

from __future__ import annotations

import collections
import datetime as dt

import orjson

from models.clock import utcnow
from models.inbox import batches
from models.sending.campaign_counters import campaign_credits
from models.sending.campaign_ends import fail_campaign
from models.sending.campaign_store import CampaignStore
from models.sending.engine import Engine
from models.sending.message_store import MessageStore
from models.sending.messenger import GraphMessenger
from models.sending.recovery import DEAD_ENGINE_GRACE, recover_stuck
from models.sending.tables import Campaign, Message
from models.sending.work import Job
from tests.accounts_fixtures import messages_value, notification
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import create_for, let_write, wa, wallet
from tests.test_credits import replay_ledger
from tests.test_sending import events, recipients, sent_by

DEAD = "deadengine.1"  # a claim token whose engine never beats


def claim(store, number, count: int, at: dt.datetime) -> list[Job]:
    return store.claim({number.id: count}, {p.account_id: p for p in store.plan()}, DEAD, now=at)


def platform_reports(account, wamid: str, callback: str, status: str = "sent") -> None:
    """The platform's status webhook for a send, received and applied by the intake."""
    now = str(int(utcnow().replace(tzinfo=dt.UTC).timestamp()))
    value = messages_value(account, statuses=[{"id": wamid, "status": status, "timestamp": now,
                                               "recipient_id": "0", "biz_opaque_callback_data": callback}])
    with batches.atomic():
        batch = batches.store_batch(orjson.dumps(notification(account.business_account_id, "messages", value)))
    assert batches.process_batch(batch.id).statuses == 1


def callbacks(sim, number) -> collections.Counter:
    return collections.Counter(item["biz_opaque_callback_data"] for item in sent_by(sim, number))


def test_claims_never_started_go_back_to_the_queue_and_are_sent_once_later(alice, number, sim, queue_only):
    wa_ids = [wa() for _ in range(3)]
    campaign = create_for(alice, number, wa_ids)
    store = CampaignStore()
    jobs = claim(store, number, 3, utcnow() - dt.timedelta(seconds=30))
    assert {row.attempts for row in recipients(campaign).values()} == {1}

    assert recover_stuck() == 0
    rows = recipients(campaign).values()
    assert {(row.status, row.attempts, row.claim_token, row.send_started_at) for row in rows} == {
        ("pending", 0, None, None)}
    assert events(alice.id, "message.failed") == []
    assert campaign_credits(campaign).released == 0 and wallet(alice.id).reserved == 3
    # The engine, had it only stalled, finds its claims given up: it may not start them.
    assert store.start(jobs) == set()

    Engine().run(session=None, linger=0)
    rows = recipients(campaign).values()
    assert {(row.status, row.attempts) for row in rows} == {("sent", 1)}
    assert all(row.send_started_at is not None for row in rows)
    assert callbacks(sim, number) == {row.public_id: 1 for row in rows}
    campaign = Campaign.get_by_id(campaign.id)
    assert (campaign.status, campaign_credits(campaign).consumed, campaign_credits(campaign).released) == (
        "completed", 3, 0)
    assert len(events(alice.id, "message.sent")) == 3
    assert replay_ledger(alice.id) == (997, 0)


def test_unstarted_claims_of_a_campaign_that_failed_meanwhile_are_not_queued_again(alice, number, queue_only):
    campaign = create_for(alice, number, [wa(), wa(), wa()])
    jobs = claim(CampaignStore(), number, 2, utcnow() - dt.timedelta(seconds=30))
    # Another engine found the number gone: the campaign failed with these still claimed.
    assert fail_campaign(campaign.id, "account_disconnected", "the number is no longer connected")

    recover_stuck()
    rows = recipients(campaign)
    assert {rows[job.wa_id].status for job in jobs} == {"failed"}
    assert not [row for row in rows.values() if row.status in ("pending", "queued")]
    money = campaign_credits(Campaign.get_by_id(campaign.id))
    assert (money.reserved, money.consumed, money.released) == (3, 0, 3)
    assert wallet(alice.id).reserved == 0 and replay_ledger(alice.id) == (1000, 0)


def test_a_started_send_is_sent_when_proven_and_failed_unconfirmed_when_not(alice, number, sim, queue_only):
    campaign = create_for(alice, number, [wa(), wa()])
    store = CampaignStore()
    earlier = utcnow() - dt.timedelta(seconds=30)
    proven, unproven = claim(store, number, 2, earlier)
    assert store.start([proven, unproven], now=earlier) == {proven.id, unproven.id}
    # The engine's call for the first reached the platform; it died before recording the answer.
    wamid = GraphMessenger().send(proven)
    platform_reports(number, wamid, proven.public_id)
    # The platform retries its webhook: nothing more happens.
    platform_reports(number, wamid, proven.public_id)

    assert recover_stuck() == 1
    rows = recipients(campaign)
    assert (rows[proven.wa_id].status, rows[proven.wa_id].wam_id) == ("sent", wamid)
    assert (rows[unproven.wa_id].status, rows[unproven.wa_id].error_code) == ("failed", "send_unconfirmed")
    assert [e["recipient_id"] for e in events(alice.id, "message.sent")] == [proven.public_id]
    assert [(e["recipient_id"], e["error"]["code"]) for e in events(alice.id, "message.failed")] == [
        (unproven.public_id, "send_unconfirmed")]
    campaign = Campaign.get_by_id(campaign.id)
    money = campaign_credits(campaign)
    assert (campaign.status, money.reserved, money.consumed, money.released) == ("completed", 2, 1, 1)
    assert callbacks(sim, number) == {proven.public_id: 1}  # neither was sent again
    assert replay_ledger(alice.id) == (999, 0)


def test_a_started_send_stays_ambiguous_within_the_window(alice, number, queue_only):
    campaign = create_for(alice, number, [wa()])
    store = CampaignStore()
    recently = utcnow() - DEAD_ENGINE_GRACE + dt.timedelta(seconds=5)
    [job] = claim(store, number, 1, recently)
    store.start([job], now=recently)

    assert recover_stuck() == 0
    assert recipients(campaign)[job.wa_id].status == "queued"
    assert events(alice.id, "message.failed") == []
    # Past the window with no proof: failed, its credit released, never sent.
    assert recover_stuck(now=utcnow() + dt.timedelta(seconds=6)) == 1
    row = recipients(campaign)[job.wa_id]
    assert (row.status, row.error_code, row.wam_id) == ("failed", "send_unconfirmed", None)
    assert campaign_credits(Campaign.get_by_id(campaign.id)).released == 1
    assert wallet(alice.id).reserved == 0 and replay_ledger(alice.id) == (1000, 0)


def test_single_messages_are_recovered_by_the_same_rule(client, alice, number, sim, queue_only):
    customers = [wa() for _ in range(3)]
    for customer in customers:
        let_write(number, customer)
    ids = []
    for customer in customers:
        response = client.simulate_post("/api/v1/messages", headers=alice.headers, json={
            "account_id": number.public_id, "to": customer, "type": "text", "text": {"body": "Hola"}})
        assert response.status_code == 202, response.text
        ids.append(response.json["data"]["id"])
    store = MessageStore()
    earlier = utcnow() - dt.timedelta(seconds=30)
    jobs = {job.public_id: job for job in claim(store, number, 3, earlier)}
    unstarted, proven, unproven = (jobs[public_id] for public_id in ids)
    assert store.start([proven, unproven], now=earlier) == {proven.id, unproven.id}
    wamid = GraphMessenger().send(proven)
    platform_reports(number, wamid, proven.public_id, "delivered")

    assert recover_stuck() == 1
    rows = {row.public_id: row for row in Message.select().where(Message.tenant == alice.id)}
    assert (rows[unstarted.public_id].status, rows[unstarted.public_id].claim_token,
            rows[unstarted.public_id].attempts) == ("queued", None, 0)
    assert (rows[proven.public_id].status, rows[proven.public_id].wam_id) == ("delivered", wamid)
    assert (rows[unproven.public_id].status, rows[unproven.public_id].error_code) == ("failed", "send_unconfirmed")

    Engine().run(session=None, linger=0)
    again = Message.get(Message.public_id == unstarted.public_id)
    assert (again.status, again.attempts) == ("sent", 1)
    assert callbacks(sim, number) == {unstarted.public_id: 1, proven.public_id: 1}
    assert sorted(e["message_id"] for e in events(alice.id, "message.sent")) == sorted(
        [unstarted.public_id, proven.public_id])
    assert [e["message_id"] for e in events(alice.id, "message.failed")] == [unproven.public_id]
    assert wallet(alice.id).reserved == 0 and replay_ledger(alice.id) == (998, 0)
