"""The single-message store: queued single messages as the engine's work.

A message is claimed like a campaign recipient (a claim token set by a conditional UPDATE, rows
taken with SKIP LOCKED), paced by its number's schedule, sent by the same messenger and judged by
the same error policy. At claim the 24-hour customer window is checked again: a message whose
window closed while it waited fails `outside_24h_window` (its credit released), never sent.

Transactions keep the lock order of docs/reliability.md: message rows (ascending id), then
business sends, then wallets.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from models.clock import utcnow
from models.events.outbox import emit_rows
from models.numbers import accounts, platform_users
from models.numbers.accounts import record_business_sends_many
from models.numbers.graph import account_token
from models.numbers.tables import MessagingAccount
from models.sending import UNCONFIRMED, UNCONFIRMED_TEXT, work_arrived
from models.sending.messages import event_fields
from models.sending.messenger import Verdict, error_text, message_payload, pause_blocked_numbers, verdict
from models.sending.tables import Message
from models.sending.work import BatchResult, Job, NumberPlan, ids_by_claim_token
from models.store.db import (
    atomic,
    bound_datetime,
    execute,
    is_postgres,
    lock_rows,
    placeholders,
    unindexed,
    unindexed_field,
)
from models.store.prepared import Prepared
from models.tenancy import credits

# A batch of messages is looked up by id, never by the status index (`unindexed`).
_STATUS = unindexed('"status"')


class MessageStore:
    name = "message"

    def __init__(self):
        self.in_flight = 0  # messages claimed and unanswered at the last plan, anyone's

    # 1. The plan.

    def plan(self, now: dt.datetime | None = None) -> list[NumberPlan]:
        """Numbers with messages due; those of a number that is gone or paused fail."""
        now = now or utcnow()
        # Hand-written statements, as the campaigns' plan: every engine plans again whenever work
        # arrives, which under load is every single message.
        in_flight, due = 0, {}
        for account_id, claimed, count in execute(_MESSAGES_WAITING, ["queued", bound_datetime(now)]).fetchall():
            if claimed:
                in_flight += count
            else:
                due[account_id] = due.get(account_id, 0) + count
        self.in_flight = in_flight
        if not due:
            return []
        plans = []
        for number in accounts.number_states(list(due)).values():
            if not number.ready:
                self._fail_waiting(number.id, "account_not_ready", "the number is no longer connected", now)
            elif number.status != "active":
                self._fail_waiting(number.id, "account_inactive", "the number was paused before the send", now)
            else:
                plans.append(NumberPlan(number.id, number.tenant_id, number.public_id, number.mps or 1,
                                        due[number.id]))
        return plans

    def _fail_waiting(self, account_id: int, code: str, text: str, now: dt.datetime) -> None:
        waiting = [(row_id, None) for (row_id,) in execute(
            _DUE_IDS, (account_id, "queued", bound_datetime(now))).fetchall()]
        self._fail(waiting, code, text, now)

    def hold(self, plan: NumberPlan, reason: str) -> None:
        """Nothing to show: a waiting message stays `queued`."""

    # 2. Claims.

    def claim(self, grants: dict[int, int], plans: dict[int, NumberPlan], claim_token: str,
              now: dt.datetime | None = None) -> list[Job]:
        """Claim up to `grants[number]` due messages per number, oldest first, in one transaction;
        those whose window closed, or whose content cannot make a payload, then fail at once."""
        now = now or utcnow()
        due_ids = _OLDEST_DUE_IDS + (" FOR UPDATE SKIP LOCKED" if is_postgres() else "")
        bound_now = bound_datetime(now)
        with atomic():
            ids: list[int] = []
            for account_id, take in grants.items():
                ids += [row_id for (row_id,) in execute(due_ids, (account_id, "queued", bound_now, take)).fetchall()]
            if not ids:
                return []
            claimed = list(Message.update(claim_token=claim_token, claimed_at=now, send_started_at=None,
                                          attempts=Message.attempts + 1)
                           .where(Message.id.in_(ids) & (unindexed_field(Message.status) == "queued")
                                  & Message.claim_token.is_null())
                           .returning(Message).execute())
        # The rest once the claim has committed, outside the writers' turn: the rows are ours by
        # their claim token, and those that cannot go fail under it.
        numbers = {a.id: a for a in MessagingAccount.select().where(
            MessagingAccount.id.in_(list({m.account_id for m in claimed})))}
        open_windows = _open_windows(claimed, now)
        jobs: list[Job] = []
        unsendable: dict[int, tuple[str, str]] = {}  # message id -> (error code, text)
        for message in claimed:
            account = numbers[message.account_id]
            if (message.account_id, message.to) not in open_windows:
                unsendable[message.id] = ("outside_24h_window",
                                          "the customer's 24-hour window closed before the message could be sent")
                continue
            try:
                payload, token = message_payload(message), account_token(account)
            except (ValueError, KeyError) as error:
                unsendable[message.id] = ("invalid_message", str(error))
                continue
            jobs.append(Job(
                store=self.name, id=message.id, public_id=message.public_id, tenant_id=message.tenant_id,
                account_id=account.id, account_public_id=account.public_id, phone_id=account.phone_id,
                token=token, wa_id=message.to, throttled=message.throttled, retries=message.attempts - 1,
                payload=payload, claim_token=claim_token))
        if unsendable:
            # One transaction for all of them, each failed with its own error.
            self._fail([(row_id, claim_token) for row_id in unsendable], None, None, now, errors=unsendable)
        return jobs

    # 3. Sends started.

    def start(self, jobs: list[Job], now: dt.datetime | None = None) -> set[int]:
        """Mark these claims started, just before their platform calls (as the campaign store
        does); returns the ids marked."""
        now = now or utcnow()
        marked: set[int] = set()
        started_at = bound_datetime(now)
        with atomic():
            lock_rows(Message, [job.id for job in jobs])
            for token, ids in ids_by_claim_token([(job.id, job.claim_token) for job in jobs]).items():
                marked |= {row_id for (row_id,) in execute(
                    f'UPDATE "message" SET "send_started_at" = ? WHERE "id" IN ({placeholders(len(ids))}) '
                    f'AND {_STATUS} = ? AND "claim_token" = ? RETURNING "id"',
                    [started_at, *ids, "queued", token])}
        return marked

    # 4. Outcomes.

    def record(self, jobs: list[Job]) -> BatchResult:
        """Write a sent batch's outcomes, credit movements and events in one transaction."""
        result = BatchResult()
        now = utcnow()
        verdicts = {job.id: verdict(job) for job in jobs}
        with atomic():
            lock_rows(Message, [job.id for job in jobs if verdicts[job.id] is not Verdict.UNANSWERED])
            sent: list[tuple[Job, Message]] = []
            failed: list[tuple[Job, str]] = []
            for job in jobs:
                kind = verdicts[job.id]
                if kind is Verdict.ACCEPTED:
                    result.accepted_numbers.add(job.account_id)
                    sent += [(job, row) for row in _MARK_SENT.rows(job.id, job.claim_token, job.wam_id, now)]
                elif kind is Verdict.UNANSWERED:
                    # It may have been accepted: the status webhook (callback data) or recovery
                    # settles it; sending again could deliver it twice.
                    result.unanswered += 1
                    result.unanswered_numbers.add(job.account_id)
                elif kind in (Verdict.THROTTLED, Verdict.PAIR_THROTTLED, Verdict.RETRY, Verdict.SLOT_MISSED,
                              Verdict.ACCOUNT_BLOCKED):
                    result.retried += _give_back(job, kind, now)
                    if kind is Verdict.ACCOUNT_BLOCKED:
                        result.blocked[job.account_id] = error_text(job.error)
                    if kind in (Verdict.THROTTLED, Verdict.RETRY):
                        result.throttled_numbers.add(job.account_id)
                else:
                    failed.append((job, _failure_code(job.error, kind)))
            result.accepted = len(sent)
            record_business_sends_many({(job.account_id, job.wa_id) for job, _ in sent}, now)
            moves = [credits.Move(job.tenant_id, "consume", 1,
                                  {"messaging_account_id": job.account_id, "reference": job.public_id})
                     for job, _ in sent]
            emit_rows("message.sent", [(job.tenant_id, event_fields(row, job.account_public_id, "sent", now))
                                       for job, row in sent], now)
            result.failed = self._fail([(job.id, job.claim_token) for job, _ in failed], None, None, now,
                                       {job.id: (code, error_text(job.error)) for job, code in failed}, moves)
            pause_blocked_numbers(result.blocked)
        return result

    def settle(self, jobs: list[Job], result: BatchResult) -> None:
        """Nothing follows: a message is settled by its own record."""

    # 5. Failing, and recovery.

    def claims_before(self, when: dt.datetime) -> list[tuple[int, str | None, dt.datetime, bool]]:
        return [(row_id, token, claimed_at, started is not None) for row_id, token, claimed_at, started in
                Message.select(Message.id, Message.claim_token, Message.claimed_at, Message.send_started_at)
                .where((Message.status == "queued") & Message.claim_token.is_null(False)
                       & (Message.claimed_at < when)).order_by(Message.id).limit(5000).tuples()]

    def give_back_unstarted(self, claims: list[tuple[int, str | None]]) -> int:
        """Claims never started: due again, the claim's attempt given back, the credit still
        reserved, no event. Returns how many were still unstarted under that token."""
        returned = 0
        with atomic():
            lock_rows(Message, [row_id for row_id, _ in claims])
            for token, ids in ids_by_claim_token(claims).items():
                if token is None:
                    continue  # an unclaimed message is due already
                returned += (Message.update(claim_token=None, claimed_at=None, attempts=Message.attempts - 1)
                             .where(Message.id.in_(ids) & (unindexed_field(Message.status) == "queued")
                                    & Message.send_started_at.is_null() & (Message.claim_token == token))
                             .execute())
            if returned:
                work_arrived()
        return returned

    def fail_unconfirmed(self, claims: list[tuple[int, str | None]], now: dt.datetime) -> int:
        return self._fail(claims, UNCONFIRMED, UNCONFIRMED_TEXT, now)

    @staticmethod
    def _fail(claims: list[tuple[int, str | None]], code: str | None, text: str | None, now: dt.datetime,
              errors: dict[int, tuple[str, str]] | None = None, moves: list[credits.Move] | None = None) -> int:
        """Fail messages still queued under these claims (`None`: unclaimed), their credits
        released, in one transaction and the lock order: the message rows, then the wallets (with
        `moves`, the caller's own wallet movements, applied in the same pass)."""
        moves = list(moves or [])
        failed: list[Any] = []
        with atomic():
            lock_rows(Message, [row_id for row_id, _ in claims])
            for row_id, token in claims:
                row_code, row_text = (errors or {}).get(row_id, (code, text))
                condition = (Message.id == row_id) & (Message.status == "queued")
                condition &= Message.claim_token.is_null() if token is None else Message.claim_token == token
                changed = list(Message.update(status="failed", error_code=row_code[:32], last_error=row_text[:1000],
                                              failed_at=now, claim_token=None)
                               .where(condition).returning(Message).execute())
                failed += [(message, row_code, row_text) for message in changed]
            numbers = dict(MessagingAccount.select(MessagingAccount.id, MessagingAccount.public_id).where(
                MessagingAccount.id.in_(list({m.account_id for m, _, _ in failed}))).tuples()) if failed else {}
            moves += [credits.Move(m.tenant_id, "release", 1, {"messaging_account_id": m.account_id,
                                                               "reference": m.public_id,
                                                               "description": row_text[:1000]})
                      for m, _, row_text in failed]
            emit_rows("message.failed", [
                (m.tenant_id, event_fields(m, numbers[m.account_id], "failed", now,
                                           {"code": row_code, "message": row_text}))
                for m, row_code, row_text in failed], now)
            credits.apply_moves(moves)
        return len(failed)


def _failure_code(error, kind: Verdict) -> str:
    if kind is Verdict.DISCONNECTED:
        return "account_disconnected"
    if error.code is not None:
        return str(error.code)
    return "platform_unavailable" if error.retryable else "rejected"


# A message the platform took, recorded: one statement per message, whose text is built once.
_MARK_SENT = Prepared(lambda row_id, claim_token, wam_id, now: Message.update(
    status="sent", wam_id=wam_id, sent_at=now, claim_token=None)
    .where((Message.id == row_id) & (Message.status == "queued") & (Message.claim_token == claim_token))
    .returning(Message), -7_000_000_001, "\0claim_token", "\0wam_id", dt.datetime(1901, 1, 1, 0, 0, 1))

# Queued messages per number: claimed (in flight), and unclaimed and due by the second argument.
_MESSAGES_WAITING = (
    'SELECT "account_id", "claim_token" IS NOT NULL, COUNT(*) FROM "message" WHERE "status" = ? '
    'AND ("claim_token" IS NOT NULL OR "not_before" IS NULL OR "not_before" <= ?) '
    'GROUP BY "account_id", "claim_token" IS NOT NULL')


# One number's due messages (parameters: the number, "queued", now): hand-written, since a claim
# runs it for every number inside the writers' turn. A claim takes the oldest first (SKIP LOCKED
# added on PostgreSQL, as `skip_locked` does).
_DUE_IDS = ('SELECT "id" FROM "message" WHERE "account_id" = ? AND "status" = ? AND "claim_token" IS NULL '
            'AND ("not_before" IS NULL OR "not_before" <= ?)')
_OLDEST_DUE_IDS = _DUE_IDS + ' ORDER BY "id" LIMIT ?'


def _open_windows(messages: list[Message], now: dt.datetime) -> set[tuple[int, str]]:
    by_account: dict[int, set[str]] = defaultdict(set)
    for message in messages:
        by_account[message.account_id].add(message.to)
    return {(account_id, key) for account_id, keys in by_account.items()
            for key in platform_users.open_windows(account_id, sorted(keys), now)}


def _give_back(job: Job, kind: Verdict, now: dt.datetime) -> int:
    """Back to the queue. Only a failed platform call keeps its attempt: waiting for the number's
    pace or a throttle is not a try, and a busy number would otherwise use up a message's retries
    before the platform ever answered it."""
    changes: dict[Any, Any] = {Message.claim_token: None, Message.claimed_at: None, Message.send_started_at: None,
                               Message.last_error: error_text(job.error)}
    if kind is Verdict.RETRY:
        changes[Message.not_before] = now + dt.timedelta(seconds=2 ** (job.retries + 1))
    else:
        changes[Message.attempts] = Message.attempts - 1
        if kind is Verdict.PAIR_THROTTLED:
            changes[Message.throttled] = Message.throttled + 1
            changes[Message.not_before] = now + dt.timedelta(seconds=4 ** (job.throttled + 1))
    return Message.update(changes).where(
        (Message.id == job.id) & (Message.status == "queued") & (Message.claim_token == job.claim_token)).execute()

