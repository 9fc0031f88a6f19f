"""Applying the platform's message status updates to campaign recipients and single messages.

The platform batches status updates, retries them for days and does not keep their order, so
every update only moves a row forward:

    queued -> sent -> delivered -> read        (and queued / sent / delivered -> failed)

A row that did not move is skipped, and only rows that moved get an event, so a duplicate or a
late `delivered` after `read` changes nothing and emits nothing.

Rows are found by wamid, or, for those still `queued` (the worker died, or its answer was lost,
before the wamid was recorded), by the `biz_opaque_callback_data` the dispatcher sent: the
recipient's `rcp_` id or the message's `msg_` id. Any status proves the platform accepted the
message, so such a row is first accepted (credit consumed, `message.sent`), then moved on.
A `failed` after acceptance refunds the credit.

A batch costs a fixed handful of statements whatever its size (hand-written SQL: peewee would
build a node per value):

1. The recipient rows its updates name are read with their campaign and number in one SELECT,
   locked as they are read, in ascending id (docs/reliability.md's lock order; PostgreSQL's
   READ COMMITTED hands a locked row back as the writer before left it, and SQLite runs one
   writer at a time). The message rows are read the same way, for the updates no recipient took.
2. Each row's transitions are worked out from the row as read, in the order of the chain above:
   accepted (or accepted late, see `_affordable_late`), then `delivered` if it is `sent`, then
   `read` if it is `sent` or `delivered`, then `failed` if it is `sent` or `delivered` -- what a
   conditional UPDATE per transition would do, one after another.
3. The rows that moved are written by one UPDATE per table (a CASE by id per column), which also
   checks each row is still in the status it was read in.
4. The business sends, the campaigns' counters (credits and recipients per status, additions)
   and the wallets, in the lock order; then every `message.*` event in one INSERT: the
   recipients' `sent`, `delivered`, `read` and `failed`, then the messages' in the same order.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import operator
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from messaging.webhooks import StatusUpdate
from models.clock import to_utc_naive, utcnow
from models.events.outbox import emit_named_rows
from models.ids import new_ids
from models.numbers.accounts import record_business_sends_many
from models.sending import UNCONFIRMED
from models.sending.campaign_counters import add_to_counters, count_moved, ledger_moves
from models.sending.campaign_ends import finish_after_commit
from models.sending.campaign_events import message_event
from models.sending.messages import event_fields
from models.sending.tables import CampaignRecipient, Message
from models.store.db import atomic, bound_datetime, db, execute, is_postgres, lock_rows, placeholders, unindexed
from models.tenancy import credits

log = logging.getLogger(__name__)
CHUNK = 400  # values per IN (...) list, rows per UPDATE
ONE_READ = 2000  # wamids and callbacks found in one statement (a POST holds up to 1000 updates)
STATUSES = ("sent", "delivered", "read", "failed")
REFUND_REASON = "the platform reported a failure after accepting"


class _Recipient(NamedTuple):
    id: int
    public_id: str
    status: str
    wam_id: str | None
    error_code: str | None
    wa_id: str
    external_contact_id: str | None
    campaign_id: int
    tenant_id: int
    campaign_public_id: str
    account_id: int
    phone_id: str | None
    account_public_id: str


class _Message(NamedTuple):
    id: int
    public_id: str
    status: str
    wam_id: str | None
    error_code: str | None
    to: str
    tenant_id: int
    account_id: int
    phone_id: str | None
    account_public_id: str


@dataclass(frozen=True)
class _Table:
    """One of the two tables statuses move, and how its rows are read."""

    model: Any
    name: str
    prefix: str  # of the public ids the dispatcher sends as callback data
    row: type
    select: str  # the columns of `row`, with the campaign and number they belong to


_RECIPIENTS = _Table(
    CampaignRecipient, "campaign_recipient", "rcp_", _Recipient,
    'SELECT r.id, r.public_id, r.status, r.wam_id, r.error_code, r.wa_id, r.external_contact_id, r.campaign_id, '
    'c.tenant_id, c.public_id, c.account_id, a.phone_id, a.public_id FROM "campaign_recipient" r '
    'JOIN "campaign" c ON c.id = r.campaign_id JOIN "messaging_account" a ON a.id = c.account_id')
_MESSAGES = _Table(
    Message, "message", "msg_", _Message,
    'SELECT r.id, r.public_id, r.status, r.wam_id, r.error_code, r."to", r.tenant_id, r.account_id, a.phone_id, '
    'a.public_id FROM "message" r JOIN "messaging_account" a ON a.id = r.account_id')


_TIMESTAMP = operator.attrgetter("timestamp")


@dataclass
class _Target:
    """One recipient or message and the updates that name it in this call."""

    row: Any
    updates: list[StatusUpdate] = field(default_factory=list)

    def latest(self, status: str) -> StatusUpdate | None:
        if len(self.updates) == 1:  # nearly every row: one status of it in the batch
            return self.updates[0] if self.updates[0].status == status else None
        found = [u for u in self.updates if u.status == status]
        return max(found, key=_TIMESTAMP) if found else None

    def earliest(self) -> StatusUpdate:
        return self.updates[0] if len(self.updates) == 1 else min(self.updates, key=_TIMESTAMP)


def apply_status_updates(updates: list[StatusUpdate]) -> None:
    """Move recipients and messages forward by the platform's status updates (one transaction).

    The lock order of docs/reliability.md: the recipient rows, then the message rows (each in
    ascending id), then the business sends, the campaigns' counters and the wallets. The
    campaign rows are never locked here; campaigns this finishes are completed after commit.
    """
    if not updates:
        return
    # The caller's transaction as it is (its batch stamp commits with it); a failure raises and
    # rolls it back, so a savepoint would only cost two statements.
    with atomic() if not db.in_transaction() else contextlib.nullcontext():
        recipients, found = _targets(_RECIPIENTS, updates, set())
        messages, _found = _targets(_MESSAGES, updates, found)
        affordable = _affordable_late(recipients, messages)
        outcome = _Outcome()
        if recipients:
            _apply_recipients(recipients, affordable, outcome)
        if messages:
            _apply_messages(messages, affordable, outcome)
        record_business_sends_many(outcome.business, utcnow())
        add_to_counters(outcome.counters)
        credits.apply_moves(ledger_moves(outcome.counters, REFUND_REASON, outcome.campaigns) + outcome.wallet)
        emit_named_rows(outcome.events)
        finish_after_commit(outcome.accepting)


class _Campaign(NamedTuple):
    """What `ledger_moves` reads of a campaign, taken from the rows already read."""

    id: int
    public_id: str
    tenant_id: int
    account_id: int


@dataclass
class _Outcome:
    """What the rows that moved ask of the shared rows, written last in the lock order."""

    business: set[tuple[int, str]] = field(default_factory=set)
    counters: dict[int, dict[str, int]] = field(default_factory=dict)  # campaign id -> kind -> n
    campaigns: dict[int, _Campaign] = field(default_factory=dict)
    wallet: list[credits.Move] = field(default_factory=list)  # single messages' own entries
    accepting: set[int] = field(default_factory=set)  # campaigns a recipient was accepted in
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)  # (name, tenant, fields)


def _chunks(values: list, size: int = CHUNK):
    for start in range(0, len(values), size):
        yield values[start:start + size]


def _targets(table: _Table, updates: list[StatusUpdate], taken: set[str]) -> tuple[dict[int, _Target], set[str]]:
    """The rows of `table` the updates name (by wamid, or by callback data of the table's prefix),
    locked, each with its updates; and the wamids of every row read. Updates whose wamid a row of
    another table has (`taken`) are that row's: the platform names one send by one wamid."""
    wamids = list({u.wamid for u in updates if u.wamid not in taken})
    callbacks = list({u.callback_data for u in updates if u.callback_data and u.callback_data.startswith(table.prefix)})
    rows = _read(table, wamids, callbacks)
    by_wamid_row: dict[str, int] = {row.wam_id: row_id for row_id, row in rows.items() if row.wam_id}
    by_public: dict[str, int] = {row.public_id: row_id for row_id, row in rows.items()}
    targets: dict[int, _Target] = {}
    for update in updates:
        row_id = by_wamid_row.get(update.wamid)
        if row_id is None and update.callback_data:
            row_id = by_public.get(update.callback_data)
            # The callback names the row, but a row that already has another wamid is another
            # send: a status for a different wamid must not move it.
            if row_id is not None and rows[row_id].wam_id not in (None, update.wamid):
                row_id = None
        if row_id is None:
            continue
        row = rows[row_id]
        if row.phone_id != update.phone_number_id:
            continue  # another number's message: callback data is ours, but be strict anyway
        target = targets.get(row_id)
        if target is None:
            target = targets[row_id] = _Target(row)
        target.updates.append(update)
    return targets, taken | set(by_wamid_row)


def _read(table: _Table, wamids: list[str], callbacks: list[str]) -> dict[int, Any]:
    """The rows with these wamids or public ids, locked in ascending id: as they are read, in one
    statement (a sorted read locked row by row in its order) for any batch the platform posts (up
    to 1000 updates); else found first, then locked together and read by id."""
    if not wamids and not callbacks:
        return {}
    lock = " ORDER BY r.id FOR UPDATE OF r" if is_postgres() else ""
    if len(wamids) + len(callbacks) <= ONE_READ:
        found = [f"r.wam_id IN ({placeholders(len(wamids))})"] if wamids else []
        found += [f"r.public_id IN ({placeholders(len(callbacks))})"] if callbacks else []
        cursor = execute(f"{table.select} WHERE {' OR '.join(found)}{lock}", [*wamids, *callbacks])
        return {values[0]: table.row(*values) for values in cursor.fetchall()}
    ids: set[int] = set()
    for column, values in (("wam_id", wamids), ("public_id", callbacks)):
        for chunk in _chunks(values):
            ids |= {row_id for (row_id,) in execute(
                f'SELECT id FROM "{table.name}" WHERE {column} IN ({placeholders(len(chunk))})', chunk).fetchall()}
    lock_rows(table.model, ids)
    rows: dict[int, Any] = {}
    for chunk in _chunks(sorted(ids)):
        cursor = execute(f"{table.select} WHERE r.id IN ({placeholders(len(chunk))})", chunk)
        rows.update((values[0], table.row(*values)) for values in cursor.fetchall())
    return rows


def _at(update: StatusUpdate | None) -> dt.datetime:
    return to_utc_naive(update.timestamp) if update is not None else utcnow()


def _error(update: StatusUpdate) -> dict[str, str]:
    first = update.errors[0] if update.errors else {}
    details = (first.get("error_data") or {}).get("details") if isinstance(first.get("error_data"), dict) else None
    return {"code": str(first.get("code", "unknown")),
            "message": str(details or first.get("message") or first.get("title") or "delivery failed")}


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
    late = [(_RECIPIENTS, t) for t in _late(recipients)] + [(_MESSAGES, t) for t in _late(messages)]
    if not late:
        return set()
    per_tenant: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for table, target in late:
        per_tenant[target.row.tenant_id].append((table.name, target.row.id))
    allowed: set[tuple[str, int]] = set()
    for tenant_id, rows in per_tenant.items():
        wallet = credits.wallet_of(tenant_id)
        if wallet.status == "active" and wallet.available >= len(rows):
            allowed.update(rows)
        else:
            log.warning("late acceptance of %d sends of tenant %s not charged (%d credits available); "
                        "they stay failed", len(rows), tenant_id, wallet.available)
    return allowed


@dataclass
class _Moves:
    """What one table's rows do in this call: the ids moved into each status (`late`: accepted
    after recovery had failed them), the columns each moved row is written with, and the status
    each was read in."""

    moved: dict[str, list[int]] = field(default_factory=lambda: {s: [] for s in ("sent", "late", *STATUSES[1:])})
    columns: dict[int, dict[str, Any]] = field(default_factory=dict)
    read_as: dict[int, str] = field(default_factory=dict)
    wamids: dict[int, str] = field(default_factory=dict)  # of the rows accepted now


def _plan(table: _Table, targets: dict[int, _Target], affordable: set[tuple[str, int]]) -> _Moves:
    """Each row's transitions, in the chain's order, from the row as read (locked): what one
    conditional UPDATE per transition would leave."""
    moves = _Moves()
    accepted: list[int] = []
    for row_id in sorted(targets):
        target = targets[row_id]
        row = target.row
        status = row.status
        columns: dict[str, Any] = {}
        late = status == "failed" and row.error_code == UNCONFIRMED and row.wam_id is None \
            and (table.name, row_id) in affordable
        if status == "queued" or late:
            first = target.earliest()
            columns.update(wam_id=first.wamid, sent_at=_at(first), claim_token=None)
            if late:
                columns.update(error_code=None, last_error=None, failed_at=None)
            moves.moved["late" if late else "sent"].append(row_id)
            moves.wamids[row_id] = first.wamid
            accepted.append(row_id)
            status = "sent"
        delivered = target.latest("delivered")
        if delivered is not None and status == "sent":
            columns["delivered_at"] = _at(delivered)
            moves.moved["delivered"].append(row_id)
            status = "delivered"
        read = target.latest("read")
        if read is not None and status in ("sent", "delivered"):
            columns["read_at"] = _at(read)
            moves.moved["read"].append(row_id)
            status = "read"
        failed = target.latest("failed")
        if failed is not None and status in ("sent", "delivered"):
            error = _error(failed)
            columns.update(failed_at=_at(failed), error_code=error["code"][:32], last_error=error["message"][:1000])
            moves.moved["failed"].append(row_id)
            status = "failed"
        if status != row.status or columns:
            columns["status"] = status
            moves.columns[row_id] = columns
            moves.read_as[row_id] = row.status
    if table is _RECIPIENTS and accepted:
        for row_id, message_id in zip(accepted, new_ids("msg_", len(accepted)), strict=True):
            moves.columns[row_id]["message_id"] = message_id
    return moves


def _write(table: _Table, moves: _Moves) -> None:
    """The moved rows in one UPDATE per chunk: each column a CASE by id over the rows that set it,
    and every row still in the status it was read in (it is locked: anything else is a bug)."""
    ids = sorted(moves.columns)
    for chunk in _chunks(ids):
        sets: list[str] = []
        params: list = []
        names = sorted({name for row_id in chunk for name in moves.columns[row_id]})
        for name in names:
            pairs = [(row_id, moves.columns[row_id][name]) for row_id in chunk if name in moves.columns[row_id]]
            sets.append(f"{name} = CASE id{' WHEN ? THEN ?' * len(pairs)} ELSE {name} END")
            for row_id, value in pairs:
                params += [row_id, bound_datetime(value) if isinstance(value, dt.datetime) else value]
        by_status: dict[str, list[int]] = defaultdict(list)
        for row_id in chunk:
            by_status[moves.read_as[row_id]].append(row_id)
        where = " OR ".join(f"({unindexed('status')} = ? AND id IN ({placeholders(len(group))}))"
                            for group in by_status.values())
        for status, group in by_status.items():
            params += [status, *group]
        written = execute(f'UPDATE "{table.name}" SET {", ".join(sets)} WHERE {where}', params).rowcount
        if written != len(chunk):
            raise RuntimeError(f"{len(chunk) - written} locked {table.name} rows changed under the lock")


def _progress(table: _Table, targets: dict[int, _Target], affordable: set[tuple[str, int]]) -> _Moves:
    moves = _plan(table, targets, affordable)
    _write(table, moves)
    return moves


def _row_after(target: _Target, moves: _Moves) -> Any:
    """The row as the events tell it: with the wamid it was accepted under."""
    wamid = moves.wamids.get(target.row.id)
    return target.row if wamid is None else target.row._replace(wam_id=wamid)


def _apply_recipients(targets: dict[int, _Target], affordable: set[tuple[str, int]], outcome: _Outcome) -> None:
    moves = _progress(_RECIPIENTS, targets, affordable)
    if not moves.columns:
        return
    per_campaign: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    campaign_rows: dict[int, _Recipient] = {}  # a row of each campaign: its campaign's and number's ids
    for status, ids in moves.moved.items():
        for row_id in ids:
            row = targets[row_id].row
            per_campaign[row.campaign_id][status].append(row_id)
            campaign_rows.setdefault(row.campaign_id, row)
    events: dict[str, list] = defaultdict(list)
    for campaign_id, by_status in per_campaign.items():
        some = campaign_rows[campaign_id]
        outcome.campaigns[campaign_id] = _Campaign(campaign_id, some.campaign_public_id, some.tenant_id,
                                                   some.account_id)
        late = by_status.pop("late", [])
        by_status["sent"] = by_status.get("sent", []) + late
        accepted = by_status["sent"]
        outcome.business |= {(some.account_id, targets[i].row.wa_id) for i in accepted}
        # Accepted now: consumed (a late acceptance reserved again first). Failed after
        # acceptance: refunded.
        outcome.counters[campaign_id] = {"reserve": len(late), "consume": len(accepted),
                                         "refund": len(by_status.get("failed", []))}
        for row_id in {row_id for ids in by_status.values() for row_id in ids}:
            count_moved(outcome.counters, campaign_id, moves.read_as[row_id], moves.columns[row_id]["status"])
        if accepted:
            # Accepting the last queued recipient may finish its campaign.
            outcome.accepting.add(campaign_id)
        for status in STATUSES:
            for row_id in by_status.get(status, []):
                target = targets[row_id]
                update = target.earliest() if status == "sent" else target.latest(status)
                error = _error(update) if status == "failed" else None
                events[status].append((some.tenant_id, message_event(
                    some.campaign_public_id, some.account_public_id, _row_after(target, moves), status,
                    _at(update), error)))
    for status in STATUSES:
        outcome.events += [(f"message.{status}", tenant_id, fields) for tenant_id, fields in events[status]]


def _apply_messages(targets: dict[int, _Target], affordable: set[tuple[str, int]], outcome: _Outcome) -> None:
    moves = _progress(_MESSAGES, targets, affordable)
    if not moves.columns:
        return
    late = set(moves.moved.pop("late"))
    moves.moved["sent"] = moves.moved["sent"] + sorted(late)
    for status in STATUSES:
        for row_id in moves.moved[status]:
            target = targets[row_id]
            message = _row_after(target, moves)
            update = target.earliest() if status == "sent" else target.latest(status)
            entry = {"messaging_account_id": message.account_id, "reference": message.public_id}
            if status == "sent":
                if row_id in late:  # recovery released its credit: reserved again
                    outcome.wallet.append(credits.Move(message.tenant_id, "reserve", 1, entry))
                outcome.wallet.append(credits.Move(message.tenant_id, "consume", 1, entry))
                outcome.business.add((message.account_id, message.to))
            elif status == "failed":
                outcome.wallet.append(credits.Move(message.tenant_id, "refund", 1,
                                                   {**entry, "description": REFUND_REASON}))
            error = _error(update) if status == "failed" else None
            outcome.events.append((f"message.{status}", message.tenant_id,
                                   event_fields(message, message.account_public_id, status, _at(update), error)))
