"""The sending engine against the simulator over HTTP: pacing, throttling, failures, holds,
fairness, and recovery of sends whose worker died."""

from __future__ import annotations

import datetime as dt
import itertools
import threading
import time

import orjson
import pytest

from jobs.campaigns import enqueue_dispatch
from messaging.client import GraphClient
from messaging.errors import error_from_response
from models.clock import utcnow
from models.events.tables import Event
from models.inbox import batches
from models.numbers import accounts
from models.numbers.tables import (
    CLAIM_TIMEOUT,
    MAX_ATTEMPTS,
    BusinessInitiated,
    MessagingAccount,
    PlatformWebhookBatch,
)
from models.sending.campaign_counters import campaign_credits
from models.sending.campaign_store import CampaignStore
from models.sending.engine import Engine
from models.sending.fairness import fair_shares
from models.sending.messenger import GraphMessenger
from models.sending.recovery import engine_key, recover_stuck
from models.sending.statuses import apply_status_updates
from models.sending.tables import Campaign, CampaignRecipient
from models.store.counters import SLOT_LEAD, counters, slot_interval, slot_phase
from models.store.db import connection
from models.tenancy import credits
from tests.accounts_fixtures import messages_value, notification
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import create_for, make_number, status_update, wa, wallet
from tests.test_credits import replay_ledger

sqlite_only = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)


def dispatch(campaign: Campaign) -> Campaign:
    from jobs.queue import huey

    huey.immediate = True
    enqueue_dispatch(campaign.id)
    return Campaign.get_by_id(campaign.id)


def recipients(campaign: Campaign) -> dict[str, CampaignRecipient]:
    return {r.wa_id: r for r in CampaignRecipient.select().where(CampaignRecipient.campaign == campaign.id)}


def events(tenant_id: int, name: str) -> list[dict]:
    return [e.payload for e in Event.select().where((Event.tenant == tenant_id) & (Event.name == name))
            .order_by(Event.id)]


def sent_by(sim, account) -> list[dict]:
    return [item for item in sim.sent() if item["phone_number_id"] == account.phone_id]


class PlatformSays:
    """A messenger for platform answers the simulator never gives (parsed by the real parser)."""

    def __init__(self, code: int, http_status: int = 400):
        self.error = error_from_response(http_status, {"error": {"code": code, "message": f"(#{code}) said"}})

    def send(self, job):
        raise self.error


@pytest.mark.timing
def test_pacing_keeps_a_number_under_its_cap(alice, number, sim, queue_only):
    # The simulator answers 130429 past 20 messages/s: not one throttle means the pace held.
    campaign = dispatch(create_for(alice, number, [f"52155503{n:05d}" for n in range(1, 46)]))
    assert campaign.status == "completed"
    rows = recipients(campaign).values()
    assert {r.status for r in rows} == {"sent"} and {r.attempts for r in rows} == {1}
    assert len(sent_by(sim, number)) == 45


@sqlite_only
def test_every_send_carries_the_recipient_id_as_callback_data(alice, number, sim):
    campaign = dispatch(create_for(alice, number, ["5215550300101", "5215550300102"]))
    rows = recipients(campaign)
    assert {item["biz_opaque_callback_data"]: item["to"] for item in sent_by(sim, number)} == {
        row.public_id: wa_id for wa_id, row in rows.items()}
    assert {row.wam_id for row in rows.values()} == {item["wamid"] for item in sent_by(sim, number)}


def test_a_throttled_recipient_waits_and_is_not_counted_as_failed(alice, number, sim):
    slow = wa("0429")
    campaign = dispatch(create_for(alice, number, [slow, wa()]))
    throttled = recipients(campaign)[slow]
    assert (throttled.status, throttled.attempts) == ("sent", 2)
    assert campaign.status == "completed" and campaign_credits(campaign).consumed == 2
    assert events(alice.id, "message.failed") == []


def test_a_rejected_recipient_fails_and_its_credit_is_released(alice, number, sim):
    campaign = dispatch(create_for(alice, number, ["5215550300000", "5215550300301"], external_reference="r"))
    rejected = recipients(campaign)["5215550300000"]
    assert (rejected.status, rejected.error_code, rejected.wam_id) == ("failed", "131026", None)
    assert (campaign_credits(campaign).consumed, campaign_credits(campaign).released) == (1, 1)
    [failed] = events(alice.id, "message.failed")
    assert failed["error"]["code"] == "131026" and failed["error"]["message"]
    assert {k: failed[k] for k in ("account_id", "campaign_id", "recipient", "wam_id", "status")} == {
        "account_id": number.public_id, "campaign_id": campaign.public_id, "recipient": "5215550300000",
        "wam_id": None, "status": "failed"}
    [sent] = events(alice.id, "message.sent")
    assert (sent["recipient"], sent["status"]) == ("5215550300301", "sent") and sent["wam_id"].startswith("wamid.")
    assert replay_ledger(alice.id) == (999, 0)


@sqlite_only
def test_accepted_sends_count_against_the_daily_limit(alice, number, sim):
    dispatch(create_for(alice, number, ["5215550300401", "5215550300402", "5215550300402"]))
    assert accounts.messages_sent_today(number.id) == 2


@sqlite_only
def test_the_daily_limit_holds_the_rest_until_the_window_frees(alice, sim, queue_only):
    number = make_number(alice.id, sim, daily_limit=3)
    accounts.record_business_sends(number.id, ["5215550300505"])  # already messaged today: free
    wa_ids = [f"521555030050{n}" for n in range(1, 7)]
    campaign = dispatch(create_for(alice, number, wa_ids))
    assert (campaign.status, campaign.hold_reason) == ("pending", "daily_limit")
    rows = recipients(campaign)
    assert sorted(wa for wa, r in rows.items() if r.status == "sent") == [
        "5215550300501", "5215550300502", "5215550300505"]
    assert accounts.messages_sent_today(number.id) == 3
    # A day later the moving window has room again.
    BusinessInitiated.update(last_sent_at=utcnow() - dt.timedelta(hours=25)).execute()
    campaign = dispatch(campaign)
    assert campaign.status == "completed"
    assert {r.status for r in recipients(campaign).values()} == {"sent"}


@sqlite_only
def test_a_paused_number_holds_its_campaign_until_resumed(alice, number, sim, queue_only):
    campaign = create_for(alice, number, ["5215550300601", "5215550300602"])
    accounts.pause_account(number.id, "administrator")
    campaign = dispatch(campaign)
    assert (campaign.status, campaign.hold_reason) == ("pending", "account_paused")
    assert sent_by(sim, number) == []
    assert wallet(alice.id).reserved == 2
    accounts.resume_account(number.id)
    assert dispatch(campaign).status == "completed"


@sqlite_only
def test_a_paused_wallet_holds_dispatch(alice, number, sim, queue_only):
    campaign = create_for(alice, number, ["5215550300701"])
    credits.set_status(alice.id, "paused")
    assert dispatch(campaign).hold_reason == "wallet_paused"
    credits.set_status(alice.id, "active")
    assert dispatch(campaign).status == "completed"


@sqlite_only
def test_a_revoked_token_fails_the_campaign_and_releases_everything(alice, sim, queue_only):
    real = make_number(alice.id, sim)
    revoked = make_number(alice.id, phone_id=real.phone_id, token="EAAGrevoked")
    campaign = dispatch(create_for(alice, revoked, [f"52155503008{n:02d}" for n in range(12)]))
    assert campaign.status == "failed" and campaign.finished_at is not None
    rows = recipients(campaign).values()
    assert {r.status for r in rows} == {"failed"}
    assert (campaign_credits(campaign).consumed, campaign_credits(campaign).released) == (0, 12)
    assert (wallet(alice.id).balance, wallet(alice.id).reserved) == (1000, 0)
    [completed] = events(alice.id, "campaign.completed")
    assert completed["status"] == "failed"
    assert len(events(alice.id, "message.failed")) == 12


@sqlite_only
def test_a_number_that_lost_its_connection_fails_its_campaign(alice, number, sim, queue_only):
    campaign = create_for(alice, number, ["5215550300901", "5215550300902"])
    MessagingAccount.update(access_token=None).where(MessagingAccount.id == number.id).execute()
    campaign = dispatch(campaign)
    assert campaign.status == "failed"
    assert {r.error_code for r in recipients(campaign).values()} == {"account_disconnected"}
    assert wallet(alice.id).reserved == 0


@sqlite_only
def test_a_refused_template_fails_the_campaign(alice, number, sim, queue_only):
    campaign = create_for(alice, number, ["5215550301001", "5215550301002"])
    sim.set_template("hello_world", "en_US", status="PAUSED")
    campaign = dispatch(campaign)
    assert campaign.status == "failed"
    assert wallet(alice.id).reserved == 0


@sqlite_only
def test_campaigns_on_one_number_share_it(alice, number, sim, queue_only):
    big = create_for(alice, number, [f"52155503110{n:02d}" for n in range(40)])
    small = create_for(alice, number, [f"52155503120{n:02d}" for n in range(4)])
    dispatch(big)
    # Both campaigns get a share of every tick: the small one goes out in the first batch, next
    # to the big one, not after its 40.
    first = min(row.sent_at for row in recipients(big).values())
    assert {row.sent_at for row in recipients(small).values()} == {first}
    assert sum(row.sent_at == first for row in recipients(big).values()) > 0
    assert Campaign.get_by_id(small.id).status == Campaign.get_by_id(big.id).status == "completed"


@sqlite_only
def test_many_campaigns_of_many_tenants_interleave(alice, charlie, sim, queue_only):
    mine = [create_for(alice, make_number(alice.id, sim), [f"5215550313{i}{n:02d}" for n in range(15)])
            for i in range(3)]
    theirs = create_for(charlie, make_number(charlie.id, sim), [f"52155503140{n:02d}" for n in range(15)])
    dispatch(theirs)
    assert {Campaign.get_by_id(c.id).status for c in [*mine, theirs]} == {"completed"}
    # The first tick served every number, whatever their tenant (one batch: one sent_at).
    rows = list(CampaignRecipient.select().where(CampaignRecipient.campaign.in_([c.id for c in [*mine, theirs]])))
    first = min(row.sent_at for row in rows)
    assert {row.campaign_id for row in rows if row.sent_at == first} == {c.id for c in [*mine, theirs]}


def test_fair_shares_go_to_tenants_first_then_to_their_numbers():
    tenant_of = {1: 10, 2: 10, 3: 10, 4: 20}
    shares = fair_shares(40, tenant_of, {1: 100, 2: 100, 3: 100, 4: 100})
    assert shares[4] == 20 and shares[1] + shares[2] + shares[3] == 20
    assert max(shares[n] for n in (1, 2, 3)) - min(shares[n] for n in (1, 2, 3)) <= 1
    # What one does not want goes to the others; nobody gets more than it asked for.
    shares = fair_shares(40, tenant_of, {1: 2, 2: 3, 3: 0, 4: 100})
    assert shares == {1: 2, 2: 3, 3: 0, 4: 35}
    assert sum(fair_shares(7, tenant_of, {1: 5, 2: 5, 3: 5, 4: 5}).values()) == 7
    assert fair_shares(0, tenant_of, {1: 5, 2: 5, 3: 5, 4: 5}) == {1: 0, 2: 0, 3: 0, 4: 0}


@sqlite_only
def test_a_platform_error_retries_later_without_failing(alice, number, sim, queue_only):
    campaign = create_for(alice, number, ["5215550301501"])
    sim.fail("500", seconds=30)
    try:
        dispatch(campaign)
    finally:
        sim.fail("off")
    row = recipients(campaign)["5215550301501"]
    assert (row.status, row.retries) == ("pending", 1) and row.not_before > utcnow()
    assert Campaign.get_by_id(campaign.id).status == "processing"
    CampaignRecipient.update(not_before=None).execute()
    assert dispatch(campaign).status == "completed"


class StalledFirst:
    """The shared pacer, except that the first slots it grants are already a second old when the
    engine gets to them: what a process that stalled after claiming sees."""

    def __init__(self):
        self.pacer = counters()
        self.calls = 0

    def take_tokens(self, requests):
        self.calls += 1
        grants = self.pacer.take_tokens(requests)
        if self.calls == 1:
            return {key: (granted, wait - 1.0) for key, (granted, wait) in grants.items()}
        return grants

    def hold_tokens(self, key, rate, seconds):
        self.pacer.hold_tokens(key, rate, seconds)

    def beat(self, key, ttl_seconds):
        self.pacer.beat(key, ttl_seconds)

    def alive(self, keys):
        return self.pacer.alive(keys)


@sqlite_only
def test_sends_that_missed_their_slot_are_held_back_and_sent_later_once(alice, number, sim, queue_only):
    # Sent a second late, they would go out together with the sends after them, past the cap.
    wa_ids = [wa() for _ in range(5)]
    campaign = create_for(alice, number, wa_ids)
    pacer = StalledFirst()
    Engine(pacer=pacer).run(session=None, linger=0)
    assert pacer.calls >= 2
    assert Campaign.get_by_id(campaign.id).status == "completed"
    rows = recipients(campaign)
    assert {row.status for row in rows.values()} == {"sent"}
    # Claimed twice, handed to the platform once: a missed slot is no attempt (as a throttle is).
    assert {row.attempts for row in rows.values()} == {1}
    assert sorted(item["to"] for item in sent_by(sim, number)) == sorted(wa_ids)
    assert events(alice.id, "message.failed") == []


class HoldsSeen(StalledFirst):
    """The shared pacer, noting every hold the engine puts on a number's schedule."""

    def __init__(self):
        super().__init__()
        self.calls = 1  # no stall
        self.holds: list[tuple[str, float]] = []

    def hold_tokens(self, key, rate, seconds):
        self.holds.append((key, seconds))
        super().hold_tokens(key, rate, seconds)


@sqlite_only
def test_one_throughput_throttle_among_accepted_sends_holds_nothing(alice, number, sim, queue_only):
    # The simulator throttles a 0429 recipient once: a single late count on a paced number.
    slow = wa("0429")
    campaign = create_for(alice, number, [slow, wa(), wa(), wa()])
    pacer = HoldsSeen()
    Engine(pacer=pacer).run(session=None, linger=0)
    assert Campaign.get_by_id(campaign.id).status == "completed"
    assert recipients(campaign)[slow].attempts == 2
    assert pacer.holds == []


@sqlite_only
def test_a_throttle_storm_still_holds_the_number_longer_each_time(alice, number, queue_only):
    campaign = create_for(alice, number, [wa(), wa(), wa()])
    pacer = HoldsSeen()
    Engine(messenger=PlatformSays(130429), pacer=pacer).run(session=2.5, linger=0)
    assert [seconds for _key, seconds in pacer.holds][:2] == [1.0, 2.0]
    rows = recipients(campaign).values()
    assert {row.status for row in rows} == {"pending"} and events(alice.id, "message.failed") == []


@sqlite_only
def test_a_pair_rate_limit_makes_only_that_recipient_wait(alice, number, queue_only):
    campaign = create_for(alice, number, ["5215550301601"])
    Engine(messenger=PlatformSays(131056)).run(session=None, linger=0)
    row = recipients(campaign)["5215550301601"]
    assert (row.status, row.throttled, row.retries) == ("pending", 1, 0)
    assert 3 <= (row.not_before - utcnow()).total_seconds() <= 4  # 4^1 seconds
    assert wallet(alice.id).reserved == 1 and events(alice.id, "message.failed") == []


def test_a_lost_answer_is_settled_by_the_status_webhook_never_by_resending(alice, number, sim, queue_only):
    campaign = create_for(alice, number, ["5215550301701"])
    impatient = GraphClient(sim.base_url, timeout=(1.0, 0.3))
    sim.fail("timeout", seconds=5, hang=0.8)
    try:
        Engine(messenger=GraphMessenger(lambda: impatient)).run(session=None, linger=0)
    finally:
        sim.fail("off")
        impatient.close()
    row = recipients(campaign)["5215550301701"]
    assert row.status == "queued" and row.wam_id is None
    wait_for = time.monotonic() + 5
    while not sent_by(sim, number) and time.monotonic() < wait_for:
        time.sleep(0.05)
    [accepted] = sent_by(sim, number)  # the platform took it after all
    dispatch(campaign)
    assert len(sent_by(sim, number)) == 1  # not sent again
    apply_status_updates([status_update(number, accepted["wamid"], "delivered", callback=row.public_id)])
    row = recipients(campaign)["5215550301701"]
    assert (row.status, row.wam_id) == ("delivered", accepted["wamid"])
    campaign = Campaign.get_by_id(campaign.id)
    assert (campaign.status, campaign_credits(campaign).consumed) == ("completed", 1)
    assert [e["status"] for e in events(alice.id, "message.sent")] == ["sent"]
    assert recover_stuck() == 0


def test_recovery_fails_a_dead_engines_started_claims_and_leaves_live_ones(alice, number, queue_only):
    campaign = create_for(alice, number, [f"52155503018{n:02d}" for n in range(4)])
    store = CampaignStore()
    plan = {p.account_id: p for p in store.plan()}
    earlier = utcnow() - dt.timedelta(seconds=30)
    dead = store.claim({number.id: 2}, plan, "deadengine.1", now=earlier)
    live = store.claim({number.id: 2}, plan, "liveengine.1", now=earlier)
    assert store.start(dead + live, now=earlier) == {job.id for job in dead + live}
    counters().beat(engine_key("liveengine"), 30)

    assert recover_stuck() == 2
    rows = recipients(campaign)
    assert {rows[job.wa_id].status for job in dead} == {"failed"}
    assert {rows[job.wa_id].error_code for job in dead} == {"send_unconfirmed"}
    assert {rows[job.wa_id].status for job in live} == {"queued"}
    assert campaign_credits(campaign).released == 2
    assert [e["error"]["code"] for e in events(alice.id, "message.failed")] == ["send_unconfirmed"] * 2
    # Any claim older than the hard limit is settled, live engine or not.
    assert recover_stuck(now=utcnow() + dt.timedelta(minutes=3)) == 2
    campaign = Campaign.get_by_id(campaign.id)
    assert (campaign.status, campaign_credits(campaign).released) == ("completed", 4)
    assert wallet(alice.id).reserved == 0


def held_status_batch(account, wamid: str, recipient: CampaignRecipient, received_at: dt.datetime
                      ) -> PlatformWebhookBatch:
    """The platform's `sent` status for a send, stored and claimed by a worker that then died."""
    sent_at = str(int(received_at.replace(tzinfo=dt.UTC).timestamp()))
    value = messages_value(account, statuses=[{"id": wamid, "status": "sent", "timestamp": sent_at,
                                               "recipient_id": recipient.wa_id,
                                               "biz_opaque_callback_data": recipient.public_id}])
    with batches.atomic():
        batch = batches.store_batch(orjson.dumps(notification(account.business_account_id, "messages", value)))
    PlatformWebhookBatch.update(received_at=received_at, claimed_at=utcnow() - dt.timedelta(seconds=5)).where(
        PlatformWebhookBatch.id == batch.id).execute()
    return batch


def test_recovery_waits_for_the_statuses_a_dead_worker_was_processing(alice, number, queue_only):
    campaign = create_for(alice, number, ["5215550301901", "5215550301902"])
    store = CampaignStore()
    earlier = utcnow() - dt.timedelta(seconds=30)
    accepted, lost = store.claim({number.id: 2}, {p.account_id: p for p in store.plan()}, "deadengine.1",
                                 now=earlier)
    store.start([accepted, lost], now=earlier)
    # The platform took the first; the worker holding its status batch died with the engine.
    batch = held_status_batch(number, "wamid.HELD", recipients(campaign)[accepted.wa_id],
                              earlier + dt.timedelta(seconds=1))

    # Only the send the held batch names waits for it; the other has no evidence anywhere.
    assert recover_stuck() == 1
    rows = recipients(campaign)
    assert rows[accepted.wa_id].status == "queued"
    assert (rows[lost.wa_id].status, rows[lost.wa_id].error_code) == ("failed", "send_unconfirmed")
    # The claim times out and the intake takes the batch over: the named send is proven, charged once.
    PlatformWebhookBatch.update(claimed_at=utcnow() - CLAIM_TIMEOUT - dt.timedelta(seconds=1)).where(
        PlatformWebhookBatch.id == batch.id).execute()
    assert batches.process_batch(batch.id).statuses == 1
    assert recover_stuck() == 0
    rows = recipients(campaign)
    assert (rows[accepted.wa_id].status, rows[accepted.wa_id].wam_id) == ("sent", "wamid.HELD")
    assert [e["recipient_id"] for e in events(alice.id, "message.failed")] == [rows[lost.wa_id].public_id]
    assert campaign_credits(Campaign.get_by_id(campaign.id)).consumed == 1


def test_a_parked_batch_holds_back_only_the_sends_it_names(alice, number, queue_only):
    campaign = create_for(alice, number, ["5215550301903", "5215550301904"])
    store = CampaignStore()
    long_ago = utcnow() - dt.timedelta(minutes=10)
    named, other = store.claim({number.id: 2}, {p.account_id: p for p in store.plan()}, "deadengine.1",
                               now=long_ago)
    store.start([named, other], now=long_ago)
    # A batch that killed every worker taking it, parked with its error.
    batch = held_status_batch(number, "wamid.POISON", recipients(campaign)[named.wa_id],
                              long_ago + dt.timedelta(seconds=1))
    PlatformWebhookBatch.update(claimed_at=utcnow() - CLAIM_TIMEOUT - dt.timedelta(seconds=1),
                                attempts=MAX_ATTEMPTS).where(PlatformWebhookBatch.id == batch.id).execute()
    assert not batches.process_batch(batch.id).claimed
    parked = PlatformWebhookBatch.get_by_id(batch.id)
    assert parked.parked_at is not None and parked.last_error == batches.DIED

    assert recover_stuck() == 1
    rows = recipients(campaign)
    assert (rows[other.wa_id].status, rows[other.wa_id].error_code) == ("failed", "send_unconfirmed")
    assert rows[named.wa_id].status == "queued"  # proven by the parked batch: never failed first
    # An operator retries it once the cause is fixed: the send is sent and charged once.
    assert batches.retry_parked(batch.id)
    assert batches.process_batch(batch.id).statuses == 1
    rows = recipients(campaign)
    assert (rows[named.wa_id].status, rows[named.wa_id].wam_id) == ("sent", "wamid.POISON")
    campaign = Campaign.get_by_id(campaign.id)
    assert (campaign.status, campaign_credits(campaign).consumed, campaign_credits(campaign).released) == (
        "completed", 1, 1)
    assert [e["recipient_id"] for e in events(alice.id, "message.sent")] == [rows[named.wa_id].public_id]
    assert wallet(alice.id).reserved == 0


@pytest.mark.parametrize("storage", ["sqlite", "postgres+redis"], indirect=True)
def test_send_slots_are_spaced_and_never_shared(storage):
    store = counters()
    interval = slot_interval(50.0)
    slots: list[float] = []
    lock = threading.Lock()
    started = time.time()

    def take():
        with connection():
            while time.time() - started < 0.6:
                now = time.time()
                got, first = store.take_tokens({"test:slots": (50.0, 10.0, 3)}, now=now)["test:slots"]
                with lock:
                    slots.extend(now + first + index * interval for index in range(got))
                time.sleep(0.005)

    threads = [threading.Thread(target=take) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    slots.sort()
    # Six consumers together: every slot is its own, one interval after the one before, and no
    # slot is granted further ahead than the lead plus the burst.
    assert len(slots) > 10
    assert min(later - earlier for earlier, later in itertools.pairwise(slots)) >= interval - 1e-5
    assert slots[0] >= started + SLOT_LEAD - 1e-5
    assert slots[-1] <= time.time() + SLOT_LEAD + 11 * interval  # the burst, from the number's phase
    store.hold_tokens("test:slots", 50.0, 5.0)
    got, wait = store.take_tokens({"test:slots": (50.0, 10.0, 3)})["test:slots"]
    assert got == 0 and wait > 4
    now = time.time()
    fresh, first = store.take_tokens({"test:other": (5.0, 2.0, 10)}, now=now)["test:other"]
    # An idle number banks nothing: `burst` slots, the first after the lead, on the number's phase.
    assert fresh == 2 and SLOT_LEAD <= first < SLOT_LEAD + slot_interval(5.0)
    phase = ((now + first) % slot_interval(5.0)) / slot_interval(5.0)
    assert phase == pytest.approx(slot_phase("test:other"), abs=1e-4)


@pytest.mark.parametrize("storage", ["sqlite", "postgres+redis"], indirect=True)
def test_heartbeats_expire(storage):
    store = counters()
    store.beat("engine:a", 30)
    store.beat("engine:b", 0.05)
    time.sleep(0.1)
    assert store.alive(["engine:a", "engine:b", "engine:c"]) == {"engine:a"}


@sqlite_only
def test_one_throughput_throttle_on_a_paced_slow_number_backs_off_briefly(alice, number, sim, queue_only):
    # One send a second: each batch holds one send, so the throttled one has no accepted
    # neighbour, but the number's sends were taken just before: it is at its pace.
    MessagingAccount.update(mps=1).where(MessagingAccount.id == number.id).execute()
    slow = wa("0429")
    campaign = create_for(alice, number, [wa(), slow, wa()])
    pacer = HoldsSeen()
    Engine(pacer=pacer).run(session=None, linger=0)
    assert Campaign.get_by_id(campaign.id).status == "completed"
    assert recipients(campaign)[slow].attempts == 2
    assert pacer.holds == [(f"mps:{number.id}", 0.25)]
