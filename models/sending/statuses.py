"""Applying the platform's message status updates to campaign recipients and single messages.

The platform batches status updates, retries them for days and does not keep their order, so
every update is applied as a conditional UPDATE that only moves a row forward (the rows a batch
names are locked first, in ascending id, as docs/reliability.md's lock order says):

    queued -> sent -> delivered -> read        (and queued / sent / delivered -> failed)

A row that did not move is skipped, and only rows that moved get an event, so a duplicate or a
late `delivered` after `read` changes nothing and emits nothing. A concurrent processor handling
the same row waits on the row lock and then finds the status moved (READ COMMITTED re-checks the
WHERE clause; SQLite runs writers one at a time), so each transition happens exactly once.

Rows are found by wamid, or, for those still `queued` (the worker died, or its answer was lost,
before the wamid was recorded), by the `biz_opaque_callback_data` the dispatcher sent: the
recipient's `rcp_` id or the message's `msg_` id. Any status proves the platform accepted the
message, so such a row is first accepted (credit consumed, `message.sent`), then moved on.
A `failed` after acceptance refunds the credit.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from peewee import Case

from messaging.webhooks import StatusUpdate
from models.clock import to_utc_naive, utcnow
from models.numbers.accounts import record_business_sends_many
from models.numbers.tables import MessagingAccount
from models.sending import UNCONFIRMED
from models.sending.campaigns import (
    add_to_counters,
    emit_rows,
    finish_after_commit,
    ledger_moves,
    message_event,
    public_ids,
)
from models.sending.messages import event_fields
from models.sending.tables import Campaign, CampaignRecipient, Message
from models.store.db import atomic, lock_rows
from models.tenancy import credits

log = logging.getLogger(__name__)
RANK = {"pending": 0, "queued": 1, "sent": 2, "delivered": 3, "read": 4}
CHUNK = 400  # ids per IN (...) list


@dataclass
class _Target:
    """One recipient or message and the updates that name it in this call."""

    row: Any
    account: MessagingAccount
    updates: list[StatusUpdate] = field(default_factory=list)

    def latest(self, status: str) -> StatusUpdate | None:
        found = [u for u in self.updates if u.status == status]
        return max(found, key=lambda u: u.timestamp) if found else None

    def earliest(self) -> StatusUpdate:
        return min(self.updates, key=lambda u: u.timestamp)


def apply_status_updates(updates: list[StatusUpdate]) -> None:
    """Move recipients and messages forward by the platform's status updates (one transaction).

    The lock order of docs/reliability.md: the recipient rows, then the message rows (each in
    ascending id), then the business sends, the campaigns' credit counters and the wallets. The
    campaign rows are never locked here; campaigns this finishes are completed after commit.
    """
    if not updates:
        return
    with atomic():
        recipients = _targets(CampaignRecipient, "rcp_", updates)
        messages = _targets(Message, "msg_", updates)
        affordable = _affordable_late(recipients, messages)
        outcome = _Outcome()
        if recipients:
            _apply_recipients(recipients, affordable, outcome)
        if messages:
            _apply_messages(messages, affordable, outcome)
        record_business_sends_many(outcome.business, utcnow())
        add_to_counters(outcome.counters)
        credits.apply_moves(ledger_moves(outcome.counters, REFUND_REASON) + outcome.wallet)
        finish_after_commit(outcome.accepting)


REFUND_REASON = "the platform reported a failure after accepting"


@dataclass
class _Outcome:
    """What the rows that moved ask of the shared rows, written last in the lock order."""

    business: set[tuple[int, str]] = field(default_factory=set)
    counters: dict[int, dict[str, int]] = field(default_factory=dict)  # campaign id -> kind -> n
    wallet: list[credits.Move] = field(default_factory=list)  # single messages' own entries
    accepting: set[int] = field(default_factory=set)  # campaigns a recipient was accepted in


def _chunks(values: list, size: int = CHUNK):
    for start in range(0, len(values), size):
        yield values[start:start + size]


def _targets(model, prefix: str, updates: list[StatusUpdate]) -> dict[int, _Target]:
    wamids = list({u.wamid for u in updates})
    callbacks = list({u.callback_data for u in updates if u.callback_data and u.callback_data.startswith(prefix)})
    ids: set[int] = set()
    for chunk in _chunks(wamids):
        ids |= {row_id for (row_id,) in model.select(model.id).where(model.wam_id.in_(chunk)).tuples()}
    for chunk in _chunks(callbacks):
        ids |= {row_id for (row_id,) in model.select(model.id).where(model.public_id.in_(chunk)).tuples()}
    if not ids:
        return {}
    # Locked in ascending id before any is written, then read as they are now.
    lock_rows(model, ids)
    rows = _reload(model, list(ids))
    if model is CampaignRecipient:
        campaign_ids = {row.campaign_id for row in rows.values()}
        campaigns = {c.id: c for c in Campaign.select().where(Campaign.id.in_(list(campaign_ids)))}
        account_of = {row_id: campaigns[row.campaign_id].account_id for row_id, row in rows.items()}
    else:
        account_of = {row_id: row.account_id for row_id, row in rows.items()}
    account_rows = {a.id: a for a in MessagingAccount.select().where(
        MessagingAccount.id.in_(list(set(account_of.values()))))}
    by_wamid: dict[str, int] = {row.wam_id: row_id for row_id, row in rows.items() if row.wam_id}
    by_public: dict[str, int] = {row.public_id: row_id for row_id, row in rows.items()}
    targets: dict[int, _Target] = {}
    for update in updates:
        row_id = by_wamid.get(update.wamid)
        if row_id is None and update.callback_data:
            row_id = by_public.get(update.callback_data)
            # The callback names the row, but a row that already has another wamid is another
            # send: a status for a different wamid must not move it.
            if row_id is not None and rows[row_id].wam_id not in (None, update.wamid):
                row_id = None
        if row_id is None:
            continue
        account = account_rows[account_of[row_id]]
        if account.phone_id != update.phone_number_id:
            continue  # another number's message: callback data is ours, but be strict anyway
        target = targets.setdefault(row_id, _Target(rows[row_id], account))
        target.updates.append(update)
    return targets


def _at(update: StatusUpdate | None) -> dt.datetime:
    return to_utc_naive(update.timestamp) if update is not None else utcnow()


def _error(update: StatusUpdate) -> dict[str, str]:
    first = update.errors[0] if update.errors else {}
    details = (first.get("error_data") or {}).get("details") if isinstance(first.get("error_data"), dict) else None
    return {"code": str(first.get("code", "unknown")),
            "message": str(details or first.get("message") or first.get("title") or "delivery failed")}


def _accept(model, targets: dict[int, _Target]) -> list[int]:
    """Queued rows named by a status: the platform has them. One UPDATE; returns the ids moved."""
    queued = [t for t in targets.values() if t.row.status == "queued"]
    moved: list[int] = []
    for chunk in _chunks(queued):
        ids = [t.row.id for t in chunk]
        wamid = Case(model.id, [(t.row.id, t.earliest().wamid) for t in chunk])
        sent_at = Case(model.id, [(t.row.id, _at(t.earliest())) for t in chunk])
        changes: dict = {model.status: "sent", model.wam_id: wamid, model.sent_at: sent_at, model.claim_token: None}
        if model is CampaignRecipient:
            message_ids = public_ids("msg_", len(chunk))
            changes[model.message_id] = Case(model.id, list(zip(ids, message_ids, strict=True)))
        query = (model.update(changes).where(model.id.in_(ids) & (model.status == "queued"))
                 .returning(model.id))
        moved += [row.id for row in query.execute()]
    return moved


def _late(targets: dict[int, _Target]) -> list[_Target]:
    return [t for t in targets.values()
            if t.row.status == "failed" and t.row.error_code == UNCONFIRMED and t.row.wam_id is None]


def _affordable_late(recipients: dict[int, _Target], messages: dict[int, _Target]) -> set[tuple[str, int]]:
    """Of the rows recovery failed as unconfirmed and the platform now shows it had accepted,
    those whose credit the wallet can still cover, as (table, id).

    Recovery failed them (releasing the credit) because no evidence came in time; the evidence is
    the truth, so they are accepted after all: the credit is reserved and consumed again and
    `message.sent` follows the earlier `message.failed`. A company whose wallet cannot pay any
    more keeps them failed (logged): the ledger never goes below what was reserved. The wallet is
    read here, not locked (it comes last in the lock order); should it change before the
    reservation, the reservation fails and the whole batch is applied again.
    """
    late = [(CampaignRecipient, t) for t in _late(recipients)] + [(Message, t) for t in _late(messages)]
    if not late:
        return set()
    tenant_of_campaign = dict(Campaign.select(Campaign.id, Campaign.tenant).where(Campaign.id.in_(
        list({t.row.campaign_id for model, t in late if model is CampaignRecipient}))).tuples())
    per_tenant: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for model, target in late:
        tenant_id = tenant_of_campaign[target.row.campaign_id] if model is CampaignRecipient else target.row.tenant_id
        per_tenant[tenant_id].append((model._meta.table_name, target.row.id))
    allowed: set[tuple[str, int]] = set()
    for tenant_id, rows in per_tenant.items():
        wallet = credits.wallet_of(tenant_id)
        if wallet.status == "active" and wallet.available >= len(rows):
            allowed.update(rows)
        else:
            log.warning("late acceptance of %d sends of tenant %s not charged (%d credits available); "
                        "they stay failed", len(rows), tenant_id, wallet.available)
    return allowed


def _accept_late(model, targets: dict[int, _Target], affordable: set[tuple[str, int]]) -> list[int]:
    """Failed-as-unconfirmed rows the platform accepted after all (see `_affordable_late`): back
    to `sent`. The caller reserves and consumes their credit."""
    late = [t for t in _late(targets) if (model._meta.table_name, t.row.id) in affordable]
    moved: list[int] = []
    for chunk in _chunks(late):
        ids = [t.row.id for t in chunk]
        changes: dict = {model.status: "sent", model.error_code: None, model.last_error: None,
                         model.failed_at: None, model.claim_token: None,
                         model.wam_id: Case(model.id, [(t.row.id, t.earliest().wamid) for t in chunk]),
                         model.sent_at: Case(model.id, [(t.row.id, _at(t.earliest())) for t in chunk])}
        if model is CampaignRecipient:
            changes[model.message_id] = Case(model.id, list(zip(ids, public_ids("msg_", len(ids)), strict=True)))
        moved += [row.id for row in model.update(changes)
                  .where(model.id.in_(ids) & (model.status == "failed") & (model.error_code == UNCONFIRMED)
                         & model.wam_id.is_null())
                  .returning(model.id).execute()]
    return moved


def _advance(model, targets: dict[int, _Target], status: str, allowed_from: tuple[str, ...],
             extra: dict | None = None) -> list[int]:
    """Move rows that have a `status` update and are still in `allowed_from`; returns the ids moved."""
    chosen = [(t.row.id, t.latest(status)) for t in targets.values() if t.latest(status) is not None]
    moved: list[int] = []
    column = {"delivered": model.delivered_at, "read": model.read_at, "failed": model.failed_at}[status]
    for chunk in _chunks(chosen):
        ids = [row_id for row_id, _ in chunk]
        changes: dict = {model.status: status, column: Case(model.id, [(i, _at(u)) for i, u in chunk])}
        if extra:
            changes.update(extra(chunk))
        query = (model.update(changes).where(model.id.in_(ids) & model.status.in_(allowed_from))
                 .returning(model.id))
        moved += [row.id for row in query.execute()]
    return moved


def _failure_columns(model):
    def columns(chunk):
        errors = {row_id: _error(update) for row_id, update in chunk}
        return {model.error_code: Case(model.id, [(i, e["code"][:32]) for i, e in errors.items()]),
                model.last_error: Case(model.id, [(i, e["message"][:1000]) for i, e in errors.items()])}
    return columns


def _reload(model, ids: list[int]) -> dict[int, Any]:
    rows: dict[int, Any] = {}
    for chunk in _chunks(ids):
        rows.update({row.id: row for row in model.select().where(model.id.in_(chunk))})
    return rows


def _progress(model, targets: dict[int, _Target], affordable: set[tuple[str, int]]) -> dict[str, list[int]]:
    """Apply every transition in order; returns the ids moved into each status."""
    moved = {"sent": _accept(model, targets), "late": _accept_late(model, targets, affordable)}
    moved["delivered"] = _advance(model, targets, "delivered", ("sent",))
    moved["read"] = _advance(model, targets, "read", ("sent", "delivered"))
    moved["failed"] = _advance(model, targets, "failed", ("sent", "delivered"), _failure_columns(model))
    return moved


def _apply_recipients(targets: dict[int, _Target], affordable: set[tuple[str, int]], outcome: _Outcome) -> None:
    moved = _progress(CampaignRecipient, targets, affordable)
    changed = {row_id for ids in moved.values() for row_id in ids}
    if not changed:
        return
    rows = _reload(CampaignRecipient, list(changed))
    campaigns = {c.id: c for c in Campaign.select().where(
        Campaign.id.in_(list({row.campaign_id for row in rows.values()})))}
    per_campaign: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for status, ids in moved.items():
        for row_id in ids:
            per_campaign[rows[row_id].campaign_id][status].append(row_id)
    account_of = {rows[row_id].campaign_id: targets[row_id].account for row_id in changed}
    events: dict[str, list] = defaultdict(list)
    for campaign_id, by_status in per_campaign.items():
        campaign = campaigns[campaign_id]
        account = account_of[campaign_id]
        late = by_status.pop("late", [])
        by_status["sent"] = by_status.get("sent", []) + late
        accepted = by_status["sent"]
        outcome.business |= {(account.id, rows[i].wa_id) for i in accepted}
        # Accepted now: consumed (a late acceptance reserved again first). Failed after
        # acceptance: refunded.
        outcome.counters[campaign_id] = {"reserve": len(late), "consume": len(accepted),
                                         "refund": len(by_status.get("failed", []))}
        if accepted:
            # Accepting the last queued recipient may finish its campaign.
            outcome.accepting.add(campaign_id)
        for status in ("sent", "delivered", "read", "failed"):
            for row_id in by_status.get(status, []):
                update = targets[row_id].earliest() if status == "sent" else targets[row_id].latest(status)
                error = _error(update) if status == "failed" else None
                events[status].append((campaign.tenant_id, message_event(
                    campaign.public_id, account.public_id, rows[row_id], status, _at(update), error)))
    for status in ("sent", "delivered", "read", "failed"):
        emit_rows(f"message.{status}", events[status])


def _apply_messages(targets: dict[int, _Target], affordable: set[tuple[str, int]], outcome: _Outcome) -> None:
    moved = _progress(Message, targets, affordable)
    changed = {row_id for ids in moved.values() for row_id in ids}
    if not changed:
        return
    rows = _reload(Message, list(changed))
    late = set(moved.pop("late"))
    moved["sent"] = moved["sent"] + sorted(late)
    events: dict[str, list] = defaultdict(list)
    for status in ("sent", "delivered", "read", "failed"):
        for row_id in moved[status]:
            message, account = rows[row_id], targets[row_id].account
            update = targets[row_id].earliest() if status == "sent" else targets[row_id].latest(status)
            entry = {"messaging_account_id": account.id, "reference": message.public_id}
            if status == "sent":
                if row_id in late:  # recovery released its credit: reserved again
                    outcome.wallet.append(credits.Move(message.tenant_id, "reserve", 1, entry))
                outcome.wallet.append(credits.Move(message.tenant_id, "consume", 1, entry))
                outcome.business.add((account.id, message.to))
            elif status == "failed":
                outcome.wallet.append(credits.Move(message.tenant_id, "refund", 1,
                                                   {**entry, "description": REFUND_REASON}))
            error = _error(update) if status == "failed" else None
            events[status].append((message.tenant_id,
                                   event_fields(message, account.public_id, status, _at(update), error)))
    for status in ("sent", "delivered", "read", "failed"):
        emit_rows(f"message.{status}", events[status])
