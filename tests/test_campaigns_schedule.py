"""Scheduled campaigns (`send_at`) and template health at creation, through the API in-process.

The start at `send_at` itself, with a live consumer killed and restarted, is in
tests/test_campaigns_schedule_live.py."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from typer.testing import CliRunner

from jobs.campaigns import START_LEAD, start_scheduled
from messaging.webhooks import TemplateQualityUpdate, TemplateStatusUpdate
from models.clock import isoformat
from models.numbers.template_review import apply_template_quality, apply_template_status
from models.sending.tables import Campaign, CampaignRecipient
from svcctl.main import app as svcctl  # noqa: E402  (after the fixtures, whose `app` it would shadow)
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import campaign_body, create_for, wa, wallet

URL = "/api/v1/campaigns"


def post(client, persona, body):
    return client.simulate_post(URL, json=body, headers=persona.headers)


def refused(response, code: str = "validation_failed") -> dict:
    assert response.status_code == 422, response.text
    body = response.json
    assert body["success"] is False and body["error"]["code"] == code, body
    return body["error"]


def at(seconds: float, offset_hours: int = 0) -> str:
    """`seconds` from now as RFC 3339 with the given offset."""
    zone = dt.timezone(dt.timedelta(hours=offset_hours))
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)).astimezone(zone).isoformat()


@pytest.mark.parametrize(("send_at", "message"), [
    (-600, "must not be in the past"),  # seconds from now
    (31 * 86400, "must be at most 30 days ahead"),
    ("2026-12-01T09:30:00", "must be an RFC 3339 date-time with its offset"),  # no offset
    ("2026-12-01 09:30:00Z", "must be an RFC 3339 date-time with its offset"),
    ("next tuesday", "must be an RFC 3339 date-time with its offset"),
    ("2026-02-30T09:30:00Z", "is not a valid date and time"),
    (1764322200, "must be an RFC 3339 date-time with its offset"),  # a Unix time
])
def test_a_bad_send_at_is_a_422_naming_it_and_reserves_nothing(client, alice, number, send_at, message):
    if isinstance(send_at, int) and abs(send_at) < 10**8:  # seconds from now, read when the test runs
        send_at = at(send_at)
    error = refused(post(client, alice, campaign_body(number, [wa()], send_at=send_at)))
    assert list(error["details"]["errors"]) == ["send_at"], error
    assert message in error["details"]["errors"]["send_at"][0]
    assert Campaign.select().count() == 0 and CampaignRecipient.select().count() == 0
    assert wallet(alice.id).reserved == 0


def test_a_scheduled_campaign_waits_queued_with_its_credits_and_cancel_releases_them(client, alice, number, sim):
    send_at = at(3600, offset_hours=-3)
    response = post(client, alice, campaign_body(number, [wa(), wa()], send_at=send_at))
    assert response.status_code == 201, response.text
    data = response.json["data"]
    expected = isoformat(dt.datetime.fromisoformat(send_at))
    assert (data["status"], data["send_at"], data["reserved_credits"], data["pending"]) == ("queued", expected, 2, 2)
    assert (wallet(alice.id).reserved, wallet(alice.id).balance) == (2, 1000)
    # The queue holds its start, due START_LEAD seconds before send_at.
    from jobs.queue import huey
    starts = [task for task in huey.scheduled() if task.name == "start_scheduled"]
    campaign = Campaign.get(Campaign.public_id == data["id"])
    assert [task.args for task in starts] == [(campaign.id,)]
    lead = (campaign.send_at - starts[0].eta).total_seconds()
    assert START_LEAD <= lead < START_LEAD + 1  # the queue keeps whole seconds
    # The in-process queue ran the engine at creation (and runs it again here): it left the campaign alone.
    from jobs.sending import dispatch
    dispatch()
    for item in (client.simulate_get(f"{URL}/{data['id']}", headers=alice.headers).json["data"],
                 client.simulate_get(URL, headers=alice.headers).json["data"][0]):
        assert (item["status"], item["send_at"], item["started_at"], item["pending"]) == ("queued", expected, None, 2)
    assert [item for item in sim.sent() if item["phone_number_id"] == number.phone_id] == []
    shown = CliRunner().invoke(svcctl, ["campaigns", "show", data["id"], "--json"])
    assert shown.exit_code == 0, shown.stdout
    assert json.loads(shown.stdout)["send_at"] == expected

    cancelled = client.simulate_post(f"{URL}/{data['id']}/cancel", headers=alice.headers)
    assert cancelled.status_code == 200, cancelled.text
    assert (cancelled.json["data"]["status"], cancelled.json["data"]["released_credits"]) == ("cancelled", 2)
    assert (wallet(alice.id).reserved, wallet(alice.id).balance) == (0, 1000)
    # Its start, when it comes, finds it cancelled and starts nothing.
    start_scheduled.call_local(campaign.id)
    assert Campaign.get_by_id(campaign.id).started_at is None
    assert [item for item in sim.sent() if item["phone_number_id"] == number.phone_id] == []


def test_a_send_at_just_past_sends_at_once(client, alice, number, sim):
    response = post(client, alice, campaign_body(number, [wa()], send_at=at(-20, offset_hours=5)))
    assert response.status_code == 201, response.text
    detail = client.simulate_get(f"{URL}/{response.json['data']['id']}", headers=alice.headers).json["data"]
    assert (detail["status"], detail["sent"]) == ("completed", 1)
    assert detail["send_at"] is not None and detail["started_at"] >= detail["send_at"]


def test_a_template_paused_or_rated_red_is_template_not_approved(client, alice, number):
    apply_template_status(TemplateStatusUpdate(number.business_account_id, None, "hello_world", "en_US", "PAUSED",
                                               detail="Paused for 3 hours: low quality"))
    error = refused(post(client, alice, campaign_body(number, [wa()])), "template_not_approved")
    assert "paused by the platform for its quality" in error["message"]
    assert (error["details"]["status"], error["details"]["reason"]) == ("paused", "Paused for 3 hours: low quality")

    apply_template_status(TemplateStatusUpdate(number.business_account_id, None, "hello_world", "en_US", "APPROVED"))
    apply_template_quality(TemplateQualityUpdate(number.business_account_id, None, "hello_world", "en_US", "RED",
                                                 "YELLOW"))
    error = refused(post(client, alice, campaign_body(number, [wa()], send_at=at(600))), "template_not_approved")
    assert "rated RED" in error["message"] and error["details"]["quality_score"] == "RED"
    assert Campaign.select().count() == 0 and wallet(alice.id).reserved == 0

    apply_template_quality(TemplateQualityUpdate(number.business_account_id, None, "hello_world", "en_US", "YELLOW",
                                                 "RED"))
    assert post(client, alice, campaign_body(number, [wa()])).status_code == 201


def test_the_sweep_starts_a_due_campaign_whose_start_was_lost_and_gives_coming_ones_a_start(
        client, alice, number, sim, immediate_queue):
    from jobs.campaigns import sweep_scheduled
    from jobs.queue import huey

    immediate_queue.immediate = False  # the starts go to a queue nobody runs: lost
    due = create_for(alice, number, [wa()], send_at=at(-30))
    coming = create_for(alice, number, [wa()], send_at=at(40))
    later = create_for(alice, number, [wa()], send_at=at(3600))
    immediate_queue.immediate = True
    assert {row.status for row in Campaign.select()} == {"queued"}

    assert sweep_scheduled.call_local() == 2  # the due one and the one coming within the minute
    assert Campaign.get_by_id(due.id).status == "completed"
    assert [item["to"] for item in sim.sent() if item["phone_number_id"] == number.phone_id] == [
        CampaignRecipient.get(CampaignRecipient.campaign == due.id).wa_id]
    starts = [task.args for task in huey.scheduled() if task.name == "start_scheduled"]
    assert starts == [(coming.id,)]
    assert (Campaign.get_by_id(coming.id).status, Campaign.get_by_id(later.id).status) == ("queued", "queued")
