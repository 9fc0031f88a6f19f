"""Status batches applied in bulk: every transition of a batch worked out from the rows as read and
written together, the users its statuses name recorded together, and a batch's statements that do
not grow with its size. On both backends."""

from __future__ import annotations

import datetime as dt
import random
import threading

import pytest

from messaging.simulator.users import user_id_for
from messaging.users import PlatformUser as WebhookUser
from models.events.tables import Event
from models.inbox import batches
from models.numbers import accounts, platform_users
from models.numbers.tables import BusinessInitiated, PlatformUser
from models.sending.campaign_counters import campaign_credits
from models.sending.statuses import apply_status_updates
from models.sending.tables import Campaign, CampaignRecipient
from models.store import db as database
from models.tenancy.tables import LedgerEntry
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import make_number, status_update, wa, wallet
from tests.statements import ID_LIST, looked_up_by_index, statements_run
from tests.test_credits import replay_ledger
from tests.test_statuses import claimed_by_a_gone_engine, platform_status, reload, sent_campaign, stored_batch

T0 = dt.datetime(2026, 11, 22, 9, 0, tzinfo=dt.UTC)


def at(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def naive(seconds: int) -> dt.datetime:
    return at(seconds).replace(tzinfo=None)


def events_of(row) -> list[str]:
    """The `message.*` events of one recipient, in the order they were written."""
    return [e.name for e in Event.select().where(Event.name.startswith("message.")).order_by(Event.id)
            if e.payload.get("recipient_id") == row.public_id]


def event_of(row, name: str) -> dict:
    [payload] = [e.payload for e in Event.select().where(Event.name == name)
                 if e.payload.get("recipient_id") == row.public_id]
    return payload


def test_one_batch_with_duplicates_and_statuses_out_of_order(alice, number, immediate_queue):
    campaign, rows = sent_campaign(alice, number, 6)
    read_first, repeated, failing, delivered_then_failed, read_then_failed, reads_twice = rows
    queued_campaign, queued = claimed_by_a_gone_engine(alice, number, immediate_queue)
    Campaign.update(status="processing").where(Campaign.id == queued_campaign.id).execute()
    updates = [
        status_update(number, read_first.wam_id, "read", at=at(5)),
        status_update(number, read_first.wam_id, "delivered", at=at(0)),
        status_update(number, repeated.wam_id, "delivered", at=at(1)),
        status_update(number, repeated.wam_id, "delivered", at=at(1)),
        status_update(number, failing.wam_id, "failed", at=at(2), error_code=131026),
        status_update(number, delivered_then_failed.wam_id, "failed", at=at(3), error_code=131026),
        status_update(number, delivered_then_failed.wam_id, "delivered", at=at(1)),
        status_update(number, read_then_failed.wam_id, "failed", at=at(4), error_code=131026),
        status_update(number, read_then_failed.wam_id, "read", at=at(2)),
        status_update(number, reads_twice.wam_id, "read", at=at(2)),
        status_update(number, reads_twice.wam_id, "delivered", at=at(1)),
        status_update(number, reads_twice.wam_id, "read", at=at(4)),
        # A send whose answer was lost: found by its callback data, accepted, then moved on.
        status_update(number, "wamid.lost", "read", callback=queued.public_id, at=at(6)),
        status_update(number, "wamid.lost", "delivered", callback=queued.public_id, at=at(3)),
    ]
    random.Random(7).shuffle(updates)
    apply_status_updates(updates)
    # The same batch again, as the platform redelivers it: nothing moves, nothing is written.
    events_before = Event.select().count()
    apply_status_updates(list(reversed(updates)))
    assert Event.select().count() == events_before

    read_first = reload(read_first)
    assert (read_first.status, read_first.delivered_at, read_first.read_at) == ("read", naive(0), naive(5))
    assert events_of(read_first) == ["message.sent", "message.delivered", "message.read"]
    repeated = reload(repeated)
    assert (repeated.status, repeated.delivered_at) == ("delivered", naive(1))
    assert events_of(repeated) == ["message.sent", "message.delivered"]
    failing = reload(failing)
    assert (failing.status, failing.failed_at, failing.error_code) == ("failed", naive(2), "131026")
    assert failing.last_error == "The recipient could not be reached."
    assert events_of(failing) == ["message.sent", "message.failed"]
    delivered_then_failed = reload(delivered_then_failed)
    assert (delivered_then_failed.status, delivered_then_failed.delivered_at, delivered_then_failed.failed_at) == (
        "failed", naive(1), naive(3))
    assert events_of(delivered_then_failed) == ["message.sent", "message.delivered", "message.failed"]
    # Read before the failure came in the same batch: read is as far as a send goes.
    read_then_failed = reload(read_then_failed)
    assert (read_then_failed.status, read_then_failed.read_at, read_then_failed.failed_at) == ("read", naive(2), None)
    assert events_of(read_then_failed) == ["message.sent", "message.read"]
    reads_twice = reload(reads_twice)
    assert (reads_twice.status, reads_twice.delivered_at, reads_twice.read_at) == ("read", naive(1), naive(4))
    assert events_of(reads_twice) == ["message.sent", "message.delivered", "message.read"]
    queued = reload(queued)
    assert (queued.status, queued.wam_id, queued.sent_at, queued.delivered_at, queued.read_at, queued.claim_token) == (
        "read", "wamid.lost", naive(3), naive(3), naive(6), None)
    assert queued.message_id.startswith("msg_")
    assert events_of(queued) == ["message.sent", "message.delivered", "message.read"]

    failed = event_of(failing, "message.failed")
    assert failed == {
        "event": "message.failed", "account_id": number.public_id, "campaign_id": campaign.public_id,
        "recipient": failing.wa_id, "external_contact_id": None, "wam_id": failing.wam_id, "status": "failed",
        "timestamp": "2026-11-22T09:00:02Z", "recipient_id": failing.public_id,
        "error": {"code": "131026", "message": "The recipient could not be reached."}}
    sent = event_of(queued, "message.sent")
    assert (sent["wam_id"], sent["timestamp"]) == ("wamid.lost", "2026-11-22T09:00:03Z")
    # Two failures after acceptance: two credits back, once each; the lost send consumed its credit.
    money = campaign_credits(Campaign.get_by_id(campaign.id))
    assert (money.consumed, money.refunded) == (6, 2)
    assert campaign_credits(Campaign.get_by_id(queued_campaign.id)).consumed == 1
    assert LedgerEntry.select().where((LedgerEntry.tenant == alice.id) & (LedgerEntry.type == "refund")).count() == 1
    assert [entry.amount for entry in LedgerEntry.select().where(LedgerEntry.type == "refund")] == [2]
    assert replay_ledger(alice.id) == (wallet(alice.id).balance, wallet(alice.id).reserved)
    assert Campaign.get_by_id(queued_campaign.id).status == "completed"


@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
def test_a_campaigns_batches_and_their_statuses_find_their_rows_by_key(alice, number, immediate_queue):
    # Without statistics SQLite would walk every row of a status by its index (every recipient
    # delivered and never read) for each batch: a batch's cost would grow with the table.
    with statements_run() as ran:
        _campaign, rows = sent_campaign(alice, number, 12)
        apply_status_updates([status_update(number, row.wam_id, "delivered", at=at(1)) for row in rows])
        apply_status_updates([status_update(number, row.wam_id, "read", at=at(2)) for row in rows])
    batches_by_id = [sql for sql in ran if ID_LIST.search(sql) and sql.startswith('UPDATE "campaign_recipient"')]
    assert len(batches_by_id) >= 3, ran  # the claim's mark, the record, and the statuses
    assert looked_up_by_index(ran) == []
    assert {reload(row).status for row in rows} == {"read"}


def statuses_of(rows, status: str, seconds: int, error_code: int | None = None) -> list[dict]:
    items = []
    for row in rows:
        item = platform_status(row, status, at(seconds), error_code)
        item["recipient_user_id"] = user_id_for(row.wa_id)
        items.append(item)
    return items


def statements_of_batch(number, items: list[dict]) -> list[str]:
    stored = stored_batch(number, items)
    with statements_run() as ran:
        outcome = batches.process_batch(stored.id)
    assert outcome.statuses_applied
    return ran


def test_a_status_batch_runs_the_same_statements_whatever_its_size(alice, number, immediate_queue):
    _campaign, few = sent_campaign(alice, number, 3)
    _campaign, many = sent_campaign(alice, number, 60)
    # The tasks a batch queues (the events' fan-out) are the worker's next runs, not the batch's.
    immediate_queue.immediate = False
    shapes = []
    for rows in (few, many):
        # First sight of the users (inserted), delivered and read together with a failure, then
        # read again by users now known (nothing written for them).
        first = statuses_of(rows[1:], "delivered", 1) + statuses_of(rows[1:], "read", 2) \
            + statuses_of(rows[:1], "failed", 1, error_code=131026)
        again = statuses_of(rows, "read", 3)
        shapes.append([len(statements_of_batch(number, first)), len(statements_of_batch(number, again))])
    assert shapes[0] == shapes[1], shapes
    assert max(shapes[1]) <= 15, shapes
    assert {r.status for r in CampaignRecipient.select().where(CampaignRecipient.id.in_([r.id for r in many[1:]]))} \
        == {"read"}
    assert reload(many[0]).status == "failed"
    assert PlatformUser.select().count() == len(few) + len(many)


def rows_of(account_id: int) -> list[tuple]:
    return sorted((u.user_id, u.wa_id, u.parent_user_id, u.username, u.profile_name, u.contact_name,
                   u.marketing_opt_out) for u in PlatformUser.select().where(PlatformUser.account == account_id))


def sends_of(account_id: int) -> list[str]:
    return sorted(b.wa_id for b in BusinessInitiated.select().where(BusinessInitiated.account == account_id))


def test_users_recorded_together_end_as_recorded_one_by_one(alice):
    """`remember_many` leaves what `remember` for each user in turn leaves: new users, users named
    as before, a new username, an id linked to a phone, a key two users of the list share, and a
    user known apart by id and by phone."""
    together, one_by_one = make_number(alice.id), make_number(alice.id)
    before = [WebhookUser(user_id="MX.100", wa_id="5710"), WebhookUser(user_id="MX.101", wa_id="5711"),
              WebhookUser(user_id="MX.102"), WebhookUser(user_id="MX.103", wa_id="5713"),
              WebhookUser(user_id="MX.104"), WebhookUser(wa_id="5714")]
    batch = [WebhookUser(user_id="MX.100", wa_id="5710"),  # as before: nothing to write
             WebhookUser(user_id="MX.101", wa_id="5711", username="@ana", profile_name="Ana"),
             WebhookUser(user_id="MX.102", wa_id="5712"),  # the id's phone, linked
             WebhookUser(user_id="MX.103", wa_id="5719"), WebhookUser(user_id="MX.103", wa_id="5720"),
             WebhookUser(user_id="MX.104", wa_id="5714"),  # known apart: one row from now on
             WebhookUser(user_id="MX.105", wa_id="5715", profile_name="Eva"),  # new
             WebhookUser(user_id="MX.106", wa_id="5716"), WebhookUser(user_id="MX.107", wa_id="5716")]
    for account in (together, one_by_one):
        for user in before:
            platform_users.remember(account.id, user)
        accounts.record_business_sends(account.id, ["MX.102"])
    with database.atomic():
        platform_users.remember_many([(together.id, user) for user in batch])
    with database.atomic():
        for user in batch:
            platform_users.remember(one_by_one.id, user)
    assert rows_of(together.id) == rows_of(one_by_one.id)
    assert sends_of(together.id) == sends_of(one_by_one.id) == ["5712"]
    assert ("MX.105", "5715", None, None, "Eva", None, False) in rows_of(together.id)


def test_users_named_as_before_are_not_written_again(alice, number):
    _campaign, rows = sent_campaign(alice, number, 4)
    statements_of_batch(number, statuses_of(rows, "delivered", 1))
    stamps = {u.id: u.updated_at for u in PlatformUser.select()}
    ran = statements_of_batch(number, statuses_of(rows, "read", 2))
    writes = [sql for sql in ran if "platform_user" in sql and not sql.lstrip().upper().startswith("SELECT")]
    assert writes == []
    assert {u.id: u.updated_at for u in PlatformUser.select()} == stamps
    assert {(u.user_id, u.wa_id) for u in PlatformUser.select()} == {(user_id_for(r.wa_id), r.wa_id) for r in rows}
    # A user named with something new is written.
    renamed = statuses_of(rows[:1], "read", 3)
    statements_of_batch(number, [{**renamed[0], "recipient_id": wa()}])
    assert PlatformUser.get(PlatformUser.user_id == user_id_for(rows[0].wa_id)).wa_id != rows[0].wa_id


def test_batches_naming_the_same_new_users_at_once_record_each_once(alice, number, immediate_queue):
    _campaign, rows = sent_campaign(alice, number, 30)
    immediate_queue.immediate = False
    stored = [stored_batch(number, statuses_of(rows, status, seconds))
              for status, seconds in (("delivered", 1), ("read", 2), ("delivered", 1), ("read", 2))]
    errors: list[BaseException] = []

    def process(batch_id: int) -> None:
        try:
            with database.connection():
                assert batches.process_batch(batch_id).statuses_applied
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=process, args=(batch.id,)) for batch in stored]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    users = [(u.user_id, u.wa_id, u.username, u.profile_name) for u in PlatformUser.select()]
    assert sorted(users) == sorted((user_id_for(r.wa_id), r.wa_id, None, None) for r in rows)
    assert {reload(row).status for row in rows} == {"read"}
    assert Event.select().where(Event.name == "message.read").count() == len(rows)


def test_a_call_naming_more_sends_than_one_read_holds_finds_them_all(alice, number):
    _campaign, rows = sent_campaign(alice, number, 2)
    strangers = [status_update(number, f"wamid.unknown-{n}", "delivered", at=at(1)) for n in range(2100)]
    apply_status_updates(strangers[:1000] + [status_update(number, rows[0].wam_id, "read", at=at(2))]
                         + strangers[1000:] + [status_update(number, rows[1].wam_id, "delivered", at=at(1))])
    assert (reload(rows[0]).status, reload(rows[1]).status) == ("read", "delivered")
    assert events_of(rows[0]) == ["message.sent", "message.read"]
