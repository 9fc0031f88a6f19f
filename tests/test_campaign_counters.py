"""A campaign's counters per status follow its recipients through every path that moves them:
claims, claims given back, sends accepted, refused and throttled, the platform's statuses in any
order, cancelling and failing. Each step is checked against the recipients counted row by row;
every test's database is checked the same way at teardown (tests/conftest.py)."""

from __future__ import annotations

import datetime as dt

from models.clock import utcnow
from models.sending.campaign_store import CampaignStore
from models.sending.campaigns import cancel_campaign, fail_campaign
from models.sending.statuses import apply_status_updates
from models.sending.tables import COUNTERS, Campaign
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import counted, create_for, status_counters, status_update, wa
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
