"""GET /campaigns, GET /campaigns/{id}, its recipients, and POST /campaigns/{id}/cancel."""

from __future__ import annotations

import pytest

from jobs.queue import huey
from models.sending import campaign_counters, campaign_reads
from models.sending.campaigns import create_campaign
from models.sending.tables import COUNTERS, Campaign, CampaignRecipient
from models.tenancy.tables import LedgerEntry
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import campaign_body, counted, create_for, make_number, set_recipients, wallet
from tests.test_credits import replay_ledger

sqlite_only = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
URL = "/api/v1/campaigns"


def test_the_list_is_newest_first_filtered_and_only_api_campaigns(client, alice, charlie, number, sim, queue_only):
    first = create_for(alice, number, ["5215550200001"])
    second = create_for(alice, number, ["5215550200002", "5215550200003"])
    create_campaign(alice.id, campaign_body(number, ["5215550200004"]), source="collection")
    create_for(charlie, make_number(charlie.id, sim), ["5215550200005"])
    Campaign.update(status="completed").where(Campaign.id == first.id).execute()

    body = client.simulate_get(URL, headers=alice.headers).json
    assert [item["id"] for item in body["data"]] == [second.public_id, first.public_id]
    assert body["meta"]["total"] == 2 and body["links"]["next"] is None
    assert body["data"][0]["pending"] == 2 and body["data"][0]["total_recipients"] == 2
    only = client.simulate_get(URL, params={"status": "completed"}, headers=alice.headers).json
    assert [item["id"] for item in only["data"]] == [first.public_id]
    paged = client.simulate_get(URL, params={"per_page": 1, "page": 2}, headers=alice.headers).json
    assert [item["id"] for item in paged["data"]] == [first.public_id]
    assert paged["meta"]["from"] == 2 and paged["links"]["prev"].endswith("page=1")


@sqlite_only
def test_the_list_rejects_an_unknown_status_and_big_pages(client, alice, number):
    for params, field in (({"status": "done"}, "status"), ({"per_page": 101}, "per_page")):
        response = client.simulate_get(URL, params=params, headers=alice.headers)
        assert response.status_code == 422
        assert field in response.json["error"]["details"]["errors"]


@sqlite_only
def test_a_campaign_reads_with_counters_and_credits(client, alice, number):
    data = client.simulate_post(URL, json=campaign_body(number, ["5215550200011", "5215550200000"]),
                                headers=alice.headers).json["data"]
    detail = client.simulate_get(f"{URL}/{data['id']}", headers=alice.headers).json
    assert set(detail) == {"data"}
    campaign = detail["data"]
    assert (campaign["sent"], campaign["failed"], campaign["pending"], campaign["queued"]) == (1, 1, 0, 0)
    assert (campaign["reserved_credits"], campaign["consumed_credits"], campaign["released_credits"]) == (2, 1, 1)
    failed = client.simulate_get(f"{URL}/{data['id']}/recipients", params={"status": "failed"},
                                 headers=alice.headers).json["data"]
    assert [(r["wa_id"], r["status"], r["attempts"]) for r in failed] == [("5215550200000", "failed", 1)]
    assert failed[0]["last_error"] and failed[0]["message_id"] is None
    sent = client.simulate_get(f"{URL}/{data['id']}/recipients", params={"status": "sent"},
                               headers=alice.headers).json["data"][0]
    assert sent["message_id"].startswith("msg_") and sent["sent_at"].endswith("Z")


@sqlite_only
def test_counters_follow_the_recipients_statuses(alice, number, queue_only):
    campaign = create_for(alice, number, [f"52155502001{n:02d}" for n in range(7)])
    rows = list(CampaignRecipient.select().where(CampaignRecipient.campaign == campaign.id).order_by(
        CampaignRecipient.id))
    for row, status in zip(rows, ["queued", "sent", "delivered", "delivered", "read", "failed", "pending"],
                           strict=True):
        set_recipients(CampaignRecipient.id == row.id, status=status)
    data = campaign_reads.campaign_dict(campaign)
    assert {k: data[k] for k in ("pending", "queued", "sent", "delivered", "read", "failed", "cancelled")} == {
        "pending": 1, "queued": 1, "sent": 1, "delivered": 2, "read": 1, "failed": 1, "cancelled": 0}


@sqlite_only
def test_recipients_page_up_to_200(client, alice, number, queue_only):
    campaign = create_for(alice, number, [f"5215550{n:06d}" for n in range(250)])
    page = client.simulate_get(f"{URL}/{campaign.public_id}/recipients", params={"per_page": 200},
                               headers=alice.headers).json
    assert len(page["data"]) == 200 and page["meta"]["last_page"] == 2 and page["meta"]["per_page"] == 200
    assert page["data"][0]["id"].startswith("rcp_") and page["data"][0]["status"] == "pending"
    default = client.simulate_get(f"{URL}/{campaign.public_id}/recipients", headers=alice.headers).json
    assert default["meta"]["per_page"] == 50
    too_big = client.simulate_get(f"{URL}/{campaign.public_id}/recipients", params={"per_page": 201},
                                  headers=alice.headers)
    assert too_big.status_code == 422


def test_recipient_pages_walk_the_list_once_in_its_order_with_and_without_a_status(client, alice, number,
                                                                                   queue_only):
    numbers = [f"5215550{n:06d}" for n in range(23)]
    campaign = create_for(alice, number, numbers)
    create_for(alice, number, ["5215559999991"])  # another campaign's recipients stay out of these pages
    failed = numbers[1::3]
    set_recipients(CampaignRecipient.wa_id.in_(failed), status="failed")

    def walk(**params) -> tuple[list[str], list[dict]]:
        seen, metas = [], []
        for page in range(1, 6):
            body = client.simulate_get(f"{URL}/{campaign.public_id}/recipients", headers=alice.headers,
                                       params={"per_page": 5, "page": page, **params}).json
            seen += [item["wa_id"] for item in body["data"]]
            metas.append(body["meta"])
        return seen, metas

    everyone, metas = walk()
    assert everyone == numbers
    assert [meta["total"] for meta in metas] == [23] * 5 and metas[-1]["last_page"] == 5
    assert (metas[0]["from"], metas[0]["to"], metas[-1]["from"], metas[-1]["to"]) == (1, 5, 21, 23)
    only_failed, metas = walk(status="failed")
    assert only_failed == failed and metas[0]["total"] == len(failed) and metas[-1]["from"] is None
    past_the_end = client.simulate_get(f"{URL}/{campaign.public_id}/recipients", headers=alice.headers,
                                       params={"page": 1000}).json
    assert past_the_end["data"] == [] and past_the_end["meta"]["total"] == 23


@sqlite_only
def test_another_companys_campaign_is_not_found(client, alice, charlie, sim, queue_only):
    theirs = create_for(charlie, make_number(charlie.id, sim), ["5215550200021"])
    for path, method in ((f"{URL}/{theirs.public_id}", "GET"), (f"{URL}/{theirs.public_id}/recipients", "GET"),
                         (f"{URL}/{theirs.public_id}/cancel", "POST"), (f"{URL}/cmp_unknown", "GET")):
        response = client.simulate_request(method, path, headers=alice.headers)
        assert response.status_code == 404, path
        assert response.json["error"]["code"] == "campaign_not_found"
    assert Campaign.get_by_id(theirs.id).status == "queued"


def test_cancelling_a_queued_campaign_releases_its_credits(client, alice, number, queue_only):
    campaign = create_for(alice, number, ["5215550200031", "5215550200032", "5215550200033"])
    response = client.simulate_post(f"{URL}/{campaign.public_id}/cancel", headers=alice.headers)
    assert response.status_code == 200, response.text
    data = response.json["data"]
    assert (data["status"], data["cancelled"], data["pending"]) == ("cancelled", 3, 0)
    assert (data["reserved_credits"], data["released_credits"]) == (3, 3)
    assert data["finished_at"] is not None
    assert (wallet(alice.id).balance, wallet(alice.id).reserved) == (1000, 0)
    release = LedgerEntry.get((LedgerEntry.tenant == alice.id) & (LedgerEntry.type == "release"))
    assert (release.amount, release.campaign_id) == (3, campaign.id)
    assert replay_ledger(alice.id) == (1000, 0)
    # Dispatch finds nothing to send afterwards.
    huey.immediate = True
    from jobs.campaigns import enqueue_dispatch

    enqueue_dispatch(campaign.id)
    assert Campaign.get_by_id(campaign.id).status == "cancelled"


def test_a_started_or_finished_campaign_cannot_be_cancelled(client, alice, number):
    data = client.simulate_post(URL, json=campaign_body(number, ["5215550200041"]), headers=alice.headers).json["data"]
    response = client.simulate_post(f"{URL}/{data['id']}/cancel", headers=alice.headers)
    assert response.status_code == 409
    assert response.json["error"]["code"] == "campaign_not_cancellable"
    assert response.json["error"]["details"] == {"status": "completed"}


@sqlite_only
def test_a_campaign_being_dispatched_cannot_be_cancelled(client, alice, number, queue_only):
    campaign = create_for(alice, number, ["5215550200051", "5215550200052"])
    # The dispatcher's first claim moves the campaign to processing in its transaction.
    Campaign.update(status="processing").where(Campaign.id == campaign.id).execute()
    set_recipients(CampaignRecipient.wa_id == "5215550200051", status="queued")
    response = client.simulate_post(f"{URL}/{campaign.public_id}/cancel", headers=alice.headers)
    assert response.status_code == 409
    assert wallet(alice.id).reserved == 2


@sqlite_only
def test_cancelling_needs_the_cancel_scope(client, alice, number, queue_only):
    campaign = create_for(alice, number, ["5215550200061"])
    headers = alice.with_key(["campaigns:read", "campaigns:write"])
    response = client.simulate_post(f"{URL}/{campaign.public_id}/cancel", headers=headers)
    assert response.status_code == 403
    reads = alice.with_key(["campaigns:write"])
    assert client.simulate_get(URL, headers=reads).status_code == 403


def test_a_campaign_read_is_the_campaign_as_every_other_path_shows_it(client, alice, number, queue_only):
    """GET /campaigns/{id} runs its own statement; what it answers is what `campaign_dict`
    (the list, the cancel, the portal) gives for the same campaign, in each state."""
    held = create_for(alice, number, ["5215550200031", "5215550200032", "5215550200033"],
                      external_reference="ref-1")
    plain = create_for(alice, number, ["5215550200034"])
    set_recipients(CampaignRecipient.wa_id == "5215550200031", status="sent")
    set_recipients(CampaignRecipient.wa_id == "5215550200032", status="failed")
    Campaign.update(status="pending", hold_reason="number_paused", send_at=held.created_at).where(
        Campaign.id == held.id).execute()
    Campaign.update(status="completed", started_at=plain.created_at, finished_at=plain.created_at).where(
        Campaign.id == plain.id).execute()
    for campaign in (held, plain):
        expected = campaign_reads.campaign_dict(Campaign.get_by_id(campaign.id))
        assert {name: expected[name] for name in COUNTERS} == counted(campaign.id)
        answered = client.simulate_get(f"{URL}/{campaign.public_id}", headers=alice.headers)
        assert answered.status_code == 200 and answered.json == {"data": expected}
    detail = client.simulate_get(f"{URL}/{held.public_id}", headers=alice.headers).json["data"]
    assert (detail["sent"], detail["failed"], detail["pending"], detail["hold_reason"]) == (1, 1, 1, "number_paused")
    assert detail["external_reference"] == "ref-1" and detail["account_id"] == number.public_id
    missing = client.simulate_get(f"{URL}/cmp_nothing", headers=alice.headers)
    assert missing.status_code == 404 and missing.json["error"]["code"] == "campaign_not_found"


def test_the_list_answers_what_campaign_dict_gives_for_each_campaign_in_each_state(client, alice, charlie, number,
                                                                                   sim, queue_only):
    """GET /campaigns reads its page in two statements built once; each item is what
    `campaign_dict` (the portal's list, the cancel) gives for the same campaign."""
    held = create_for(alice, number, ["5215550200071", "5215550200072", "5215550200073"], external_reference="r-1")
    done = create_for(alice, number, ["5215550200074"])
    scheduled = create_for(alice, number, ["5215550200075", "5215550200076"])
    create_campaign(alice.id, campaign_body(number, ["5215550200077"]), source="collection")
    create_for(charlie, make_number(charlie.id, sim), ["5215550200078"])
    on_the_second = held.created_at.replace(microsecond=0)  # a time written without its fraction
    for wa_id, status in (("5215550200071", "sent"), ("5215550200072", "skipped"), ("5215550200075", "cancelled")):
        set_recipients(CampaignRecipient.wa_id == wa_id, status=status)
    Campaign.update(status="pending", hold_reason="number_paused", send_at=on_the_second).where(
        Campaign.id == held.id).execute()
    Campaign.update(status="completed", started_at=on_the_second, finished_at=done.created_at).where(
        Campaign.id == done.id).execute()
    # A hold reason is shown only while the campaign is pending.
    Campaign.update(hold_reason="left from a hold").where(Campaign.id == scheduled.id).execute()
    campaign_counters.move_credits(Campaign.get_by_id(done.id), consume=1)

    def expected(status: str | None = None) -> list[dict]:
        return campaign_reads.campaign_dicts(list(campaign_reads.campaigns_of(alice.id, status)))

    for params, items in (({}, expected()), ({"status": "pending"}, expected("pending")),
                          ({"status": "completed"}, expected("completed")), ({"status": "failed"}, [])):
        body = client.simulate_get(URL, params=params, headers=alice.headers).json
        assert body["data"] == items and body["meta"]["total"] == len(items), params
    assert [item["id"] for item in expected()] == [scheduled.public_id, done.public_id, held.public_id]
    for item, campaign in zip(expected(), (scheduled, done, held), strict=True):
        assert {name: item[name] for name in COUNTERS} == counted(campaign.id)
    second = client.simulate_get(URL, params={"per_page": 2, "page": 2}, headers=alice.headers).json
    assert second["data"] == expected()[2:] and second["meta"]["total"] == 3 and second["links"]["next"] is None
    past = client.simulate_get(URL, params={"per_page": 2, "page": 3}, headers=alice.headers).json
    assert past["data"] == [] and past["meta"]["total"] == 3


def test_recipient_pages_answer_what_the_recipients_as_dict_gives_in_each_state(client, alice, number, queue_only):
    """GET /campaigns/{id}/recipients reads its rows as the driver gives them; each item is what
    `CampaignRecipient.as_dict` gives for the same recipient, with and without a status."""
    import datetime as dt

    campaign = create_for(alice, number, [f"52155503000{n:02d}" for n in range(7)])
    at = dt.datetime(2026, 11, 28, 9, 30)  # a time written without its fraction
    later = at + dt.timedelta(seconds=61, microseconds=250)
    changes = (
        {"status": "sent", "attempts": 1, "message_id": "msg_a", "wam_id": "wamid.A", "sent_at": at},
        {"status": "read", "attempts": 2, "message_id": "msg_b", "wam_id": "wamid.B", "sent_at": at,
         "delivered_at": later, "read_at": later},
        {"status": "failed", "attempts": 1, "error_code": "131026", "last_error": "undeliverable"},
        {"status": "skipped", "error_code": "marketing_opt_out", "external_contact_id": "crm-9"},
        {"payload": {"order": 7, "tags": ["a", "b"]},
         "buttons": [{"index": 0, "type": "url", "text": "abc"}, {"index": 1, "type": "quick_reply", "payload": "p"}]},
        {"status": "sent", "sent_at": later, "payload": {}},
    )
    rows = list(CampaignRecipient.select().where(CampaignRecipient.campaign == campaign.id)
                .order_by(CampaignRecipient.id))
    for row, change in zip(rows, changes, strict=False):
        set_recipients(CampaignRecipient.id == row.id, **change)
    path = f"{URL}/{campaign.public_id}/recipients"
    for status in (None, "sent", "failed", "skipped", "pending", "delivered"):
        for page, per_page in ((1, 100), (1, 2), (2, 2), (4, 2), (9, 2)):
            params = {"page": page, "per_page": per_page, **({"status": status} if status else {})}
            found, total = campaign_reads.recipients_page(Campaign.get_by_id(campaign.id), status, page, per_page)
            body = client.simulate_get(path, params=params, headers=alice.headers).json
            assert body["data"] == [row.as_dict() for row in found], params
            assert body["meta"]["total"] == total, params
