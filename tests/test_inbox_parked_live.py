"""A platform webhook batch that kills every worker taking it, against the live service: each run
that dies holding it uses an attempt, the batch is parked with its error after `MAX_ATTEMPTS`,
`svcctl status` and /metrics show it, and meanwhile another company's stuck send is recovered on
time. An operator's retry then applies it: the send it proves is charged once, never failed first.

A worker dying while it holds the batch is a process that takes the batch's lease as every worker
does (`batches.take`) and is SIGKILLed holding it; the claim timing out is the claim moved back by
`CLAIM_TIMEOUT` rather than 15 s waited for each time.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import requests

from messaging.webhooks import SIGNATURE_HEADER, sign
from models.clock import utcnow
from models.events.tables import Event
from models.inbox import batches
from models.numbers.tables import CLAIM_TIMEOUT, MAX_ATTEMPTS, PlatformWebhookBatch
from models.sending.campaign_counters import campaign_credits
from models.sending.campaign_store import CampaignStore
from models.sending.recovery import DEAD_ENGINE_GRACE, recover_stuck
from models.sending.tables import Campaign, CampaignRecipient
from models.tenancy.tables import Wallet
from tests.accounts_fixtures import messages_value, notification
from tests.campaigns_fixtures import create_for, make_number, wa
from tests.live import wait_until
from tests.live_fixtures import *  # noqa: F403  (live_service)

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parent.parent

# Takes the batch's lease the way every worker does, says so, then waits to be killed.
HOLDER = """
import sys, time
from config import get_settings
from models.inbox import batches
from models.setup import init_db
from models.store.db import connection

init_db(get_settings())
sys.stdin.readline()
with connection():
    taken = batches.take(int(sys.argv[1]))
print("held" if taken else "not taken", flush=True)
time.sleep(300)
"""


def die_holding(live_service, batch_id: int) -> None:
    """A worker takes the batch and is SIGKILLed while it holds it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(batch_id)], cwd=ROOT, env=live_service.env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "held"
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)


def claim_expires(batch_id: int) -> None:
    PlatformWebhookBatch.update(claimed_at=utcnow() - CLAIM_TIMEOUT - dt.timedelta(seconds=1)).where(
        PlatformWebhookBatch.id == batch_id).execute()


def recipient(campaign: Campaign) -> CampaignRecipient:
    return CampaignRecipient.get(CampaignRecipient.campaign == campaign.id)


def events(tenant_id: int, name: str) -> list[dict]:
    return [e.payload for e in Event.select().where((Event.tenant == tenant_id) & (Event.name == name))]


def parked_gauge(live_service) -> float:
    text = requests.get(f"{live_service.api_url}/metrics", timeout=10).text
    [line] = [line for line in text.splitlines() if line.startswith("svc_platform_batches_parked ")]
    return float(line.split()[1])


def test_a_poisoned_batch_is_parked_and_holds_no_other_company_back(live_service, alice, charlie, storage):
    live_service.kill("worker")  # every consumer is dead: nothing but this test takes the batch
    numbers = {persona.id: make_number(persona.id) for persona in (alice, charlie)}
    proven = create_for(alice, numbers[alice.id], [wa()])
    stuck = create_for(charlie, numbers[charlie.id], [wa()])
    # Both sends were claimed by an engine that died with its worker, past the grace.
    store = CampaignStore()
    claimed_at = utcnow() - DEAD_ENGINE_GRACE - dt.timedelta(seconds=5)
    jobs = store.claim({n.id: 1 for n in numbers.values()}, {p.account_id: p for p in store.plan()},
                       "deadengine.1", now=claimed_at)
    assert len(jobs) == 2
    store.start(jobs, now=claimed_at)  # both on the wire when it died
    # The platform's status for Alice's send arrives: this is the batch that kills its workers.
    proof = recipient(proven)
    value = messages_value(numbers[alice.id], statuses=[{
        "id": "wamid.POISON", "status": "sent", "timestamp": str(int(claimed_at.replace(tzinfo=dt.UTC).timestamp())),
        "recipient_id": proof.wa_id, "biz_opaque_callback_data": proof.public_id}])
    body = orjson.dumps(notification(numbers[alice.id].business_account_id, "messages", value))
    answer = requests.post(f"{live_service.api_url}/platform/webhook", data=body, timeout=10,
                           headers={"Content-Type": "application/json",
                                    SIGNATURE_HEADER: sign(body, storage.app_secret)})
    assert answer.status_code == 200
    [batch_id] = [b.id for b in PlatformWebhookBatch.select().where(PlatformWebhookBatch.processed_at.is_null())]

    die_holding(live_service, batch_id)
    held = PlatformWebhookBatch.get_by_id(batch_id)
    assert (held.attempts, held.claimed_at is not None, held.last_error) == (1, True, None)
    # A dead worker holds the batch: Charlie's stuck send is recovered at once all the same, and
    # only Alice's, which the batch names, waits for it.
    assert recover_stuck() == 1
    assert (recipient(stuck).status, recipient(stuck).error_code) == ("failed", "send_unconfirmed")
    assert recipient(proven).status == "queued"
    assert Wallet.get(Wallet.tenant == charlie.id).reserved == 0

    for attempt in range(2, MAX_ATTEMPTS + 1):
        claim_expires(batch_id)
        die_holding(live_service, batch_id)
        held = PlatformWebhookBatch.get_by_id(batch_id)
        assert (held.attempts, held.last_error, held.parked_at) == (attempt, batches.DIED, None)
        assert recover_stuck() == 0 and recipient(proven).status == "queued"
    claim_expires(batch_id)

    # A consumer comes back: the batch's queued task finds it out of attempts and parks it.
    live_service.start_worker()
    wait_until(lambda: PlatformWebhookBatch.get_by_id(batch_id).parked_at is not None, timeout=60,
               message="the batch parked")
    parked = PlatformWebhookBatch.get_by_id(batch_id)
    assert (parked.attempts, parked.claimed_at, parked.last_error) == (MAX_ATTEMPTS, None, batches.DIED)

    status = live_service.svcctl("status", "--json")
    assert status.returncode == 0, status.stderr
    snapshot = orjson.loads(status.stdout)
    assert snapshot["platform"]["batches_parked"] == 1 and snapshot["platform"]["batches_pending"] == 0
    [shown] = snapshot["parked_batches"]
    assert (shown["id"], shown["attempts"], shown["sends_named"], shown["last_error"]) == (
        batch_id, MAX_ATTEMPTS, 1, batches.DIED)
    view = live_service.svcctl("status", "--once")
    assert view.returncode == 0 and "parked platform batches" in view.stdout and "stopped before" in view.stdout
    listed = live_service.svcctl("inbox", "parked", "--json")
    assert listed.returncode == 0 and [item["id"] for item in orjson.loads(listed.stdout)] == [batch_id]
    assert parked_gauge(live_service) == 1
    assert recover_stuck() == 0 and recipient(proven).status == "queued"

    # Fixed, the operator retries it: the live consumer applies it, Alice's send is proven and
    # charged once, and nothing of hers was ever failed.
    retried = live_service.svcctl("inbox", "retry", str(batch_id))
    assert retried.returncode == 0, retried.stderr
    wait_until(lambda: PlatformWebhookBatch.get_by_id(batch_id).processed_at is not None, timeout=60,
               message="the retried batch processed")
    row = recipient(proven)
    assert (row.status, row.wam_id) == ("sent", "wamid.POISON")
    assert campaign_credits(Campaign.get_by_id(proven.id)).consumed == 1
    assert events(alice.id, "message.failed") == []
    assert [e["recipient_id"] for e in events(alice.id, "message.sent")] == [row.public_id]
    assert [e["recipient_id"] for e in events(charlie.id, "message.failed")] == [recipient(stuck).public_id]
    assert parked_gauge(live_service) == 0
    missing = live_service.svcctl("inbox", "retry", str(batch_id))
    assert missing.returncode == 1 and f"no parked platform batch {batch_id}" in missing.stderr
