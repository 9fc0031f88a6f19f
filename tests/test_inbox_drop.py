"""svcctl inbox drop: an operator gives a parked platform batch up. The sends it names stop
waiting for it and recovery settles them as unconfirmed; the batch stays, marked dropped, out of
the parked list; it cannot be dropped twice, and nothing happens unless the operator confirms."""

from __future__ import annotations

import datetime as dt

import orjson
from typer.testing import CliRunner

from models.clock import utcnow
from models.events.tables import Event
from models.numbers.tables import MAX_ATTEMPTS, PlatformWebhookBatch
from models.sending.campaign_store import CampaignStore
from models.sending.recovery import DEAD_ENGINE_GRACE, recover_stuck
from models.sending.tables import CampaignRecipient
from models.tenancy.tables import Wallet
from svcctl.main import app
from tests.campaigns_fixtures import create_for, make_number, wa

runner = CliRunner()


def inbox(*args: str, answer: str | None = None):
    return runner.invoke(app, ["inbox", *args], input=answer)


def parked_batch_naming(recipient: CampaignRecipient) -> PlatformWebhookBatch:
    """A batch whose status proves `recipient`'s send, parked after killing every worker that took it."""
    return PlatformWebhookBatch.create(body='{"object": "whatsapp_business_account", "entry": []}',
                                       callbacks=recipient.public_id, attempts=MAX_ATTEMPTS, parked_at=utcnow(),
                                       last_error="the worker running it stopped before finishing")


def test_a_dropped_batch_stops_holding_its_sends_back_and_leaves_the_parked_list(alice):
    number = make_number(alice.id)
    campaign = create_for(alice, number, [wa()])
    # The send was on the wire when its engine died, past the grace.
    store = CampaignStore()
    claimed_at = utcnow() - DEAD_ENGINE_GRACE - dt.timedelta(seconds=5)
    jobs = store.claim({number.id: 1}, {plan.account_id: plan for plan in store.plan()}, "deadengine.1",
                       now=claimed_at)
    store.start(jobs, now=claimed_at)
    recipient = CampaignRecipient.get(CampaignRecipient.campaign == campaign.id)
    batch = parked_batch_naming(recipient)
    assert recover_stuck() == 0  # the parked batch may prove the send: it waits
    assert Wallet.get(Wallet.tenant == alice.id).reserved == 1

    declined = inbox("drop", str(batch.id), answer="n\n")
    assert declined.exit_code == 1 and "Aborted" in declined.output
    assert f"{batch.id}? The 1 sends it names" in declined.output
    assert PlatformWebhookBatch.get_by_id(batch.id).dropped_at is None
    assert [item["id"] for item in orjson.loads(inbox("parked", "--json").stdout)] == [batch.id]

    dropped = inbox("drop", str(batch.id), "--yes", "--json")
    assert dropped.exit_code == 0, dropped.output
    assert orjson.loads(dropped.stdout) == {"id": batch.id, "dropped": True, "sends_named": 1}
    row = PlatformWebhookBatch.get_by_id(batch.id)
    assert row.dropped_at is not None and row.processed_at == row.dropped_at and row.body == batch.body
    assert orjson.loads(inbox("parked", "--json").stdout) == []

    # Nothing waits for it now: recovery settles the send as unconfirmed and releases its credit.
    assert recover_stuck() == 1
    recipient = CampaignRecipient.get_by_id(recipient.id)
    assert (recipient.status, recipient.error_code) == ("failed", "send_unconfirmed")
    assert Wallet.get(Wallet.tenant == alice.id).reserved == 0
    [failed] = [event.payload for event in Event.select().where(
        (Event.tenant == alice.id) & (Event.name == "message.failed"))]
    assert failed["recipient_id"] == recipient.public_id

    again = inbox("drop", str(batch.id), "--yes")
    assert again.exit_code == 1 and f"no parked platform batch {batch.id}" in again.output
    retried = inbox("retry", str(batch.id))
    assert retried.exit_code == 1 and f"no parked platform batch {batch.id}" in retried.output


def test_only_a_parked_batch_can_be_dropped(alice):
    waiting = PlatformWebhookBatch.create(body="{}", callbacks="")
    for args in (["drop", str(waiting.id), "--yes"], ["drop", str(waiting.id)], ["drop", "999999", "--yes"]):
        refused = inbox(*args)
        assert refused.exit_code == 1 and "no parked platform batch" in refused.output, refused.output
    assert PlatformWebhookBatch.get_by_id(waiting.id).processed_at is None
