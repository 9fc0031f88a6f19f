"""The campaign store: campaign recipients as the engine's work.

- `plan`: numbers with active campaigns and how many recipients are due; campaigns whose number
  or wallet is paused, or whose number reached its daily limit, are held (`pending`); those whose
  number is gone fail.
- `claim`: a number's share split evenly between its campaigns, pending -> queued with a claim
  token, in one transaction.
- `start`: the send-started mark, set on a wave of claims just before their platform calls.
- `record`: a sent batch's outcomes with their credits and events, in one transaction.
- `give_back_unstarted`, `fail_unconfirmed`: what recovery does with a dead engine's claims.

Every transaction here keeps the lock order of docs/reliability.md: campaign rows (state changes,
or shared before a give-back), then recipient rows (ascending id), then business sends, credit
counters and wallets.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import orjson
from peewee import fn

from models.clock import utcnow
from models.events.outbox import emit_rows
from models.ids import new_ids
from models.numbers import accounts
from models.numbers.accounts import record_business_sends_many
from models.numbers.graph import account_token
from models.numbers.tables import MessagingAccount
from models.sending import CAMPAIGN_FAILED, CAMPAIGN_FAILED_TEXT, UNCONFIRMED, UNCONFIRMED_TEXT, work_arrived
from models.sending.campaign_counters import add_to_counters, count_moved, move_credits_many, release_withdrawn
from models.sending.campaign_ends import fail_campaign, finish_after_commit, finish_if_done, lock_still_active
from models.sending.campaign_events import message_event
from models.sending.fairness import split_evenly
from models.sending.messenger import Verdict, error_code, error_text, pause_blocked_numbers, template_payload, verdict
from models.sending.tables import ACTIVE_STATUSES, Campaign, CampaignRecipient
from models.sending.work import BatchResult, Job, NumberPlan, ids_by_claim_token
from models.store.db import (
    atomic,
    db,
    execute,
    lock_in_order,
    lock_rows,
    placeholders,
    skip_locked,
    unindexed,
    unindexed_field,
)
from models.tenancy.tables import Wallet

CHUNK = 400  # rows per hot statement: a few parameters each, well under SQLite's limit
_PICK_SQL: dict[type, str] = {}


def _case_by_id(column: str, pairs: list[tuple[int, Any]]) -> tuple[str, list]:
    """`column = CASE id WHEN .. THEN .. END` and its parameters, for `execute`'s SQL: a batch's
    values in one UPDATE, its text built once (peewee builds a node per value)."""
    params: list = []
    for row_id, value in pairs:
        params += [row_id, value]
    return f"{column} = CASE id{' WHEN ? THEN ?' * len(pairs)} END", params


class _ActiveCampaign(NamedTuple):
    """What the plan reads of an active campaign."""

    id: int
    tenant_id: int
    account_id: int
    status: str
    hold_reason: str | None
    wallet_status: str


class _Number(NamedTuple):
    """A number's columns a claimed job is built from."""

    id: int
    public_id: str
    phone_id: str
    access_token: str | None


class CampaignStore:
    name = "campaign"

    def __init__(self):
        self._tokens: dict[tuple[int, str], str] = {}  # (account id, ciphertext) -> token
        self._campaign_cache: dict[int, Campaign] = {}
        self.in_flight = 0  # recipients `queued` in active campaigns at the last plan, anyone's

    def _token(self, account: MessagingAccount | _Number) -> str:
        key = (account.id, account.access_token)
        if key not in self._tokens:
            self._tokens[key] = account_token(account)
        return self._tokens[key]

    # 1. The plan.

    def plan(self, now: dt.datetime | None = None) -> list[NumberPlan]:
        """Numbers with active campaigns and what they may send now; holds, resumes and fails."""
        now = now or utcnow()
        # Hand-written statements: the plan runs every second of every engine. A scheduled
        # campaign is left alone (queued, never held) until its `send_at`.
        rows = [_ActiveCampaign(*row) for row in execute(
            "SELECT c.id, c.tenant_id, c.account_id, c.status, c.hold_reason, w.status "
            f'FROM "{Campaign._meta.table_name}" c '
            f'JOIN "{Wallet._meta.table_name}" w ON w.tenant_id = c.tenant_id '
            f"WHERE c.status IN ({placeholders(len(ACTIVE_STATUSES))}) AND (c.send_at IS NULL OR c.send_at <= ?) "
            "ORDER BY c.id", [*ACTIVE_STATUSES, now]).fetchall()]
        if not rows:
            self.in_flight = 0
            return []
        ids = [row.id for row in rows]
        self.in_flight = execute(f'SELECT COUNT(*) FROM "{CampaignRecipient._meta.table_name}" '
                                 f"WHERE campaign_id IN ({placeholders(len(ids))}) AND status = ?",
                                 [*ids, "queued"]).fetchone()[0]
        by_account: dict[int, list] = defaultdict(list)
        for row in rows:
            by_account[row.account_id].append(row)
        numbers = accounts.number_states(list(by_account))
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
            plans.append(NumberPlan(account_id, account.tenant_id, account.public_id, account.mps or 1, waiting,
                                    [c for c in ids if due.get(c)], allowance))
        for reason, ids in holds.items():
            self._hold(ids, reason)
        return plans

    @staticmethod
    def _due(rows: list, now: dt.datetime) -> dict[int, int]:
        ids = [row.id for row in rows]
        return dict(execute(
            f'SELECT campaign_id, COUNT(id) FROM "{CampaignRecipient._meta.table_name}" '
            f"WHERE campaign_id IN ({placeholders(len(ids))}) AND status = ? "
            "AND (not_before IS NULL OR not_before <= ?) GROUP BY campaign_id", [*ids, "pending", now]).fetchall())

    def hold(self, plan: NumberPlan, reason: str) -> None:
        self._hold(plan.campaigns, reason)

    @staticmethod
    def _hold(campaign_ids: list[int], reason: str) -> None:
        """Mark campaigns `pending` while their number cannot send; the next claim resumes them."""
        changing = (Campaign.id.in_(campaign_ids) & Campaign.status.in_(ACTIVE_STATUSES)
                    & ((Campaign.status != "pending") | (Campaign.hold_reason != reason)
                       | Campaign.hold_reason.is_null()))
        if not campaign_ids or not Campaign.select().where(changing).exists():
            return
        with atomic():
            lock_in_order(Campaign.select(Campaign.id).where(changing).order_by(Campaign.id)).execute()
            Campaign.update(status="pending", hold_reason=reason).where(changing).execute()

    # 2. Claims.

    def claim(self, grants: dict[int, int], plans: dict[int, NumberPlan], claim_token: str,
              now: dt.datetime | None = None) -> list[Job]:
        """Claim up to `grants[account]` due recipients per number, in one transaction, and make
        their jobs.

        A number's share is split evenly between its campaigns; what one campaign cannot use goes
        to the others. The campaign rows move to `processing` first, with a conditional UPDATE that
        a concurrent cancel also makes: whichever commits first wins, so a cancelled campaign is
        never claimed from. Recipients are taken with SKIP LOCKED, which never waits. However
        many numbers, this is a handful of statements.
        """
        now = now or utcnow()
        with atomic():
            campaign_ids = [c for account_id in grants for c in plans[account_id].campaigns]
            statuses = self._statuses(campaign_ids)
            # Only campaigns changing state are written (a row lock each, in id order): a campaign
            # already `processing` is left alone, so concurrent claims do not queue on its row.
            if any(status in ("queued", "pending") for status in statuses.values()):
                starting = Campaign.id.in_(campaign_ids) & Campaign.status.in_(("queued", "pending"))
                lock_in_order(Campaign.select(Campaign.id).where(starting).order_by(Campaign.id)).execute()
                (Campaign.update(status="processing", hold_reason=None,
                                 started_at=fn.COALESCE(Campaign.started_at, now))
                 .where(starting).execute())
                statuses = self._statuses(campaign_ids)
            started = {row_id for row_id, status in statuses.items() if status == "processing"}
            if not started:
                return []
            wanted = dict(grants)
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
                takes = split_evenly(open_numbers, wanted)
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
            claimed: dict[int, dict[str, int]] = {}
            for row in rows:
                count_moved(claimed, row[2], "pending", "queued")
            add_to_counters(claimed)
        # The jobs are built once the claim has committed, outside the writers' turn: the rows are
        # ours by their claim token, and a claim this process never starts is given back.
        if not rows:
            return []
        campaigns = self._campaign_rows({row[2] for row in rows})
        numbers = self._numbers(list(grants))
        jobs: list[Job] = []
        for row_id, public_id, campaign_id, wa_id, contact, variables, throttled, retries, buttons in rows:
            campaign = campaigns[campaign_id]
            account = numbers[campaign.account_id]
            variables = orjson.loads(variables) if isinstance(variables, (str, bytes)) else variables
            buttons = orjson.loads(buttons) if isinstance(buttons, (str, bytes)) else buttons
            jobs.append(Job(
                store=self.name, id=row_id, public_id=public_id, tenant_id=campaign.tenant_id,
                account_id=account.id, account_public_id=account.public_id, phone_id=account.phone_id,
                token=self._token(account), wa_id=wa_id, throttled=throttled, retries=retries,
                payload=template_payload(campaign, wa_id, variables, public_id, buttons), claim_token=claim_token,
                campaign_id=campaign_id, campaign_public_id=campaign.public_id,
                external_contact_id=contact))
        return jobs

    @staticmethod
    def _statuses(campaign_ids: list[int]) -> dict[int, str]:
        # Hand-written, as the other statements every claim makes.
        return dict(execute(f'SELECT id, status FROM "{Campaign._meta.table_name}" '
                            f"WHERE id IN ({placeholders(len(campaign_ids))})", campaign_ids).fetchall())

    @staticmethod
    def _numbers(account_ids: list[int]) -> dict[int, _Number]:
        """What a job needs of each number, read in every claim (a token may have been rotated)."""
        rows = execute(f'SELECT id, public_id, phone_id, access_token FROM "{MessagingAccount._meta.table_name}" '
                       f"WHERE id IN ({placeholders(len(account_ids))})", account_ids).fetchall()
        return {row[0]: _Number(*row) for row in rows}

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
        return [row[0] for row in execute(" UNION ALL ".join(parts), params).fetchall()]

    @staticmethod
    def _pick_limited(campaign_id: int, take: int, plan: NumberPlan, account_id: int,
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
            rows += execute(
                f'UPDATE "{table}" SET status = ?, claim_token = ?, claimed_at = ?, send_started_at = NULL, '
                f"attempts = attempts + 1, last_error = NULL WHERE id IN ({placeholders(len(chunk))}) "
                f"AND {unindexed('status')} = ? "
                "RETURNING id, public_id, campaign_id, wa_id, external_contact_id, vars, throttled, retries, buttons",
                ["queued", claim_token, now, *chunk, "pending"]).fetchall()
        return rows

    # 3. Sends started.

    def start(self, jobs: list[Job], now: dt.datetime | None = None) -> set[int]:
        """Mark these claims started, just before their platform calls: one transaction, the rows
        locked in ascending id, then one UPDATE per claim token (a wave of sends is one token's).
        Returns the ids marked: a claim given up meanwhile
        (recovery sent it back to the queue) is not, and must not be sent."""
        now = now or utcnow()
        table = CampaignRecipient._meta.table_name
        marked: set[int] = set()
        with atomic():
            # In the lock order, as every writer of recipient rows: ascending id first.
            lock_rows(CampaignRecipient, [job.id for job in jobs])
            for token, chunk in _chunks_by_token(jobs):
                ids = [job.id for job in chunk]
                marked |= {row[0] for row in execute(
                    f'UPDATE "{table}" SET send_started_at = ? WHERE id IN ({placeholders(len(ids))}) '
                    f"AND {unindexed('status')} = ? AND claim_token = ? RETURNING id",
                    [now, *ids, "queued", token]).fetchall()}
        return marked

    # 4. Outcomes.

    def record(self, jobs: list[Job]) -> BatchResult:
        """Write a sent batch's outcomes, credit movements and events in one transaction: the
        recipient rows locked in ascending id, then written; then the business sends, the events,
        and last the credit counters and wallets (the rows every other batch shares)."""
        result = BatchResult()
        verdicts = {job.id: verdict(job) for job in jobs}
        accepted, failed, retry = [], [], []
        for job in jobs:
            kind = verdicts[job.id]
            if kind is Verdict.ACCEPTED:
                accepted.append(job)
                result.accepted_numbers.add(job.account_id)
            elif kind is Verdict.UNANSWERED:
                result.unanswered += 1
                result.unanswered_numbers.add(job.account_id)
            elif kind in (Verdict.THROTTLED, Verdict.PAIR_THROTTLED, Verdict.RETRY, Verdict.SLOT_MISSED,
                          Verdict.ACCOUNT_BLOCKED):
                retry.append(job)
                if kind is Verdict.ACCOUNT_BLOCKED:
                    result.blocked[job.account_id] = error_text(job.error)
                if kind in (Verdict.THROTTLED, Verdict.RETRY):
                    result.throttled_numbers.add(job.account_id)  # the platform struggles: slow down
            else:
                failed.append(job)
                if kind is Verdict.DISCONNECTED:
                    result.disconnected[job.account_id] = str(job.error)
                elif kind is Verdict.TEMPLATE_REFUSED:
                    result.template_refused[job.campaign_id] = str(job.error)
        errors = {job.id: (error_code(job.error)[:32], error_text(job.error)) for job in failed}
        now = utcnow()
        with atomic():
            if retry:
                # A campaign another batch failed meanwhile (its number disconnected) takes nothing
                # back: what this batch did not send fails here, as its waiting recipients did.
                active = lock_still_active({job.campaign_id for job in retry})
                stopped = [job for job in retry if job.campaign_id not in active]
                retry = [job for job in retry if job.campaign_id in active]
                failed += stopped
                errors |= dict.fromkeys((job.id for job in stopped), (CAMPAIGN_FAILED, CAMPAIGN_FAILED_TEXT))
            lock_rows(CampaignRecipient, [job.id for job in accepted + failed + retry])
            sent = self._record_accepted(accepted, now)
            gone = self._record_failed(failed, errors, now)
            retried = self._record_retry(retry, verdicts, now)
            result.retried = len(retried)
            result.accepted, result.failed = len(sent), len(gone)
            record_business_sends_many({(job.account_id, job.wa_id) for job in sent}, now)
            emit_rows("message.sent", [(job.tenant_id, message_event(job.campaign_public_id, job.account_public_id,
                                                                      job, "sent", now)) for job in sent], now)
            emit_rows("message.failed", [(job.tenant_id, message_event(
                job.campaign_public_id, job.account_public_id, job, "failed", now,
                {"code": errors[job.id][0], "message": errors[job.id][1]})) for job in gone], now)
            moves: dict[int, dict[str, int]] = {}
            for jobs_moved, status in ((sent, "sent"), (gone, "failed")):
                for job in jobs_moved:
                    count_moved(moves, job.campaign_id, "queued", status)
            for campaign_id in retried:
                count_moved(moves, campaign_id, "queued", "pending")
            for kinds in moves.values():
                # A send accepted consumes its credit; one failed for good releases it.
                kinds.update(consume=kinds.get("sent", 0), release=kinds.get("failed", 0))
            move_credits_many(moves, description=errors[gone[0].id][1] if gone else None)
            pause_blocked_numbers(result.blocked)
        return result

    @staticmethod
    def _record_accepted(jobs: list[Job], now: dt.datetime) -> list[Job]:
        message_ids = dict(zip((job.id for job in jobs), new_ids("msg_", len(jobs)), strict=True))
        return _settle_claimed(jobs, "sent", "sent_at", now, cleared=("last_error", "error_code"),
                               values={"wam_id": lambda job: job.wam_id, "message_id": lambda job: message_ids[job.id]})

    @staticmethod
    def _record_failed(jobs: list[Job], errors: dict[int, tuple[str, str]], now: dt.datetime) -> list[Job]:
        """`errors[job id]`: the code and text each failed recipient keeps."""
        return _settle_claimed(jobs, "failed", "failed_at", now, cleared=(),
                               values={"error_code": lambda job: errors[job.id][0],
                                       "last_error": lambda job: errors[job.id][1]})

    @staticmethod
    def _record_retry(jobs: list[Job], verdicts: dict[int, Verdict], now: dt.datetime) -> list[int]:
        """Give throttled and transiently failed recipients back to the queue (not failures);
        returns the campaign of each recipient given back."""
        table = CampaignRecipient._meta.table_name
        kinds = (
            # Throttled, or refused because the number's business account is blocked (it is paused):
            # the platform was handed these, so the attempt counts. The whole number is throttled
            # (its schedule is held) or paused: due again, for a new slot.
            ((Verdict.THROTTLED, Verdict.ACCOUNT_BLOCKED), "", None),
            # The send missed its slot and never reached the platform: due again, for a new
            # slot, and its claim was no attempt (`attempts` counts what the platform was handed).
            ((Verdict.SLOT_MISSED,), ", attempts = attempts - 1", None),
            # Too many messages to this user: only this recipient waits, 4^X seconds.
            ((Verdict.PAIR_THROTTLED,), ", throttled = throttled + 1",
             lambda j: now + dt.timedelta(seconds=4 ** (j.throttled + 1))),
            # A platform hiccup: back off 2, 4, 8... seconds, a bounded number of times.
            ((Verdict.RETRY,), ", retries = retries + 1", lambda j: now + dt.timedelta(seconds=2 ** (j.retries + 1))),
        )
        changed: list[int] = []
        for chosen, extra, not_before in kinds:
            for token, chunk in _chunks_by_token([job for job in jobs if verdicts[job.id] in chosen]):
                ids = [j.id for j in chunk]
                # Hand-written, as the other outcomes: slots missed under load come back in numbers.
                text_sql, params = _case_by_id("last_error", [(j.id, error_text(j.error)) for j in chunk])
                if not_before is not None:
                    wait_sql, wait_params = _case_by_id("not_before", [(j.id, not_before(j)) for j in chunk])
                    text_sql, params = f"{text_sql}, {wait_sql}", params + wait_params
                changed += [campaign_id for (campaign_id,) in execute(
                    f'UPDATE "{table}" SET status = ?, claim_token = NULL, claimed_at = NULL, '
                    f"send_started_at = NULL, {text_sql}{extra} "
                    f"WHERE id IN ({placeholders(len(ids))}) AND {unindexed('status')} = ? AND claim_token = ? "
                    "RETURNING campaign_id", ["pending", *params, *ids, "queued", token]).fetchall()]
        return changed

    def settle(self, jobs: list[Job], result: BatchResult) -> None:
        """Campaigns whose number can send no more, or whose template was refused, fail; those with
        nothing left complete."""
        campaigns = {job.campaign_id for job in jobs}
        disconnected = {job.campaign_id: result.disconnected[job.account_id] for job in jobs
                        if job.account_id in result.disconnected}
        for campaign_id, reason in disconnected.items():
            fail_campaign(campaign_id, "account_disconnected", reason)
        for campaign_id, reason in result.template_refused.items():
            if campaign_id in campaigns:
                fail_campaign(campaign_id, "template_not_approved", reason)
        finish_if_done(campaigns)

    # 5. Recovery.

    def claims_before(self, when: dt.datetime) -> list[tuple[int, str | None, dt.datetime, bool]]:
        R = CampaignRecipient
        return [(row_id, token, claimed_at, started is not None) for row_id, token, claimed_at, started in
                R.select(R.id, R.claim_token, R.claimed_at, R.send_started_at)
                .where((R.status == "queued") & (R.claimed_at < when)).order_by(R.id).limit(5000).tuples()]

    def give_back_unstarted(self, claims: list[tuple[int, str | None]]) -> int:
        """Claims never started (their platform call never began): back to `pending`, due again
        for a new slot, the claim's attempt given back. Nothing else moves: the credit stays
        reserved, no event. Returns how many were still unstarted under that token.

        A campaign that failed meanwhile (its number disconnected) sends nothing more: its
        unstarted claims fail with `campaign_failed`, as its waiting recipients did, their credit
        released."""
        R = CampaignRecipient
        returned = 0
        moves: dict[int, dict[str, int]] = {}
        stopped: list[tuple[int, str | None]] = []
        claimed = [row_id for row_id, _ in claims]
        with atomic():
            # A recipient's campaign never changes: its campaigns are read before anything is locked.
            active = lock_still_active(campaign_id for (campaign_id,) in R.select(R.campaign).distinct()
                                       .where(R.id.in_(claimed)).tuples())
            lock_rows(R, claimed)
            for token, ids in ids_by_claim_token(claims).items():
                unstarted = (R.id.in_(ids) & (unindexed_field(R.status) == "queued") & R.send_started_at.is_null()
                             & (R.claim_token.is_null() if token is None else R.claim_token == token))
                for (campaign_id,) in (R.update(status="pending", claim_token=None, claimed_at=None,
                                                attempts=R.attempts - 1)
                                       .where(unstarted & R.campaign.in_(list(active))).returning(R.campaign).tuples()
                                       .execute()):
                    count_moved(moves, campaign_id, "queued", "pending")
                    returned += 1
                stopped += [(row_id, token) for (row_id,) in R.select(R.id).where(unstarted).tuples()]
            add_to_counters(moves)
            if stopped:
                self._fail_claims(stopped, utcnow(), CAMPAIGN_FAILED, CAMPAIGN_FAILED_TEXT)
            if returned:
                work_arrived()
        return returned

    def fail_unconfirmed(self, claims: list[tuple[int, str | None]], now: dt.datetime) -> int:
        """Fail these claims (still queued under the same token) as unconfirmed, releasing their
        credit, in the lock order; their campaigns complete after commit if nothing is left."""
        return self._fail_claims(claims, now, UNCONFIRMED, UNCONFIRMED_TEXT)

    @staticmethod
    def _fail_claims(claims: list[tuple[int, str | None]], now: dt.datetime, code: str, text: str) -> int:
        """Fail these claims (still queued under the same token) with `code` and `text`, as
        `fail_unconfirmed` says; returns how many were."""
        if not claims:
            return 0
        R = CampaignRecipient
        error = {"code": code, "message": text}
        failed: list[Any] = []
        with atomic():
            lock_rows(R, [row_id for row_id, _ in claims])
            for token, ids in ids_by_claim_token(claims).items():
                query = (R.update(status="failed", failed_at=now, claim_token=None, error_code=code,
                                  last_error=text)
                         .where(R.id.in_(ids) & (unindexed_field(R.status) == "queued")
                                & (R.claim_token.is_null() if token is None else R.claim_token == token))
                         .returning(R.id, R.public_id, R.campaign, R.wa_id, R.external_contact_id, R.wam_id))
                failed += list(query.execute())
            if not failed:
                return 0
            per_campaign: dict[int, list[Any]] = defaultdict(list)
            for row in failed:
                per_campaign[row.campaign_id].append(row)
            campaigns = {c.id: c for c in Campaign.select().where(Campaign.id.in_(list(per_campaign)))}
            numbers = dict(MessagingAccount.select(MessagingAccount.id, MessagingAccount.public_id).where(
                MessagingAccount.id.in_(list({c.account_id for c in campaigns.values()}))).tuples())
            emit_rows("message.failed", [
                (campaigns[campaign_id].tenant_id, message_event(
                    campaigns[campaign_id].public_id, numbers[campaigns[campaign_id].account_id], row, "failed", now,
                    error))
                for campaign_id, rows in per_campaign.items() for row in rows], now)
            release_withdrawn({campaign_id: len(rows) for campaign_id, rows in per_campaign.items()}, "queued",
                              "failed", text)
            finish_after_commit(per_campaign)
        return len(failed)


def _by_token(jobs: list[Job]) -> dict[str, list[Job]]:
    groups: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        groups[job.claim_token].append(job)
    return groups


def _chunks_by_token(jobs: list[Job]) -> Iterator[tuple[str, list[Job]]]:
    """The jobs by claim token, each token's in chunks of at most CHUNK: one statement each."""
    for token, group in _by_token(jobs).items():
        for start in range(0, len(group), CHUNK):
            yield token, group[start:start + CHUNK]


def _settle_claimed(jobs: list[Job], status: str, moment_column: str, now: dt.datetime, *,
                    cleared: tuple[str, ...], values: dict[str, Callable[[Job], Any]]) -> list[Job]:
    """Move the jobs' recipients to `status` at `now` (in `moment_column`), the `cleared` columns
    emptied and each column of `values` set to its job's value; returns the jobs whose row moved.
    Only rows still queued under the job's claim move: a row a status webhook settled first (and
    charged) is left alone, so nothing is consumed twice."""
    by_id = {job.id: job for job in jobs}
    moved: list[Job] = []
    table = CampaignRecipient._meta.table_name
    emptied = "".join(f", {column} = NULL" for column in cleared)
    for token, chunk in _chunks_by_token(jobs):
        ids = [job.id for job in chunk]
        assignments, params = [], []
        for column, value_of in values.items():
            assignment, column_params = _case_by_id(column, [(job.id, value_of(job)) for job in chunk])
            assignments.append(assignment)
            params += column_params
        returned = execute(
            f'UPDATE "{table}" SET status = ?, {moment_column} = ?, claim_token = NULL{emptied}, '
            f"{', '.join(assignments)} WHERE id IN ({placeholders(len(ids))}) AND {unindexed('status')} = ? "
            "AND claim_token = ? RETURNING id",
            [status, now, *params, *ids, "queued", token]).fetchall()
        moved += [by_id[row_id] for (row_id,) in returned]
    return moved
