"""The campaign dispatch engine: claim recipients, pace every number, send, record.

The engine sits behind two small interfaces (the shape of listmonk's manager):

- a `store` (`DatabaseStore`): which numbers have work, claiming recipients, recording outcomes;
- a `messenger` (`GraphMessenger`): how one message goes out (the Graph client and the payload
  builders of `messaging/`).

and paces with the shared counter store (`models.db.counters()`: each number's schedule of send
slots, in the database or in Redis), so every consumer process and host takes from the same one.

One engine runs per worker process, inside a queue task (jobs/campaigns.py). It works in ticks:

1. Every second, `store.plan()` lists the numbers with active campaigns: held ones (number or
   wallet paused, daily limit reached) are marked `pending`, those whose number is gone are
   failed, and the rest report how many recipients are due.
2. Every tick (0.2 s) it asks the pacer, in one call, for send slots per number (one every
   1.05 / `mps` seconds, models/counters.py), sharing the engine's send capacity first
   between tenants, then between a tenant's numbers (water-filling, so a tenant with fifty
   numbers does not crowd out a tenant with one).
3. It claims that many recipients per number in one transaction, split evenly between the
   number's campaigns (so one big campaign does not starve a small one): a conditional UPDATE
   pending -> queued with a claim token `<engine id>.<n>` and a timestamp.
4. The tick's recipients are one batch: each sent at its slot on the send pool (every HTTP call
   is bounded by the client's timeout; one that missed its slot goes back to `pending` unsent),
   then recorded in one transaction: accepted -> `sent` with
   the credit consumed and `message.sent`; permanent errors -> `failed` with the credit released
   and `message.failed`; throttling -> back to `pending` (not a failure) while the number's
   schedule is held; a lost answer -> left `queued` for the status webhooks to settle.
5. Campaigns with nothing pending or queued complete (`campaign.completed`).

A recipient is never sent twice: it is handed to the platform only by the engine that claimed
it, and a claim is only ever given up by `recover_stuck` -- which fails the recipient (releasing
its credit) rather than sending again, once its engine is known dead (no heartbeat) and the
platform has had time to report it through a status webhook.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import logging
import math
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from peewee import Case, DatabaseError, InterfaceError, OperationalError, fn
from redis.exceptions import RedisError

from messaging.errors import PlatformError, PlatformUnavailableError, ThrottledError
from messaging.payloads import template_message
from models import accounts
from models.accounts import BusinessInitiated, MessagingAccount
from models.campaigns import (
    ACTIVE_STATUSES,
    Campaign,
    CampaignRecipient,
    case_by_id,
    emit_rows,
    fail_campaign,
    finish_if_done,
    message_event,
    move_credits_many,
    placeholders,
    public_ids,
    run_sql,
)
from models.clock import utcnow
from models.counters import slot_interval
from models.credits import Wallet
from models.db import atomic, connection, counters, db, skip_locked
from models.slot_executor import SlotExecutor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """The engine's knobs, with their defaults and why."""

    tick: float = 0.2  # seconds between claims; each claimed send still goes out at its own slot
    refresh: float = 1.0  # seconds between plans (new campaigns, holds, due recipients)
    send_threads: int = 32  # concurrent platform calls per engine
    max_in_flight: int = 1200  # recipients claimed and not yet recorded, per engine (backpressure)
    batch_threads: int = 6  # batches sent and recorded at once
    burst_seconds: float = 0.5  # pacing grants send slots up to this many seconds ahead
    heartbeat_ttl: float = 10.0  # an engine that has not beaten for this long is dead
    recover_every: float = 5.0
    session: float | None = 30.0  # a run ends after this long (the task re-queues itself)
    linger: float = 5.0  # an idle engine waits this long for new work before ending


# How long a claim may stay unanswered before `recover_stuck` settles it. A live engine answers
# within the client's timeout (13 s) plus one transaction; a dead engine's claims get a grace
# period for the platform's status webhooks to name them.
DEAD_ENGINE_GRACE = dt.timedelta(seconds=15)
STUCK_AFTER = dt.timedelta(minutes=2)
# Platform webhooks received this long ago and not yet processed are a backlog: the evidence for a
# claim may be in it, so recovery waits for it to drain.
WEBHOOK_BACKLOG = dt.timedelta(seconds=3)
UNCONFIRMED = "send_unconfirmed"

RECORD_ATTEMPTS = 4
MAX_RETRIES = 5  # transient platform errors per recipient before it fails
MAX_PAIR_THROTTLES = 5  # 131056 waits: 4, 16, 64, 256, 1024 s
MAX_THROTTLE_HOLD = 16.0  # seconds a number's schedule is held after repeated 130429
LONG_HOLD = 8.0  # a throttle hold this long marks the number's campaigns `pending`
UNANSWERED_HOLD = 15.0  # seconds a number rests after a send got no answer (past the client's timeout)
# A send whose turn comes this long after its pacing slot (the process stalled) is not sent: late,
# it would bunch with the sends after it and overshoot the cap. It goes back to `pending`.
LATE_SEND = 0.05

# The number cannot send any more: expired or revoked token (190), permissions (10, 200),
# account locked (131031), number deregistered (133010), access denied (131005).
DISCONNECTED_CODES = frozenset({10, 190, 200, 131005, 131031, 133010})
# The template itself is refused: every recipient would fail the same way.
TEMPLATE_CODES = frozenset({132000, 132001, 132005, 132007, 132012, 132015, 132016})


def bucket_key(account_id: int) -> str:
    return f"mps:{account_id}"


def engine_key(engine_id: str) -> str:
    return f"engine:{engine_id}"


# Units of work.


@dataclass
class Job:
    """One claimed recipient, with everything needed to send it and to record the outcome."""

    id: int
    public_id: str
    campaign_id: int
    campaign_public_id: str
    tenant_id: int
    account_id: int
    account_public_id: str
    phone_id: str
    token: str
    wa_id: str
    external_contact_id: str | None
    throttled: int
    retries: int
    payload: dict[str, Any]
    claim_token: str
    wam_id: str | None = None
    error: PlatformError | None = None
    send_at: float = 0.0  # time.monotonic() of the slot pacing granted: never sent before it


@dataclass
class NumberPlan:
    account_id: int
    tenant_id: int
    public_id: str
    mps: int
    campaigns: list[int]
    due: int  # recipients claimable now
    allowance: int | None  # new users the daily limit still allows (None: unlimited)


@dataclass
class BatchResult:
    accepted: int = 0
    failed: int = 0
    retried: int = 0
    unanswered: int = 0
    throttled_numbers: set[int] = field(default_factory=set)
    unanswered_numbers: set[int] = field(default_factory=set)  # sends whose answer was lost
    accepted_numbers: set[int] = field(default_factory=set)
    disconnected: dict[int, str] = field(default_factory=dict)  # campaign id -> reason
    template_refused: dict[int, str] = field(default_factory=dict)
    campaigns: set[int] = field(default_factory=set)


class SlotMissed(ThrottledError):
    """The engine held a send back itself: it fell too far behind its pacing slot."""


class Messenger(Protocol):
    def send(self, job: Job) -> str:
        """Hand one message to the platform; returns its wamid or raises PlatformError."""


class Pacer(Protocol):
    def take_tokens(self, requests: dict[str, tuple[float, float, int]]) -> dict[str, tuple[int, float]]: ...
    def hold_tokens(self, key: str, rate: float, seconds: float) -> None: ...
    def beat(self, key: str, ttl_seconds: float) -> None: ...
    def alive(self, keys: list[str]) -> set[str]: ...


# The messenger: the Graph client through the payload builders.


def graph_client():
    """The process's pooled Graph client (models.platform owns the factory)."""
    from models.platform import graph_client as factory

    return factory()


def account_token(account: MessagingAccount) -> str:
    from models.platform import account_token as decrypt_token

    return decrypt_token(account)


class GraphMessenger:
    def __init__(self, client_factory: Callable[[], Any] = graph_client):
        self.client_factory = client_factory

    def send(self, job: Job) -> str:
        return self.client_factory().send_message(job.phone_id, job.token, job.payload)


def template_payload(campaign: Campaign, wa_id: str, variables: list[str] | None, callback: str) -> dict:
    header = {"type": campaign.header_type, "link": campaign.header_url} if campaign.header_type else None
    return template_message(wa_id, campaign.template_name, campaign.template_language, variables or (),
                            header=header, callback_data=callback)


# The store.


class DatabaseStore:
    """Recipients come from the database and their outcomes go back to it."""

    def __init__(self):
        self._tokens: dict[tuple[int, str], str] = {}  # (account id, ciphertext) -> token
        self._campaign_cache: dict[int, Campaign] = {}
        self.in_flight = 0  # recipients `queued` in active campaigns at the last plan, anyone's

    def _token(self, account: MessagingAccount) -> str:
        key = (account.id, account.access_token)
        if key not in self._tokens:
            self._tokens[key] = account_token(account)
        return self._tokens[key]

    # 1. The plan.

    def plan(self, now: dt.datetime | None = None) -> list[NumberPlan]:
        """Numbers with active campaigns and what they may send now; holds, resumes and fails."""
        now = now or utcnow()
        rows = list(Campaign.select(Campaign.id, Campaign.tenant, Campaign.account, Campaign.status,
                                    Campaign.hold_reason, Wallet.status.alias("wallet_status"))
                    .join(Wallet, on=(Wallet.tenant == Campaign.tenant))
                    .where(Campaign.status.in_(ACTIVE_STATUSES)).order_by(Campaign.id).objects())
        if not rows:
            self.in_flight = 0
            return []
        R = CampaignRecipient
        self.in_flight = R.select().where(R.campaign.in_([row.id for row in rows]) & (R.status == "queued")).count()
        by_account: dict[int, list] = defaultdict(list)
        for row in rows:
            by_account[row.account_id].append(row)
        numbers = {a.id: a for a in MessagingAccount.select().where(MessagingAccount.id.in_(list(by_account)))}
        limited = [a.id for a in numbers.values() if a.daily_limit is not None]
        sent_today = accounts.messages_sent_today_by_account(limited, now) if limited else {}
        due = self._due(rows, now)
        plans: list[NumberPlan] = []
        holds: dict[str, list[int]] = defaultdict(list)
        for account_id, campaigns in by_account.items():
            account = numbers[account_id]
            ids = [c.id for c in campaigns]
            if not account.ready:
                for campaign_id in ids:
                    fail_campaign(campaign_id, "account_disconnected", "the number is no longer connected")
                continue
            if account.status != "active":
                holds["account_paused"] += ids
                continue
            if campaigns[0].wallet_status != "active":
                holds["wallet_paused"] += ids
                continue
            allowance = None
            if account.daily_limit is not None:
                allowance = account.daily_limit - sent_today.get(account_id, 0)
                if allowance <= 0:
                    # Recipients beyond the limit wait; the plan resumes them as the moving
                    # 24-hour window frees up (and a periodic task re-queues held campaigns).
                    holds["daily_limit"] += ids
                    continue
            waiting = sum(due.get(campaign_id, 0) for campaign_id in ids)
            if not waiting:
                # Nothing due: finished, or everything in flight or waiting for a retry time.
                finish_if_done(ids)
                continue
            plans.append(NumberPlan(account_id, account.tenant_id, account.public_id, account.mps or 1,
                                    [c for c in ids if due.get(c)], waiting, allowance))
        for reason, ids in holds.items():
            self.hold(ids, reason)
        return plans

    @staticmethod
    def _due(rows: list, now: dt.datetime) -> dict[int, int]:
        R = CampaignRecipient
        query = (R.select(R.campaign, fn.COUNT(R.id))
                 .where(R.campaign.in_([row.id for row in rows]) & (R.status == "pending")
                        & (R.not_before.is_null() | (R.not_before <= now)))
                 .group_by(R.campaign).tuples())
        return dict(query)

    def hold(self, campaign_ids: list[int], reason: str) -> None:
        """Mark campaigns `pending` while their number cannot send; the next claim resumes them."""
        if campaign_ids:
            (Campaign.update(status="pending", hold_reason=reason)
             .where(Campaign.id.in_(campaign_ids) & Campaign.status.in_(ACTIVE_STATUSES)
                    & ((Campaign.status != "pending") | (Campaign.hold_reason != reason)
                       | Campaign.hold_reason.is_null()))
             .execute())

    # 2. Claims.

    def claim(self, grants: dict[int, int], plans: dict[int, NumberPlan], claim_token: str,
              now: dt.datetime | None = None) -> list[Job]:
        """Claim up to `grants[account]` due recipients per number, in one transaction.

        A number's share is split evenly between its campaigns; what one campaign cannot use goes
        to the others. The campaign rows move to `processing` first, with a conditional UPDATE that
        a concurrent cancel also makes: whichever commits first wins, so a cancelled campaign is
        never claimed from. However many numbers, this is a handful of statements.
        """
        now = now or utcnow()
        with atomic():
            campaign_ids = [c for account_id in grants for c in plans[account_id].campaigns]
            # Only campaigns changing state are written (a row lock each): a campaign already
            # `processing` is left alone, so concurrent claims do not queue on its row.
            (Campaign.update(status="processing", hold_reason=None, started_at=fn.COALESCE(Campaign.started_at, now))
             .where(Campaign.id.in_(campaign_ids) & Campaign.status.in_(("queued", "pending"))).execute())
            started = {row_id for (row_id,) in Campaign.select(Campaign.id).where(
                Campaign.id.in_(campaign_ids) & (Campaign.status == "processing")).tuples()}
            if not started:
                return []
            campaigns = self._campaign_rows(started)
            numbers = {a.id: a for a in MessagingAccount.select().where(MessagingAccount.id.in_(list(grants)))}
            wanted = {account_id: granted for account_id, granted in grants.items()}
            live = {account_id: [c for c in plans[account_id].campaigns if c in started] for account_id in grants}
            rows: list[tuple] = []
            limited = [a for a in grants if plans[a].allowance is not None]
            for account_id in limited:
                ids = []
                for campaign_id in live[account_id]:
                    take = wanted[account_id] - len(ids)
                    if take > 0:
                        ids += self._pick_limited(campaign_id, take, plans[account_id], account_id, now)
                marked = self._mark(ids, claim_token, now)
                plans[account_id].allowance -= len({row[3] for row in marked})
                rows += marked
            open_numbers = {a: live[a] for a in grants if a not in limited and live[a]}
            for _round in range(3):
                takes = _split(open_numbers, wanted)
                if not takes:
                    break
                marked = self._mark(self._pick(takes, now), claim_token, now)
                rows += marked
                got: dict[int, int] = defaultdict(int)
                for row in marked:
                    got[row[2]] += 1
                # Campaigns that gave all they were asked for may have more: they share what is left.
                still = {}
                for account_id, ids in open_numbers.items():
                    wanted[account_id] -= sum(got[c] for c in ids)
                    fuller = [c for c in ids if got[c] == dict(takes).get(c, 0) and got[c] > 0]
                    if wanted[account_id] > 0 and fuller:
                        still[account_id] = fuller
                open_numbers = still
            jobs: list[Job] = []
            for row_id, public_id, campaign_id, wa_id, contact, variables, throttled, retries in rows:
                campaign = campaigns[campaign_id]
                account = numbers[campaign.account_id]
                variables = orjson.loads(variables) if isinstance(variables, (str, bytes)) else variables
                jobs.append(Job(
                    id=row_id, public_id=public_id, campaign_id=campaign_id, campaign_public_id=campaign.public_id,
                    tenant_id=campaign.tenant_id, account_id=account.id, account_public_id=account.public_id,
                    phone_id=account.phone_id, token=self._token(account), wa_id=wa_id, external_contact_id=contact,
                    throttled=throttled, retries=retries,
                    payload=template_payload(campaign, wa_id, variables, public_id), claim_token=claim_token))
        return jobs

    def _campaign_rows(self, ids) -> dict[int, Campaign]:
        """Campaign rows for building payloads; what is read from them never changes, so they are kept."""
        missing = [campaign_id for campaign_id in ids if campaign_id not in self._campaign_cache]
        if missing:
            for campaign in Campaign.select().where(Campaign.id.in_(missing)):
                self._campaign_cache[campaign.id] = campaign
        return self._campaign_cache

    @staticmethod
    def _pick_template() -> str:
        """One campaign's due recipients, oldest first, `LIMIT n`: the SQL of the peewee query,
        built once per engine kind (row locks with SKIP LOCKED where the engine has them)."""
        kind = type(db.obj)
        if kind not in _PICK_SQL:
            R = CampaignRecipient
            query = skip_locked(R.select(R.id).where(
                (R.campaign == 0) & (R.status == "pending") & (R.not_before.is_null() | (R.not_before <= utcnow())))
                .order_by(R.id).limit(1))
            sql, _params = query.sql()  # params: campaign id, status, now, limit
            _PICK_SQL[kind] = sql.replace(db.obj.param, "?") if db.obj.param != "?" else sql
        return _PICK_SQL[kind]

    def _pick(self, takes: list[tuple[int, int]], now: dt.datetime) -> list[int]:
        """The ids of up to `n` due recipients of each `(campaign, n)`, in one statement."""
        template = self._pick_template()
        parts, params = [], []
        for index, (campaign_id, take) in enumerate(takes):
            parts.append(f"SELECT c{index}.id FROM ({template}) AS c{index}")
            params += [campaign_id, "pending", now, take]
        return [row[0] for row in run_sql(" UNION ALL ".join(parts), params).fetchall()]

    def _pick_limited(self, campaign_id: int, take: int, plan: NumberPlan, account_id: int,
                      now: dt.datetime) -> list[int]:
        """Under a daily limit: users already messaged today freely, new ones while it allows."""
        R = CampaignRecipient
        due = ((R.campaign == campaign_id) & (R.status == "pending")
               & (R.not_before.is_null() | (R.not_before <= now)))
        candidates = list(skip_locked(R.select(R.id, R.wa_id).where(due).order_by(R.id).limit(take * 4)).tuples())
        known = accounts.recently_messaged(account_id, list({wa_id for _, wa_id in candidates}), utcnow())
        picked, new_users = [], set()
        for row_id, wa_id in candidates:
            if wa_id not in known and wa_id not in new_users:
                if len(new_users) >= max(0, plan.allowance or 0):
                    continue
                new_users.add(wa_id)
            picked.append(row_id)
            if len(picked) >= take:
                break
        return picked

    @staticmethod
    def _mark(ids: list[int], claim_token: str, now: dt.datetime) -> list[tuple]:
        """pending -> queued for these ids (those still pending), with the claim; returns what a job needs."""
        table = CampaignRecipient._meta.table_name
        rows: list[tuple] = []
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start:start + CHUNK]
            rows += run_sql(
                f'UPDATE "{table}" SET status = ?, claim_token = ?, claimed_at = ?, attempts = attempts + 1, '
                f"last_error = NULL WHERE id IN ({placeholders(len(chunk))}) AND status = ? "
                "RETURNING id, public_id, campaign_id, wa_id, external_contact_id, vars, throttled, retries",
                ["queued", claim_token, now, *chunk, "pending"]).fetchall()
        return rows

    # 3. Outcomes.

    def record(self, jobs: list[Job]) -> BatchResult:
        """Write a sent batch's outcomes, credit movements and events in one transaction."""
        result = BatchResult(campaigns={job.campaign_id for job in jobs})
        accepted, failed, retry = [], [], []
        for job in jobs:
            error = job.error
            if error is None:
                accepted.append(job)
                result.accepted_numbers.add(job.account_id)
            elif isinstance(error, PlatformUnavailableError) and error.ambiguous:
                result.unanswered += 1  # may have been accepted: only a status webhook can tell
                result.unanswered_numbers.add(job.account_id)
            elif isinstance(error, SlotMissed):
                retry.append(job)  # never sent: pending again, to take a fresh slot; nothing held
            elif isinstance(error, ThrottledError):
                if error.pair_rate_limited and job.throttled + 1 > MAX_PAIR_THROTTLES:
                    failed.append(job)
                else:
                    retry.append(job)
                    if not error.pair_rate_limited:
                        result.throttled_numbers.add(job.account_id)
            elif error.retryable:
                (retry if job.retries + 1 <= MAX_RETRIES else failed).append(job)
                result.throttled_numbers.add(job.account_id)  # the platform struggles: slow down too
            else:
                failed.append(job)
                if error.code in DISCONNECTED_CODES or _object_gone(error):
                    result.disconnected[job.campaign_id] = str(error)
                elif error.code in TEMPLATE_CODES:
                    result.template_refused[job.campaign_id] = str(error)
        now = utcnow()
        with atomic():
            result.accepted = self._record_accepted(accepted, now)
            result.failed = self._record_failed(failed, now)
            result.retried = self._record_retry(retry, now)
        return result

    def _record_accepted(self, jobs: list[Job], now: dt.datetime) -> int:
        if not jobs:
            return 0
        by_id = {job.id: job for job in jobs}
        moved: list[Job] = []
        table = CampaignRecipient._meta.table_name
        for token, group in _by_token(jobs).items():
            for start in range(0, len(group), CHUNK):
                chunk = group[start:start + CHUNK]
                ids = [job.id for job in chunk]
                wam_sql, wam_params = case_by_id("wam_id", [(job.id, job.wam_id) for job in chunk])
                msg_sql, msg_params = case_by_id("message_id", list(zip(ids, public_ids("msg_", len(ids)),
                                                                        strict=True)))
                # Only rows still queued under this claim move: a row a status webhook settled first
                # (and charged) is left alone, so nothing is consumed twice.
                query = (f'UPDATE "{table}" SET status = ?, sent_at = ?, claim_token = NULL, last_error = NULL, '
                         f"error_code = NULL, {wam_sql}, {msg_sql} "
                         f"WHERE id IN ({placeholders(len(ids))}) AND status = ? AND claim_token = ? RETURNING id")
                returned = run_sql(query, ["sent", now, *wam_params, *msg_params, *ids, "queued", token]).fetchall()
                moved += [by_id[row[0]] for row in returned]
        self._consume(moved, now)
        return len(moved)

    def _consume(self, jobs: list[Job], now: dt.datetime) -> None:
        if not jobs:
            return
        per_campaign: dict[int, list[Job]] = defaultdict(list)
        for job in jobs:
            per_campaign[job.campaign_id].append(job)
        record_business_sends({(job.account_id, job.wa_id) for job in jobs}, now)
        emit_rows("message.sent", [(job.tenant_id, message_event(job.campaign_public_id, job.account_public_id,
                                                                  job, "sent", now)) for job in jobs], now)
        # Last, so the campaign and wallet rows (shared with every other batch) are held briefly.
        move_credits_many({campaign_id: {"consume": len(group)} for campaign_id, group in per_campaign.items()})

    def _record_failed(self, jobs: list[Job], now: dt.datetime) -> int:
        if not jobs:
            return 0
        by_id = {job.id: job for job in jobs}
        moved: list[Job] = []
        table = CampaignRecipient._meta.table_name
        for token, group in _by_token(jobs).items():
            for start in range(0, len(group), CHUNK):
                chunk = group[start:start + CHUNK]
                ids = [job.id for job in chunk]
                code_sql, code_params = case_by_id("error_code", [(j.id, _code(j.error)[:32]) for j in chunk])
                text_sql, text_params = case_by_id("last_error", [(j.id, _message(j.error)) for j in chunk])
                query = (f'UPDATE "{table}" SET status = ?, failed_at = ?, claim_token = NULL, {code_sql}, '
                         f"{text_sql} WHERE id IN ({placeholders(len(ids))}) AND status = ? AND claim_token = ? "
                         "RETURNING id")
                returned = run_sql(query, ["failed", now, *code_params, *text_params, *ids, "queued",
                                           token]).fetchall()
                moved += [by_id[row[0]] for row in returned]
        release_failed(moved, now, lambda job: {"code": _code(job.error), "message": _message(job.error)})
        return len(moved)

    def _record_retry(self, jobs: list[Job], now: dt.datetime) -> int:
        """Give throttled and transiently failed recipients back to the queue (not failures)."""
        if not jobs:
            return 0
        R = CampaignRecipient
        changed = 0
        for token, group in _by_token(jobs).items():
            number_wide = [j for j in group if isinstance(j.error, ThrottledError) and not j.error.pair_rate_limited]
            pair = [j for j in group if isinstance(j.error, ThrottledError) and j.error.pair_rate_limited]
            transient = [j for j in group if not isinstance(j.error, ThrottledError)]
            kinds = (
                # The whole number is throttled (its schedule is held), or the send missed its slot:
                # the recipient is due again, for a new slot.
                (number_wide, {}),
                # Too many messages to this user: only this recipient waits, 4^X seconds.
                (pair, {R.throttled: R.throttled + 1, R.not_before: Case(R.id, [
                    (j.id, now + dt.timedelta(seconds=4 ** (j.throttled + 1))) for j in pair])}),
                # A platform hiccup: back off 2, 4, 8... seconds, a bounded number of times.
                (transient, {R.retries: R.retries + 1, R.not_before: Case(R.id, [
                    (j.id, now + dt.timedelta(seconds=2 ** (j.retries + 1))) for j in transient])}),
            )
            for chosen, extra in kinds:
                if not chosen:
                    continue
                ids = [j.id for j in chosen]
                changes = {R.status: "pending", R.claim_token: None, R.claimed_at: None,
                           R.last_error: Case(R.id, [(j.id, _message(j.error)) for j in chosen]), **extra}
                changed += (R.update(changes)
                            .where(R.id.in_(ids) & (R.status == "queued") & (R.claim_token == token)).execute())
        return changed

    def finish(self, campaign_ids: set[int]) -> None:
        finish_if_done(campaign_ids)

    def fail(self, campaign_id: int, code: str, message: str) -> None:
        fail_campaign(campaign_id, code, message)


_PICK_SQL: dict[type, str] = {}
CHUNK = 400  # rows per hot statement: a few parameters each, well under SQLite's limit


def _split(numbers: dict[int, list[int]], wanted: dict[int, int]) -> list[tuple[int, int]]:
    """Each number's wanted count split evenly between its campaigns: `(campaign, n)` pairs."""
    takes = []
    for account_id, campaign_ids in numbers.items():
        count = wanted[account_id]
        if count <= 0 or not campaign_ids:
            continue
        base, extra = divmod(count, len(campaign_ids))
        for index, campaign_id in enumerate(campaign_ids):
            take = base + (1 if index < extra else 0)
            if take:
                takes.append((campaign_id, take))
    return takes


def record_business_sends(pairs: set[tuple[int, str]], at: dt.datetime) -> None:
    """`models.accounts.record_business_sends` for many numbers in one statement per chunk: the
    same upsert of (number, user) -> last sent, which the daily limit counts."""
    table = BusinessInitiated._meta.table_name
    rows = sorted(pairs)
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start:start + CHUNK]
        params: list = []
        for account_id, wa_id in chunk:
            params += [account_id, wa_id, at]
        run_sql(f'INSERT INTO "{table}" (account_id, wa_id, last_sent_at) VALUES {placeholders(len(chunk), 3)} '
                "ON CONFLICT (account_id, wa_id) DO UPDATE SET last_sent_at = excluded.last_sent_at", params)


def release_failed(jobs: list, now: dt.datetime, error_of: Callable[[Any], dict]) -> None:
    """Credits and events for recipients that failed before reaching the platform (`jobs` have
    campaign ids and the recipient's fields); call inside the transaction that failed them."""
    if not jobs:
        return
    per_campaign: dict[int, list] = defaultdict(list)
    for job in jobs:
        per_campaign[job.campaign_id].append(job)
    campaigns = {c.id: c for c in Campaign.select().where(Campaign.id.in_(list(per_campaign)))}
    account_ids = {c.account_id for c in campaigns.values()}
    account_public = dict(MessagingAccount.select(MessagingAccount.id, MessagingAccount.public_id)
                          .where(MessagingAccount.id.in_(list(account_ids))).tuples())
    items = []
    for campaign_id, group in per_campaign.items():
        campaign = campaigns[campaign_id]
        items += [(campaign.tenant_id, message_event(campaign.public_id, account_public[campaign.account_id], job,
                                                     "failed", now, error_of(job))) for job in group]
    move_credits_many({campaign_id: {"release": len(group)} for campaign_id, group in per_campaign.items()},
                      description=error_of(jobs[0])["message"])
    emit_rows("message.failed", items, now)


def _by_token(jobs: list[Job]) -> dict[str, list[Job]]:
    groups: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        groups[job.claim_token].append(job)
    return groups


def _object_gone(error: PlatformError) -> bool:
    # (#100) subcode 33: the phone number id does not exist (any more) for this token.
    return error.code == 100 and error.details.get("error_subcode") == 33


def _code(error: PlatformError | None) -> str:
    if error is None:
        return "unknown"
    return str(error.code) if error.code is not None else type(error).__name__


def _message(error: PlatformError | None) -> str:
    if error is None:
        return ""
    details = error.details.get("details") if isinstance(error.details, dict) else None
    text = f"{error.message}: {details}" if details else error.message
    return text[:1000]


# Recovery.


def recover_stuck(pacer: Pacer | None = None, now: dt.datetime | None = None,
                  stuck_after: dt.timedelta = STUCK_AFTER, grace: dt.timedelta = DEAD_ENGINE_GRACE) -> int:
    """Settle recipients whose claim nobody will answer; returns how many were failed.

    A claim older than `grace` whose engine has stopped beating, or any claim older than
    `stuck_after`, gets no answer any more. Status webhooks carrying the recipient's callback
    data have had that long to settle it (they move `queued` rows to `sent` and on); what is
    still `queued` has no evidence of reaching the platform, and sending it again could
    duplicate it. So it fails with `send_unconfirmed` and its credit is released.
    """
    pacer = pacer or counters()
    now = now or utcnow()
    if not webhooks_caught_up(now):
        return 0
    R = CampaignRecipient
    rows = list(R.select(R.id, R.public_id, R.campaign, R.claim_token, R.claimed_at, R.wa_id, R.external_contact_id,
                         R.wam_id)
                .where((R.status == "queued") & (R.claimed_at < now - grace)).order_by(R.id).limit(5000))
    if not rows:
        return 0
    engines = {row.claim_token.split(".")[0] for row in rows if row.claim_token}
    live = {key.split(":", 1)[1] for key in pacer.alive([engine_key(e) for e in engines])}
    stuck = [row for row in rows if row.claimed_at < now - stuck_after
             or not row.claim_token or row.claim_token.split(".")[0] not in live]
    if not stuck:
        return 0
    error = {"code": UNCONFIRMED,
             "message": "the platform never confirmed this send; it was not retried, to avoid a duplicate"}
    failed: list = []
    with atomic():
        for token, group in itertools.groupby(sorted(stuck, key=lambda r: r.claim_token or ""),
                                              key=lambda r: r.claim_token):
            group = list(group)
            by_id = {row.id: row for row in group}
            query = (R.update(status="failed", failed_at=now, claim_token=None, error_code=UNCONFIRMED,
                              last_error=error["message"])
                     .where(R.id.in_(list(by_id)) & (R.status == "queued") & (R.claim_token == token))
                     .returning(R.id))
            failed += [by_id[row.id] for row in query.execute()]
        release_failed(failed, now, lambda _row: error)
        finish_if_done({row.campaign_id for row in failed})
    if failed:
        log.warning("recovered %d unconfirmed sends", len(failed))
    return len(failed)


def webhooks_caught_up(now: dt.datetime | None = None) -> bool:
    """No platform webhook received before the last few seconds is still waiting to be applied.

    Recovery must not decide a claim got no answer while the answer sits unprocessed in the
    intake (a worker that died also stopped processing webhooks). Batches being processed do not
    count (one held by a dead worker waits minutes for the intake's own sweep), nor do batches
    the intake gave up on: should they name a recipient recovery failed, the status update
    accepts it late (models/statuses.py), so the record still ends as the platform says.
    """
    try:
        from models.platform import MAX_ATTEMPTS, PlatformWebhookBatch
    except ImportError:  # no platform intake in this installation
        return True
    now = now or utcnow()
    return not (PlatformWebhookBatch.select(PlatformWebhookBatch.id)
                .where(PlatformWebhookBatch.processed_at.is_null() & PlatformWebhookBatch.claimed_at.is_null()
                       & (PlatformWebhookBatch.attempts < MAX_ATTEMPTS)
                       & (PlatformWebhookBatch.received_at < now - WEBHOOK_BACKLOG))
                .exists())


# The engine.


@dataclass
class _Number:
    plan: NumberPlan
    due: int
    held_until: float = 0.0
    throttle_streak: int = 0


class Engine:
    def __init__(self, store: DatabaseStore | None = None, messenger: Messenger | None = None,
                 pacer: Pacer | None = None, settings: Settings | None = None,
                 notify: Callable[[], None] | None = None):
        self.notify = notify  # asks for a prompt webhook fan-out after a batch committed events
        self.store = store or DatabaseStore()
        self.messenger = messenger or GraphMessenger()
        self._pacer = pacer
        self.settings = settings or Settings()
        self.id = uuid.uuid4().hex[:16]
        self._claims = itertools.count(1)
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._refresh_now = threading.Event()
        self._numbers: dict[int, _Number] = {}
        self._in_flight = 0  # claimed and not yet recorded
        self._unstarted: list[float] = []  # slot times of the claimed sends not yet started (a heap)
        self._batches: set = set()
        self._rotation = 0
        self._last_plan = 0.0
        self._last_batch_done = 0.0
        self.sent = 0

    @property
    def pacer(self) -> Pacer:
        return self._pacer or counters()

    def woken_late(self) -> bool:
        """Someone asked for a plan after this run made its last one (call after `run`)."""
        return self._refresh_now.is_set()

    def wake(self) -> None:
        """New work may exist: plan again at once."""
        self._refresh_now.set()
        self._changed.set()

    def run(self, *, session: float | None = None, linger: float | None = None) -> bool:
        """Dispatch until idle for `linger` seconds or `session` seconds have passed.

        Returns True when the session ended with work due or in flight (the caller queues
        another run at once).
        """
        settings = self.settings
        session = settings.session if session is None else session
        linger = settings.linger if linger is None else linger
        started = time.monotonic()
        sender = SlotExecutor(settings.send_threads, thread_name_prefix="dispatch-send")
        batcher = ThreadPoolExecutor(settings.batch_threads, thread_name_prefix="dispatch-batch")
        next_plan = next_beat = next_recover = next_tick = 0.0
        idle_since: float | None = None
        try:
            while True:
                now = time.monotonic()
                over = session is not None and now - started >= session
                try:
                    if now >= next_beat:
                        self.pacer.beat(engine_key(self.id), settings.heartbeat_ttl)
                        next_beat = now + settings.heartbeat_ttl / 5
                    if now >= next_recover:
                        recover_stuck(self.pacer)
                        next_recover = now + settings.recover_every
                    if now >= next_plan or self._refresh_now.is_set():
                        self._refresh_now.clear()
                        self._replan()
                        next_plan = now + settings.refresh
                    if not over and now >= next_tick:
                        self._tick(now, sender, batcher)
                        next_tick = now + settings.tick
                except (DatabaseError, InterfaceError, RedisError):
                    # Storage restarting, a deadlock victim, a lock timeout: nothing was claimed
                    # by the failed step (its transaction rolled back). Try again shortly.
                    log.warning("dispatch step failed; retrying", exc_info=True)
                    next_tick = max(next_tick, now + 1.0)
                    next_plan = min(next_plan, now + 1.0)
                    if over and not self._batches:
                        return True  # the next run (queued by the task) tries again
                    self._changed.wait(1.0)
                    continue
                busy = bool(self._batches)
                has_work = any(n.due > 0 for n in self._numbers.values())
                if over and not busy:
                    return has_work or self.store.in_flight > 0
                # Claims in flight elsewhere (another engine's, or a dead one's awaiting recovery)
                # keep a lingering engine alive: recovery runs here every few seconds.
                settling = linger > 0 and self.store.in_flight > self._in_flight
                if not busy and not has_work and not settling:
                    if self._last_plan <= self._last_batch_done:
                        # A batch finished after the last plan: it may have given work back.
                        self._refresh_now.set()
                        continue
                    idle_since = idle_since if idle_since is not None else now
                    if now - idle_since >= linger:
                        # Held campaigns and later retries are for the periodic re-kick and
                        # the run the task schedules at the next retry time.
                        return False
                else:
                    idle_since = None
                self._changed.wait(max(0.005, min(next_tick, next_plan) - time.monotonic()))
                self._changed.clear()
        finally:
            for batch in list(self._batches):
                batch.result()
            batcher.shutdown(wait=True)
            sender.shutdown(wait=True)

    def _replan(self) -> None:
        self._last_plan = time.monotonic()
        plans = self.store.plan()
        with self._lock:
            numbers: dict[int, _Number] = {}
            for plan in plans:
                known = self._numbers.get(plan.account_id)
                number = _Number(plan, plan.due)
                if known is not None:
                    number.held_until, number.throttle_streak = known.held_until, known.throttle_streak
                numbers[plan.account_id] = number
            self._numbers = numbers

    def _tick(self, now: float, sender: ThreadPoolExecutor, batcher: ThreadPoolExecutor) -> None:
        settings = self.settings
        with self._lock:
            capacity = settings.max_in_flight - self._in_flight
            ready = [n for n in self._numbers.values() if n.due > 0 and n.held_until <= now]
            # Slots are spent when recipients are claimed, so claim more only when the send pool
            # keeps up: while sends due more than a burst ago still wait for a thread (the platform
            # hangs, or the pool is slower than the pace), claiming more would send them late in one burst.
            backlog = bool(self._unstarted) and now - self._unstarted[0] > settings.burst_seconds
        if capacity <= 0 or not ready or backlog:
            return
        wants = {}
        for number in ready:
            rate = float(number.plan.mps)
            burst = max(1.0, rate * settings.burst_seconds)
            want = min(number.due, max(1, math.ceil(burst)))
            wants[number.plan.account_id] = want
        shares = fair_shares(capacity, {n.plan.account_id: n.plan.tenant_id for n in ready}, wants, self._rotation)
        self._rotation += 1
        requests = {bucket_key(account_id): (float(self._numbers[account_id].plan.mps),
                                             max(1.0, self._numbers[account_id].plan.mps * settings.burst_seconds),
                                             share)
                    for account_id, share in shares.items() if share > 0}
        if not requests:
            return
        asked = time.monotonic()
        grants = self.pacer.take_tokens(requests)
        granted = {account_id: grants[bucket_key(account_id)][0] for account_id in shares
                   if bucket_key(account_id) in grants and grants[bucket_key(account_id)][0] > 0}
        if not granted:
            return
        plans = {account_id: self._numbers[account_id].plan for account_id in granted}
        token = f"{self.id}.{next(self._claims)}"
        jobs = self.store.claim(granted, plans, token)
        with self._lock:
            for account_id, count in granted.items():
                number = self._numbers.get(account_id)
                if number is None:
                    continue
                claimed = sum(1 for job in jobs if job.account_id == account_id)
                # Fewer than granted: nothing more is due for now (the next plan recounts).
                number.due = 0 if claimed < count else max(0, number.due - claimed)
            if not jobs:
                return
            slots = {account_id: itertools.count() for account_id in granted}
            for job in jobs:
                # Each send at its own slot: the first granted, then one interval apart.
                first = asked + grants[bucket_key(job.account_id)][1]
                job.send_at = first + next(slots[job.account_id]) * slot_interval(float(plans[job.account_id].mps))
            self._in_flight += len(jobs)
            for job in jobs:
                heapq.heappush(self._unstarted, job.send_at)
        # Scheduled here, not by the batch: a batch waits for a free batch thread (others may be
        # recording), and its sends must not wait with it past their slots.
        sends = [sender.submit_at(job.send_at, self._send_one, job) for job in jobs]
        batch = batcher.submit(self._send_batch, jobs, sends)
        self._batches.add(batch)
        batch.add_done_callback(self._batch_done)

    def _batch_done(self, batch) -> None:
        self._batches.discard(batch)
        self._changed.set()

    def _send_batch(self, jobs: list[Job], sends: list[Future]) -> None:
        given_back = True
        try:
            wait(sends)
            with connection():
                result = self._record(jobs)
                self._after(result)
            self.sent += result.accepted
            given_back = result.retried > 0
        except Exception:
            # The claims stay `queued`; recovery settles them. Never resend from here.
            log.exception("dispatch batch of %d failed to record", len(jobs))
        finally:
            with self._lock:
                self._in_flight -= len(jobs)
                self._last_batch_done = time.monotonic()
            if given_back:
                # Recipients given back (throttled) are due again: count them at once.
                self._refresh_now.set()
            if self.notify is not None:
                self.notify()

    def _record(self, jobs: list[Job]) -> BatchResult:
        """Record a batch, again if the database chose this transaction as a deadlock victim (or
        timed out on a lock): it rolled back whole, and recording is idempotent."""
        for attempt in range(RECORD_ATTEMPTS):
            try:
                return self.store.record(jobs)
            except OperationalError:
                if attempt + 1 == RECORD_ATTEMPTS:
                    raise
                log.warning("recording a batch of %d met a lock conflict; retrying", len(jobs), exc_info=True)
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def _send_one(self, job: Job) -> None:
        with self._lock:
            # Sends start in the order of their slots: this one was the earliest still waiting.
            if self._unstarted:
                heapq.heappop(self._unstarted)
        if time.monotonic() - job.send_at > LATE_SEND:
            job.error = SlotMissed("not sent: the engine fell behind its pacing slot")
            return
        try:
            job.wam_id = self.messenger.send(job)
        except PlatformError as error:
            job.error = error
        except Exception as error:  # a bug or a dropped connection: never retried blindly
            log.exception("send to %s failed unexpectedly", job.public_id)
            job.error = PlatformUnavailableError(f"unexpected send failure: {error}", ambiguous=True)

    def _after(self, result: BatchResult) -> None:
        """Throttling, disconnected numbers, refused templates, finished campaigns."""
        for account_id in result.throttled_numbers:
            with self._lock:
                number = self._numbers.get(account_id)
                streak = (number.throttle_streak + 1) if number else 1
                hold = min(MAX_THROTTLE_HOLD, 2.0 ** (streak - 1))
                if number is not None:
                    number.throttle_streak = streak
                    number.held_until = time.monotonic() + hold
                    rate = float(number.plan.mps)
                    campaigns = list(number.plan.campaigns)
                else:
                    rate, campaigns = 1.0, []
            self.pacer.hold_tokens(bucket_key(account_id), rate, hold)
            if hold >= LONG_HOLD:
                self.store.hold(campaigns, "throttled")
        for account_id in result.unanswered_numbers:
            # Requests still hanging at the platform may all be taken at once when it recovers:
            # sending more now would add to that burst and get refused (with nobody listening).
            with self._lock:
                number = self._numbers.get(account_id)
                if number is not None:
                    number.held_until = max(number.held_until, time.monotonic() + UNANSWERED_HOLD)
                rate = float(number.plan.mps) if number is not None else 1.0
            self.pacer.hold_tokens(bucket_key(account_id), rate, UNANSWERED_HOLD)
        with self._lock:
            for account_id in result.accepted_numbers - result.throttled_numbers - result.unanswered_numbers:
                if account_id in self._numbers:
                    self._numbers[account_id].throttle_streak = 0
        for campaign_id, reason in result.disconnected.items():
            self.store.fail(campaign_id, "account_disconnected", reason)
        for campaign_id, reason in result.template_refused.items():
            self.store.fail(campaign_id, "template_not_approved", reason)
        self.store.finish(result.campaigns)


def fair_shares(capacity: int, tenant_of: dict[int, int], wants: dict[int, int], rotation: int = 0) -> dict[int, int]:
    """Split `capacity` between numbers: first evenly between tenants, then between a tenant's
    numbers, never giving anyone more than it wants (water-filling). `rotation` turns the order
    leftover units are handed out in, so no one is always last."""
    shares = dict.fromkeys(wants, 0)
    tenants: dict[int, list[int]] = defaultdict(list)
    for number in sorted(wants):
        tenants[tenant_of[number]].append(number)
    order = sorted(tenants)
    if order:
        turn = rotation % len(order)
        order = order[turn:] + order[:turn]
    left = capacity
    active = [t for t in order if any(wants[n] for n in tenants[t])]
    while left > 0 and active:
        per_tenant = max(1, left // len(active))
        still = []
        for tenant in active:
            if left <= 0:
                break
            budget = min(per_tenant, left)
            numbers = [n for n in tenants[tenant] if shares[n] < wants[n]]
            spent = _fill(shares, wants, numbers, budget, rotation)
            left -= spent
            if any(shares[n] < wants[n] for n in tenants[tenant]):
                still.append(tenant)
        if still == active and per_tenant == 1 and left <= 0:
            break
        active = still
    return shares


def _fill(shares: dict[int, int], wants: dict[int, int], numbers: list[int], budget: int, rotation: int) -> int:
    spent = 0
    if numbers:
        turn = rotation % len(numbers)
        numbers = numbers[turn:] + numbers[:turn]
    while budget > spent and numbers:
        per_number = max(1, (budget - spent) // len(numbers))
        still = []
        for number in numbers:
            if spent >= budget:
                break
            give = min(per_number, wants[number] - shares[number], budget - spent)
            shares[number] += give
            spent += give
            if shares[number] < wants[number]:
                still.append(number)
        numbers = still
    return spent


