"""Scheduled campaigns on a live stack: gunicorn, a huey consumer and the simulator as processes.

A campaign scheduled a few seconds ahead waits `queued` with its credits reserved and starts
within a second of its `send_at`: with the consumer left alone (3 s ahead), killed and restarted
before then, and killed with its queue emptied (its start lost: the start-up sweep gives it a
new one).
A campaign cancelled before its `send_at` releases its credits and never starts.
"""

from __future__ import annotations

import collections
import datetime as dt

import pytest
import requests

from jobs.queue import build_huey
from models.sending.tables import Campaign
from models.tenancy import credits
from tests.campaigns_fixtures import campaign_body
from tests.conftest import Persona
from tests.live import LiveService, wait_until
from tests.live_fixtures import *  # noqa: F403
from tests.test_campaigns_live import api, live_number

pytestmark = [pytest.mark.timing(cores=False), pytest.mark.timeout(300)]  # asserts a start to the second
ON_TIME = 1.0  # seconds after send_at a campaign may start


def schedule(service: LiveService, persona: Persona, account, wa_ids: list[str], ahead: float) -> dict:
    send_at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=ahead)
    response = api(service, persona, "POST", "/campaigns",
                   json=campaign_body(account, wa_ids, send_at=send_at.astimezone(dt.timezone(
                       dt.timedelta(hours=-4))).isoformat()))
    assert response.status_code == 201, response.text
    data = response.json()["data"]
    assert (data["status"], data["reserved_credits"], data["started_at"]) == ("queued", len(wa_ids), None)
    return data


def started_on_time(service: LiveService, persona: Persona, data: dict) -> dict:
    """Wait for the campaign to complete; it started at its send_at, within ON_TIME."""
    # Watched in the database: polling the API five times a second would spend the key's 120
    # requests a minute over the test's several waits, and answer 429.
    def completed():
        campaign = Campaign.get(Campaign.public_id == data["id"])
        return campaign if campaign.status == "completed" else None

    campaign = wait_until(completed, timeout=40, interval=0.2, message=f"{data['id']} to complete")
    response = api(service, persona, "GET", f"/campaigns/{data['id']}")
    assert response.status_code == 200, response.text
    done = response.json()["data"]
    assert done["status"] == "completed"
    late = (campaign.started_at - campaign.send_at).total_seconds()
    assert 0 <= late <= ON_TIME, f"started {late:.3f}s after its send_at"
    assert (done["sent"] + done["delivered"] + done["read"], done["consumed_credits"]) == (
        data["total_recipients"], data["total_recipients"])
    return done


def sent_to(service: LiveService, account) -> collections.Counter:
    sent = requests.get(f"{service.sim_url}/_sim/sent", timeout=5).json()["data"]
    return collections.Counter(item["to"] for item in sent if item["phone_number_id"] == account.phone_id)


def test_a_scheduled_campaign_starts_on_time_across_restarts_and_a_cancelled_one_never(live_service, storage):
    alice = Persona("Alice Later", credits=100)
    account = live_number(live_service, alice)
    soon = [f"52155559{n:05d}7" for n in range(2)]
    kept = schedule(live_service, alice, account, soon, ahead=3)
    dropped = schedule(live_service, alice, account, ["5215556099997"], ahead=3)
    assert credits.wallet_of(alice.id).reserved == 3
    cancelled = api(live_service, alice, "POST", f"/campaigns/{dropped['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert (cancelled.json()["data"]["status"], cancelled.json()["data"]["released_credits"]) == ("cancelled", 1)
    assert credits.wallet_of(alice.id).reserved == 2
    listed = api(live_service, alice, "GET", "/campaigns", params={"status": "queued"}).json()["data"]
    assert [(item["id"], item["send_at"]) for item in listed] == [(kept["id"], kept["send_at"])]
    started_on_time(live_service, alice, kept)
    # The cancelled campaign's start came at the same time and found it cancelled.
    wait_until(lambda: f"scheduled campaign {dropped['id']} is cancelled: not started" in live_service.log("worker"),
               timeout=20, message="the cancelled campaign's start to pass")
    data = api(live_service, alice, "GET", f"/campaigns/{dropped['id']}").json()["data"]
    assert (data["status"], data["started_at"], data["cancelled"], data["released_credits"]) == (
        "cancelled", None, 1, 1)
    assert sent_to(live_service, account) == collections.Counter(soon)

    # Killed and restarted before its send_at: its start waits in the queue's schedule.
    first = [f"52155560{n:05d}7" for n in range(3)]
    restarted = schedule(live_service, alice, account, first, ahead=8)
    live_service.kill("worker")
    live_service.start_worker()
    started_on_time(live_service, alice, restarted)
    assert sent_to(live_service, account) == collections.Counter(soon + first)

    # Killed, and the queue lost everything it held (its start included): the consumer's start-up
    # sweep finds the campaign in the database and starts it on time all the same.
    second = [f"52155561{n:05d}7" for n in range(2)]
    later = schedule(live_service, alice, account, second, ahead=10)
    live_service.kill("worker")
    queue = build_huey(storage)
    assert queue.storage.schedule_size() >= 1  # its start among them
    queue.flush()
    assert queue.storage.schedule_size() == 0
    live_service.start_worker()
    wait_until(lambda: "sweep: 1 scheduled campaigns" in live_service.log("worker"), timeout=20,
               message="the start-up sweep")
    started_on_time(live_service, alice, later)
    assert sent_to(live_service, account) == collections.Counter(soon + first + second)  # each once
    wallet = credits.wallet_of(alice.id)
    assert (wallet.balance, wallet.reserved) == (100 - 7, 0)
