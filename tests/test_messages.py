"""POST /messages and GET /messages/{id}: every type and limit, the window, credits, Prefer: wait."""

from __future__ import annotations

import pytest

from models.events.tables import Event
from models.numbers import accounts
from models.sending.tables import Message
from models.tenancy import credits
from models.tenancy.tables import LedgerEntry
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import let_write, make_number, wa, wallet
from tests.statements import ID_LIST, looked_up_by_index, statements_run
from tests.test_credits import replay_ledger

sqlite_only = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
URL = "/api/v1/messages"


@pytest.fixture
def customer(number) -> str:
    """A customer who wrote to alice's number a minute ago."""
    to = wa()
    let_write(number, to)
    return to


def send(client, persona, body, **headers):
    return client.simulate_post(URL, json=body, headers={**persona.headers, **headers})


def text_body(number, to, **extra) -> dict:
    return {"account_id": number.public_id, "to": to, "type": "text", "text": {"body": "Hola"}, **extra}


def error_of(response, status: int) -> dict:
    assert response.status_code == status, response.text
    return response.json["error"]


def test_a_message_is_accepted_queued_and_sent_in_the_background(client, alice, number, customer, sim):
    response = send(client, alice, text_body(number, customer, external_reference="ticket-7"))
    assert response.status_code == 202, response.text
    data = response.json["data"]
    assert data["id"].startswith("msg_")
    assert {k: data[k] for k in ("wam_id", "account_id", "to", "type", "status", "external_reference",
                                 "credits_reserved")} == {
        "wam_id": None, "account_id": number.public_id, "to": customer, "type": "text", "status": "queued",
        "external_reference": "ticket-7", "credits_reserved": 1}
    read = client.simulate_get(f"{URL}/{data['id']}", headers=alice.headers).json["data"]
    assert read["status"] == "sent" and read["wam_id"].startswith("wamid.")
    [accepted] = [item for item in sim.sent() if item["to"] == customer]
    assert (accepted["type"], accepted["biz_opaque_callback_data"]) == ("text", data["id"])
    assert [(e.type, e.amount) for e in LedgerEntry.select().where(LedgerEntry.tenant == alice.id)
            .order_by(LedgerEntry.id)] == [("manual_grant", 1000), ("reserve", -1), ("consume", -1)]
    sent = Event.get((Event.tenant == alice.id) & (Event.name == "message.sent")).payload
    assert {k: sent[k] for k in ("account_id", "campaign_id", "recipient", "external_contact_id", "wam_id",
                                 "status")} == {
        "account_id": number.public_id, "campaign_id": None, "recipient": customer, "external_contact_id": None,
        "wam_id": read["wam_id"], "status": "sent"}
    assert accounts.messages_sent_today(number.id) == 1


@sqlite_only
def test_prefer_wait_answers_with_the_outcome(client, alice, number, customer):
    response = send(client, alice, text_body(number, customer), Prefer="wait=5")
    assert response.status_code == 201, response.text
    assert response.json["data"]["status"] == "sent" and response.json["data"]["wam_id"]
    assert response.headers["Preference-Applied"] == "wait=5"


def test_prefer_wait_reports_a_rejection_as_502_and_releases_the_credit(client, alice, number):
    rejected = wa("0000")
    let_write(number, rejected)
    response = send(client, alice, text_body(number, rejected), Prefer="respond-async, wait=3")
    error = error_of(response, 502)
    assert error["code"] == "messaging_send_failed"
    assert error["details"]["message"]["status"] == "failed"
    assert error["details"]["error"]["code"] == "131026"
    assert (wallet(alice.id).balance, wallet(alice.id).reserved) == (1000, 0)
    assert replay_ledger(alice.id) == (1000, 0)
    failed = Event.get((Event.tenant == alice.id) & (Event.name == "message.failed")).payload
    assert failed["error"]["code"] == "131026" and failed["wam_id"] is None


@sqlite_only
def test_without_prefer_a_rejection_is_still_202(client, alice, number):
    rejected = wa("0000")
    let_write(number, rejected)
    response = send(client, alice, text_body(number, rejected))
    assert response.status_code == 202
    assert client.simulate_get(f"{URL}/{response.json['data']['id']}",
                               headers=alice.headers).json["data"]["status"] == "failed"


@sqlite_only
@pytest.mark.parametrize(("kind", "content", "expected"), [
    ("image", {"url": "https://cdn.example.test/a.png", "caption": "look"},
     {"link": "https://cdn.example.test/a.png", "caption": "look"}),
    ("video", {"media_id": "1234567890"}, {"id": "1234567890"}),
    ("audio", {"url": "https://cdn.example.test/a.ogg"}, {"link": "https://cdn.example.test/a.ogg"}),
    ("document", {"url": "https://cdn.example.test/a.pdf", "filename": "invoice.pdf", "caption": "your bill"},
     {"link": "https://cdn.example.test/a.pdf", "filename": "invoice.pdf", "caption": "your bill"}),
])
def test_media_messages_are_sent(client, alice, number, customer, kind, content, expected):
    response = send(client, alice, {"account_id": number.public_id, "to": customer, "type": kind, kind: content},
                    Prefer="wait=5")
    assert response.status_code == 201, response.text
    assert response.json["data"]["type"] == kind
    assert Message.get(Message.public_id == response.json["data"]["id"]).content == content


@sqlite_only
@pytest.mark.parametrize("interactive", [
    {"kind": "buttons", "body": "Pay now?", "header": "Reminder", "footer": "Reply below",
     "buttons": [{"id": "yes", "title": "Yes"}, {"id": "later", "title": "Later"}, {"id": "no", "title": "No"}]},
    {"kind": "list", "body": "Pick a plan", "button": "Plans",
     "sections": [{"title": "Monthly", "rows": [{"id": "m1", "title": "One", "description": "12 payments"}]},
                  {"rows": [{"id": f"r{n}", "title": f"Row {n}"} for n in range(10)]}]},
])
def test_interactive_messages_are_sent(client, alice, number, customer, interactive):
    response = send(client, alice, {"account_id": number.public_id, "to": customer, "type": "interactive",
                                    "interactive": interactive}, Prefer="wait=5")
    assert response.status_code == 201, response.text


def _buttons(n: int, title: str = "t") -> list[dict]:
    return [{"id": f"b{i}", "title": title} for i in range(n)]


def _rows(n: int, **fields) -> list[dict]:
    return [{"id": f"r{i}", "title": "row", **fields} for i in range(n)]


@sqlite_only
@pytest.mark.parametrize(("change", "field"), [
    ({"type": "sticker"}, "type"),
    ({"to": "5" * 33}, "to"),
    ({"account_id": "a" * 65}, "account_id"),
    ({"external_reference": "r" * 161}, "external_reference"),
    ({"text": {"body": "x" * 4097}}, "text.body"),
    ({"text": {"body": ""}}, "text.body"),
    ({"text": None}, "body"),
    ({"text": {"body": "hi"}, "image": {"url": "https://cdn.example.test/a.png"}}, "body"),
    ({"type": "image", "text": None, "image": {}}, "image"),
    ({"type": "image", "text": None, "image": {"url": "https://x.test/a.png", "media_id": "1"}}, "image"),
    ({"type": "image", "text": None, "image": {"url": "notaurl"}}, "image.url"),
    ({"type": "image", "text": None, "image": {"url": "https://x.test/" + "a" * 2000}}, "image.url"),
    ({"type": "image", "text": None, "image": {"media_id": "m" * 256}}, "image.media_id"),
    ({"type": "image", "text": None, "image": {"url": "https://x.test/a.png", "caption": "c" * 1025}}, "image.caption"),
    ({"type": "image", "text": None, "image": {"url": "https://x.test/a.png", "filename": "a.png"}}, "image.filename"),
    ({"type": "audio", "text": None, "audio": {"url": "https://x.test/a.ogg", "caption": "no"}}, "audio.caption"),
    ({"type": "document", "text": None, "document": {"url": "https://x.test/a.pdf", "filename": "f" * 256}},
     "document.filename"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "buttons", "body": "b",
                                                           "buttons": _buttons(4)}}, "interactive.buttons"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "buttons", "body": "b",
                                                           "buttons": _buttons(1, "t" * 21)}},
     "interactive.buttons.0.title"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "buttons", "body": "b",
                                                           "buttons": [{"id": "i" * 257, "title": "t"}]}},
     "interactive.buttons.0.id"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "buttons", "body": "b" * 1025,
                                                           "buttons": _buttons(1)}}, "interactive.body"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "buttons", "body": "b", "header": "h" * 61,
                                                           "buttons": _buttons(1)}}, "interactive.header"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "buttons", "body": "b", "footer": "f" * 61,
                                                           "buttons": _buttons(1)}}, "interactive.footer"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "buttons", "body": "b"}}, "interactive"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "carousel", "body": "b"}}, "interactive.kind"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "list", "body": "b", "button": "B",
                                                           "sections": [{"rows": _rows(1)}] * 11}},
     "interactive.sections"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "list", "body": "b", "button": "B",
                                                           "sections": [{"rows": []}]}},
     "interactive.sections.0.rows"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "list", "body": "b", "button": "B",
                                                           "sections": [{"rows": _rows(11)}]}},
     "interactive.sections.0.rows"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "list", "body": "b", "button": "B",
                                                           "sections": [{"title": "s" * 25, "rows": _rows(1)}]}},
     "interactive.sections.0.title"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "list", "body": "b", "button": "B",
                                                           "sections": [{"rows": [{"id": "r", "title": "t" * 25}]}]}},
     "interactive.sections.0.rows.0.title"),
    ({"type": "interactive", "text": None, "interactive": {
        "kind": "list", "body": "b", "button": "B",
        "sections": [{"rows": [{"id": "r", "title": "t", "description": "d" * 73}]}]}},
     "interactive.sections.0.rows.0.description"),
    ({"type": "interactive", "text": None, "interactive": {
        "kind": "list", "body": "b", "button": "B", "sections": [{"rows": [{"id": "i" * 201, "title": "t"}]}]}},
     "interactive.sections.0.rows.0.id"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "list", "body": "b", "button": "B" * 21,
                                                           "sections": [{"rows": _rows(1)}]}}, "interactive.button"),
    ({"type": "interactive", "text": None, "interactive": {"kind": "list", "body": "b",
                                                           "sections": [{"rows": _rows(1)}]}}, "interactive"),
    ({"unknown": True}, "unknown"),
])
def test_invalid_messages_get_the_validation_envelope(client, alice, number, customer, change, field):
    body = {**text_body(number, customer), **change}
    body = {key: value for key, value in body.items() if value is not None}
    error = error_of(send(client, alice, body), 422)
    assert error["code"] == "validation_failed"
    assert field in error["details"]["errors"], error["details"]
    assert wallet(alice.id).reserved == 0


@sqlite_only
@pytest.mark.parametrize("to", ["1234567", "1234567890123456", "+1 (234) 567"])
def test_a_number_with_too_few_or_too_many_digits_is_an_invalid_recipient(client, alice, number, to):
    assert error_of(send(client, alice, text_body(number, to)), 422)["code"] == "invalid_recipient"


@sqlite_only
def test_outside_the_24_hour_window_nothing_is_reserved(client, alice, number):
    error = error_of(send(client, alice, text_body(number, wa())), 422)
    assert error["code"] == "outside_24h_window"
    import datetime as dt

    from models.clock import utcnow

    stale = wa()
    let_write(number, stale, utcnow() - dt.timedelta(hours=25))
    assert error_of(send(client, alice, text_body(number, stale)), 422)["code"] == "outside_24h_window"
    assert LedgerEntry.select().where(LedgerEntry.type == "reserve").count() == 0
    assert Message.select().count() == 0


@sqlite_only
def test_the_to_number_is_normalized_before_the_window_check(client, alice, number):
    let_write(number, "5215550409090")
    response = send(client, alice, text_body(number, "+52 1 555 040 9090"))
    assert response.status_code == 202 and response.json["data"]["to"] == "5215550409090"


@sqlite_only
def test_the_number_must_be_ready_active_and_ours(client, alice, charlie, sim):
    to = wa()
    paused = make_number(alice.id, sim, status="paused")
    unready = make_number(alice.id, ready=False)
    theirs = make_number(charlie.id, sim)
    for account in (paused, unready, theirs):
        let_write(account, to)
    assert error_of(send(client, alice, text_body(paused, to)), 422)["code"] == "account_inactive"
    assert error_of(send(client, alice, text_body(unready, to)), 422)["code"] == "account_not_ready"
    assert error_of(send(client, alice, text_body(theirs, to)), 404)["code"] == "account_not_found"


@sqlite_only
def test_the_daily_limit_refuses_new_users(client, alice, sim):
    number = make_number(alice.id, sim, daily_limit=2)
    known, first, second = wa(), wa(), wa()
    for to in (known, first, second):
        let_write(number, to)
    accounts.record_business_sends(number.id, [known, wa()])
    error = error_of(send(client, alice, text_body(number, first)), 422)
    assert error["code"] == "daily_limit_reached"
    assert error["details"] == {"daily_limit": 2, "messages_sent_today": 2}
    # Someone already messaged today does not count again.
    assert send(client, alice, text_body(number, known)).status_code == 202


@sqlite_only
def test_credits_are_checked_before_queueing(client, alice, number, customer):
    credits.adjust(alice.id, -1000)
    assert error_of(send(client, alice, text_body(number, customer)), 422)["code"] == "insufficient_credits"
    credits.grant(alice.id, 5)
    credits.set_status(alice.id, "paused")
    assert error_of(send(client, alice, text_body(number, customer)), 422)["code"] == "wallet_paused"
    assert Message.select().count() == 0


@sqlite_only
def test_reading_a_message_needs_the_scope_and_ownership(client, alice, charlie, number, customer):
    data = send(client, alice, text_body(number, customer)).json["data"]
    assert client.simulate_get(f"{URL}/{data['id']}", headers=charlie.headers).status_code == 404
    assert client.simulate_get(f"{URL}/msg_unknown", headers=alice.headers).json["error"]["code"] == \
        "message_not_found"
    no_scope = alice.with_key(["campaigns:read"])
    assert client.simulate_get(f"{URL}/{data['id']}", headers=no_scope).status_code == 403
    assert client.simulate_post(URL, json=text_body(number, customer), headers=no_scope).status_code == 403


def test_a_message_read_answers_what_its_as_dict_gives_in_each_state(client, alice, number, customer, queue_only):
    """GET /messages/{id} reads only the columns it shows, with its number's id, in one statement:
    what `Message.as_dict` gives for the same message, in each state."""
    import datetime as dt

    at = dt.datetime(2026, 11, 28, 9, 30)  # a time written without its fraction
    states = ({}, {"status": "sent", "wam_id": "wamid.S", "sent_at": at, "external_reference": "crm-1"},
              {"status": "delivered", "wam_id": "wamid.D", "sent_at": at + dt.timedelta(microseconds=7)},
              {"status": "read", "wam_id": "wamid.R", "sent_at": at},
              {"status": "failed", "error_code": "131026", "last_error": "undeliverable", "created_at": at})
    for change in states:
        data = send(client, alice, text_body(number, customer)).json["data"]
        if change:
            Message.update(**change).where(Message.public_id == data["id"]).execute()
        expected = Message.get(Message.public_id == data["id"]).as_dict()
        assert client.simulate_get(f"{URL}/{data['id']}", headers=alice.headers).json == {"data": expected}, change


@sqlite_only
def test_a_throttled_message_is_retried_in_the_task(client, alice, number):
    slow = wa("0429")
    let_write(number, slow)
    response = send(client, alice, text_body(number, slow), Prefer="wait=5")
    assert response.status_code == 201, response.text
    assert Message.get(Message.public_id == response.json["data"]["id"]).attempts == 1


def test_only_a_failed_platform_call_counts_against_the_retry_limit(client, alice, number, customer):
    from messaging.errors import RetryablePlatformError, ThrottledError
    from models.sending import messages
    from models.sending.message_store import MessageStore

    # Stored but not handed to the queue: this test plays the engine.
    message = messages.create_message(alice.id, messages.MessageInput.model_validate(text_body(number, customer)))
    store = MessageStore()
    start = message.attempts

    def claim_and_answer(token: str, error) -> None:
        plans = {plan.account_id: plan for plan in store.plan()}
        [job] = store.claim({number.id: 1}, plans, token)
        job.error = error
        store.record([job])

    # Waiting for the number's pace, or a throttle, gives the attempt back.
    claim_and_answer("t1", ThrottledError("slow down", code=130429))
    assert Message.get_by_id(message.id).attempts == start
    # A platform error keeps it: MAX_RETRIES of them fail the message.
    claim_and_answer("t2", RetryablePlatformError("hiccup", code=131000))
    stored = Message.get_by_id(message.id)
    assert stored.attempts == start + 1 and stored.claim_token is None and stored.status == "queued"


@sqlite_only
def test_a_batch_of_messages_is_claimed_and_marked_started_by_key(client, alice, number):
    from models.sending import messages
    from models.sending.message_store import MessageStore

    # Stored but not handed to the queue: this test plays the engine. Without statistics SQLite
    # would walk every queued message by the status index to claim a batch and to mark it started.
    created = []
    for _ in range(6):
        to = wa()
        let_write(number, to)
        created.append(messages.create_message(alice.id, messages.MessageInput.model_validate(text_body(number, to))))
    store = MessageStore()
    plans = {plan.account_id: plan for plan in store.plan()}
    with statements_run() as ran:
        jobs = store.claim({number.id: len(created)}, plans, "t1")
        marked = store.start(jobs)
    assert marked == {message.id for message in created}
    assert len([sql for sql in ran if sql.startswith('UPDATE "message"') and ID_LIST.search(sql)]) == 2, ran
    assert looked_up_by_index(ran) == []


def test_a_message_whose_window_closed_while_it_waited_fails_unsent(client, alice, number, sim):
    import datetime as dt

    from jobs.sending import dispatch
    from models.clock import utcnow
    from models.numbers.tables import ContactWindow
    from models.sending import messages

    to = wa()
    let_write(number, to)
    # Stored while the window was open; the engine reaches it after the window closed.
    message = messages.create_message(alice.id, messages.MessageInput.model_validate(text_body(number, to)))
    ContactWindow.update(last_inbound_at=utcnow() - dt.timedelta(hours=25)).where(
        (ContactWindow.account == number.id) & (ContactWindow.wa_id == to)).execute()
    dispatch()
    stored = Message.get_by_id(message.id)
    assert (stored.status, stored.error_code, stored.wam_id) == ("failed", "outside_24h_window", None)
    assert [item for item in sim.sent() if item["to"] == to] == []
    assert (wallet(alice.id).balance, wallet(alice.id).reserved) == (1000, 0)
    assert replay_ledger(alice.id) == (1000, 0)
    failed = Event.get((Event.tenant == alice.id) & (Event.name == "message.failed")).payload
    assert failed["error"]["code"] == "outside_24h_window" and failed["message_id"] == message.public_id


def test_a_stuck_message_waits_only_for_a_batch_that_names_it(client, alice, number, customer, queue_only):
    import datetime as dt

    import orjson

    from models.clock import utcnow
    from models.inbox import batches
    from models.numbers.tables import CLAIM_TIMEOUT, PlatformWebhookBatch
    from models.sending import messages
    from models.sending.message_store import MessageStore
    from models.sending.recovery import recover_stuck
    from tests.accounts_fixtures import messages_value, notification

    other = wa()
    let_write(number, other)
    proven, lost = (messages.create_message(alice.id, messages.MessageInput.model_validate(text_body(number, to)))
                    for to in (customer, other))
    store = MessageStore()
    earlier = utcnow() - dt.timedelta(seconds=30)
    claimed = store.claim({number.id: 2}, {p.account_id: p for p in store.plan()}, "deadengine.1", now=earlier)
    assert len(claimed) == 2
    store.start(claimed, now=earlier)  # both on the wire when the engine died
    # The platform's `sent` for one of them, in a batch a worker was holding when it died.
    value = messages_value(number, statuses=[{"id": "wamid.MSGHELD", "status": "sent", "timestamp": str(int(
        earlier.replace(tzinfo=dt.UTC).timestamp())), "recipient_id": customer,
        "biz_opaque_callback_data": proven.public_id}])
    with batches.atomic():
        batch = batches.store_batch(orjson.dumps(notification(number.business_account_id, "messages", value)))
    assert batches.take(batch.id)

    assert recover_stuck() == 1
    assert (Message.get_by_id(lost.id).status, Message.get_by_id(lost.id).error_code) == ("failed", "send_unconfirmed")
    assert Message.get_by_id(proven.id).status == "queued"
    PlatformWebhookBatch.update(claimed_at=utcnow() - CLAIM_TIMEOUT - dt.timedelta(seconds=1)).where(
        PlatformWebhookBatch.id == batch.id).execute()
    assert batches.process_batch(batch.id).statuses == 1
    stored = Message.get_by_id(proven.id)
    assert (stored.status, stored.wam_id) == ("sent", "wamid.MSGHELD")
    assert [e.payload["message_id"] for e in Event.select().where(Event.name == "message.failed")] == [lost.public_id]
    assert wallet(alice.id).reserved == 0 and replay_ledger(alice.id)[1] == 0


def test_a_queued_message_fails_when_its_number_stops_before_the_send(client, alice, number, customer, sim,
                                                                    queue_only):
    """A message waits in the queue; its number is paused, or loses its connection, before the sending
    core plans it: it fails with the reason, its credit released, and nothing reaches the platform."""
    from jobs.sending import dispatch
    from models.numbers.tables import MessagingAccount

    unready = make_number(alice.id, sim)
    other = wa()
    let_write(unready, other)
    paused_id = send(client, alice, text_body(number, customer)).json["data"]["id"]
    unready_id = send(client, alice, text_body(unready, other)).json["data"]["id"]
    MessagingAccount.update(status="paused").where(MessagingAccount.id == number.id).execute()
    MessagingAccount.update(access_token=None).where(MessagingAccount.id == unready.id).execute()
    dispatch.call_local()
    failed = {row.public_id: (row.status, row.error_code) for row in Message.select()}
    assert failed == {paused_id: ("failed", "account_inactive"), unready_id: ("failed", "account_not_ready")}
    assert not [item for item in sim.sent() if item["to"] in (customer, other)]
    assert wallet(alice.id).reserved == 0
