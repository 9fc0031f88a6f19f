"""A campaign's counters per status follow its recipients through every path that moves them:
claims, claims given back, sends accepted, refused and throttled, the platform's statuses in any
order, cancelling and failing. Each step is checked against the recipients counted row by row;
every test's database is checked the same way at teardown (tests/conftest.py)."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from messaging.errors import ThrottledError
from models.clock import utcnow
from models.events.tables import Event
from models.sending.campaign_ends import cancel_campaign, fail_campaign
from models.sending.campaign_store import CampaignStore
from models.sending.messenger import SlotMissed
from models.sending.recovery import recover_stuck
from models.sending.statuses import apply_status_updates
from models.sending.tables import COUNTERS, Campaign, CampaignRecipient
from models.sending.work import Job
from models.store.db import atomic, connection, db, lock_rows
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import counted, create_for, status_counters, status_update, wa, wallet
from tests.live import wait_until
from tests.test_sending import dispatch, recipients

NONE = dict.fromkeys(COUNTERS, 0)


def counts(campaign: Campaign) -> dict[str, int]:
    """The campaign's counters, once they agree with its recipients counted row by row."""
    mine = status_counters(campaign.id)
    assert mine == counted(campaign.id)
    return {status: n for status, n in mine.items() if n}


def test_counters_follow_a_campaign_from_its_claims_to_its_last_status(alice, number, sim, queue_only):
    wa_ids = [wa() for _ in range(4)]
    refused, throttled = wa("0000"), wa("0429")  # the simulator refuses the one, throttles the other once
    campaign = create_for(alice, number, [*wa_ids, refused, throttled])
    assert counts(campaign) == {"pending": 6}

    store = CampaignStore()
    jobs = store.claim({number.id: 2}, {plan.account_id: plan for plan in store.plan()}, "gone.1",
                       now=utcnow() - dt.timedelta(seconds=30))
    assert len(jobs) == 2 and counts(campaign) == {"pending": 4, "queued": 2}
    assert store.give_back_unstarted([(job.id, job.claim_token) for job in jobs]) == 2
    assert counts(campaign) == {"pending": 6}

    campaign = dispatch(campaign)
    assert campaign.status == "completed"
    assert counts(campaign) == {"sent": 5, "failed": 1}
    rows = recipients(campaign)
    first, second, third, _fourth = (rows[wa_id] for wa_id in wa_ids)
    apply_status_updates([status_update(number, first.wam_id, "delivered"),
                          status_update(number, second.wam_id, "read"),
                          status_update(number, third.wam_id, "failed", error_code=131026)])
    assert counts(campaign) == {"sent": 2, "delivered": 1, "read": 1, "failed": 2}
    # Duplicates and late arrivals move nothing, so they count nothing.
    apply_status_updates([status_update(number, second.wam_id, "delivered"),
                          status_update(number, first.wam_id, "delivered"),
                          status_update(number, third.wam_id, "read")])
    assert counts(campaign) == {"sent": 2, "delivered": 1, "read": 1, "failed": 2}
    apply_status_updates([status_update(number, first.wam_id, "read")])
    assert counts(campaign) == {"sent": 2, "read": 2, "failed": 2}


def test_cancelling_and_failing_a_campaign_move_its_waiting_recipients(alice, number, queue_only):
    cancelled = create_for(alice, number, [wa() for _ in range(3)])
    cancel_campaign(alice.id, cancelled.public_id)
    assert counts(cancelled) == {"cancelled": 3}

    stopped = create_for(alice, number, [wa() for _ in range(4)])
    assert fail_campaign(stopped.id, "account_disconnected", "the number was disconnected")
    assert counts(stopped) == {"failed": 4}


def claim_two_unsent(campaign: Campaign, number) -> list[Job]:
    """Both recipients of `campaign` claimed in one batch, and back from the platform unsent: one
    missed its slot, the other was throttled with the rest of its number."""
    store = CampaignStore()
    jobs = store.claim({number.id: 2}, {plan.account_id: plan for plan in store.plan()}, "batch.1", now=utcnow())
    assert [job.campaign_id for job in jobs] == [campaign.id, campaign.id]
    jobs[0].error = SlotMissed("not sent: the engine fell behind its pacing slot")
    jobs[1].error = ThrottledError("Rate limit hit", code=130429)
    return jobs


def test_a_batch_back_unsent_after_its_campaign_failed_fails_what_it_holds(alice, number, queue_only):
    # Another batch's revoked token failed the campaign while this one was at the platform: what
    # this batch could not send fails too, rather than waiting in a campaign that is over.
    campaign = create_for(alice, number, [wa(), wa()])
    jobs = claim_two_unsent(campaign, number)
    assert fail_campaign(campaign.id, "account_disconnected", "the number was disconnected")
    result = CampaignStore().record(jobs)
    assert (result.failed, result.retried) == (2, 0)
    assert counts(campaign) == {"failed": 2}
    assert {row.error_code for row in recipients(campaign).values()} == {"campaign_failed"}
    assert wallet(alice.id).reserved == 0
    failed = [e.payload for e in Event.select().where(Event.name == "message.failed")]
    assert sorted(payload["recipient_id"] for payload in failed) == sorted(job.public_id for job in jobs)
    assert {payload["error"]["code"] for payload in failed} == {"campaign_failed"}


def test_recovery_fails_a_dead_engines_unstarted_claims_in_a_failed_campaign(alice, number, queue_only):
    # An engine died holding claims it never started; its campaign failed meanwhile. Recovery
    # gives nothing back to a campaign that is over: they fail as its waiting recipients did.
    campaign = create_for(alice, number, [wa(), wa(), wa()])
    store = CampaignStore()
    jobs = store.claim({number.id: 2}, {plan.account_id: plan for plan in store.plan()}, "gone.1",
                       now=utcnow() - dt.timedelta(minutes=5))
    assert fail_campaign(campaign.id, "account_disconnected", "the number was disconnected")
    assert recover_stuck(stores=[store]) == 0  # none of them had started: nothing is unconfirmed
    assert counts(campaign) == {"failed": 3}
    rows = recipients(campaign)
    assert {rows[job.wa_id].error_code for job in jobs} == {"campaign_failed"}
    assert wallet(alice.id).reserved == 0
    failed = {e.payload["recipient_id"]: e.payload["error"]["code"]
              for e in Event.select().where(Event.name == "message.failed")}
    assert {failed[job.public_id] for job in jobs} == {"campaign_failed"}


@pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
def test_a_campaign_failing_while_a_batch_gives_back_fails_what_it_gave_back(alice, number, storage, queue_only):
    # The batch's record has started (it holds the campaign against a change of state) and waits
    # for a recipient row; the failure waits for the record, then finds its recipients waiting.
    campaign = create_for(alice, number, [wa(), wa()])
    jobs = claim_two_unsent(campaign, number)
    holding, release = threading.Event(), threading.Event()
    failing_returned: list[bool] = []

    def hold_a_recipient():
        with connection(), atomic():
            lock_rows(CampaignRecipient, [jobs[0].id])
            holding.set()
            release.wait(30)

    def record():
        with connection():
            CampaignStore().record(jobs)

    def fail():
        with connection():
            failing_returned.append(fail_campaign(campaign.id, "account_disconnected", "the number was disconnected"))

    def waiting_on_locks() -> int:
        return db.execute_sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                              "AND datname = current_database()").fetchone()[0]

    holder = threading.Thread(target=hold_a_recipient)
    holder.start()
    assert holding.wait(10)
    recorder = threading.Thread(target=record)
    recorder.start()
    wait_until(lambda: waiting_on_locks() == 1, message="the record waiting for the held recipient")
    failer = threading.Thread(target=fail)
    failer.start()
    # Either the failure waits for the record too, or (were the campaign not held) it is over.
    wait_until(lambda: waiting_on_locks() == 2 or not failer.is_alive(), message="the failure waiting or done")
    release.set()
    for thread in (holder, recorder, failer):
        thread.join(30)
    assert failing_returned == [True]
    assert counts(campaign) == {"failed": 2}
    assert {row.error_code for row in recipients(campaign).values()} == {"account_disconnected"}
    assert wallet(alice.id).reserved == 0
