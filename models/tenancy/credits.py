"""The company-wide wallet and its ledger.

Every change to a wallet is one conditional UPDATE (the condition is the invariant it keeps)
followed by its ledger entry, inside one transaction. Concurrent callers therefore cannot
overspend: the database applies the condition to the row as it is at the moment of the write.

Ledger amounts (see docs/credits.md): `purchase`, `manual_grant`, `manual_adjust`, `consume`,
`refund` are changes to `balance`; `reserve` and `release` are changes to `available_balance`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from models.clock import stored_isoformat, utcnow
from models.errors import InsufficientCredits, Invalid, NotFound, WalletPaused
from models.store.db import after_commit, atomic, db, execute, fetch_one
from models.store.prepared import Prepared
from models.tenancy.tables import LedgerEntry, Wallet, wallet_dict
from models.tenancy.wallet_copies import Changed, wallet_copies

BALANCE_TYPES = ("purchase", "manual_grant", "manual_adjust", "consume", "refund")
RESERVATION_TYPES = ("reserve", "release")
LEDGER_TYPES = BALANCE_TYPES + RESERVATION_TYPES


def wallet_of(tenant_id: int) -> Wallet:
    wallet_id, balance, reserved, status, threshold = _wallet_row(tenant_id)
    return Wallet.from_row(id=wallet_id, tenant=tenant_id, balance=balance, reserved=reserved, status=status,
                           low_balance_threshold=threshold)


def balance_of(tenant_id: int) -> dict:
    """`wallet_of(tenant_id).as_dict()` for the API's most frequent call: made from the row
    without the model in between, and from this process's copy of the row while no change to the
    wallet has committed since it was read (models/tenancy/wallet_copies.py)."""
    _wallet_id, balance, reserved, status, threshold = wallet_copies().row(tenant_id, _wallet_row)
    return wallet_dict(balance, reserved, status, threshold)


def _wallet_row(tenant_id: int) -> tuple:
    # The balance read is the API's most frequent call: fixed SQL, not a query rebuilt per call.
    row = fetch_one('SELECT "id", "balance", "reserved", "status", "low_balance_threshold" FROM "wallet" '
                    'WHERE "tenant_id" = ?', (tenant_id,))
    if row is None:
        raise NotFound("the tenant has no wallet", code="wallet_not_found")
    return row


def _changed(tenant_id: int) -> None:
    """Every change to a wallet calls this after its write: once the write has committed, no
    process answers a balance from a copy read before it (models/tenancy/wallet_copies.py)."""
    after_commit(Changed(wallet_copies(), tenant_id))


def _positive(amount: int) -> int:
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        raise Invalid("the amount must be a positive whole number of credits")
    return amount


def grant(tenant_id: int, amount: int, *, reason: str | None = None, purchase: bool = False,
          reference: str | None = None) -> LedgerEntry:
    """Add credits: an administrator's grant, or a confirmed package purchase."""
    return _moved(tenant_id, "purchase" if purchase else "manual_grant", _positive(amount),
                  reference=reference, description=reason)


def adjust(tenant_id: int, amount: int, *, reason: str | None = None) -> LedgerEntry:
    """A manual correction in either direction; it can never take credits already reserved."""
    if not isinstance(amount, int) or amount == 0:
        raise Invalid("the adjustment must be a non-zero whole number of credits")
    return _moved(tenant_id, "manual_adjust", amount, description=reason)


def _reserve_failure(tenant_id: int, amount: int) -> Exception:
    wallet = wallet_of(tenant_id)
    if wallet.status != "active":
        return WalletPaused("the wallet is paused")
    return InsufficientCredits(
        f"{amount} credits needed, {wallet.available} available",
        details={"required": amount, "available": wallet.available},
    )


def _reserved_failure() -> Exception:
    return Invalid("fewer credits are reserved than the operation names", code="reservation_mismatch")


# Every wallet movement, as hand-written SQL (reservations run in every batch a campaign sends):
# kind -> (the ledger amount's sign, the balance's and the reservation's change per credit, the
# condition the wallet must meet). One conditional UPDATE each, returning what the entry records.
_MOVES = {
    "reserve": (-1, 0, 1, '"status" = \'active\' AND "balance" - "reserved" >= ?'),
    "consume": (-1, -1, -1, '"reserved" >= ?'),
    "release": (1, 0, -1, '"reserved" >= ?'),
    "refund": (1, 1, 0, None),
    "purchase": (1, 1, 0, None),
    "manual_grant": (1, 1, 0, None),
    # The amount is signed: a correction in either direction, never into credits already reserved.
    "manual_adjust": (1, 1, 0, '"balance" + ? >= "reserved"'),
}
_MOVE_SQL = {
    kind: ('UPDATE "wallet" SET "balance" = "balance" + ?, "reserved" = "reserved" + ?, '
           '"ledger_entries" = "ledger_entries" + 1, "updated_at" = ? WHERE "tenant_id" = ?'
           + (f" AND {condition}" if condition else "") + ' RETURNING "balance", "reserved", "ledger_entries"')
    for kind, (_sign, _balance, _reserved, condition) in _MOVES.items()
}
_ENTRY_COLUMNS = ('"tenant_id", "type", "amount", "balance_after", "reserved_after", "position", "reference", '
                  '"description", "campaign_id", "messaging_account_id", "created_at"')
_ENTRY_CHUNK = 500  # ledger rows per INSERT: 11 parameters each, well under SQLite's limit


def _move(tenant_id: int, kind: str, amount: int, now) -> tuple:
    """One wallet movement: the conditional UPDATE; returns the ledger entry's values (without
    its reference fields), or raises what the caller is told when the condition fails."""
    sign, balance_change, reserved_change, condition = _MOVES[kind]
    params = [balance_change * amount, reserved_change * amount, now, tenant_id]
    if condition:
        params.append(amount)
    row = execute(_MOVE_SQL[kind], params).fetchone()
    if row is None:
        if kind == "reserve":
            raise _reserve_failure(tenant_id, amount)
        if kind in ("consume", "release"):
            raise _reserved_failure()
        if kind == "manual_adjust":
            raise InsufficientCredits("the adjustment would take credits that are not available")
        raise NotFound("the tenant has no wallet", code="wallet_not_found")
    _changed(tenant_id)
    balance, reserved, position = row
    return tenant_id, kind, sign * amount, balance, reserved, position


def _entry(move: tuple, now, reference: str | None = None, description: str | None = None,
           campaign_id: int | None = None, messaging_account_id: int | None = None) -> tuple:
    return (*move, reference, description, campaign_id, messaging_account_id, now)


def _insert_entries(entries: list[tuple]) -> list[int]:
    """Ledger rows in as few INSERTs as fit; returns their ids."""
    ids: list[int] = []
    for start in range(0, len(entries), _ENTRY_CHUNK):
        chunk = entries[start:start + _ENTRY_CHUNK]
        ids += [row[0] for row in execute(
            f'INSERT INTO "ledger_entry" ({_ENTRY_COLUMNS}) VALUES '
            f'{", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(chunk))} RETURNING "id"',
            [value for entry in chunk for value in entry]).fetchall()]
    return ids


def _moved(tenant_id: int, kind: str, amount: int, **options) -> LedgerEntry:
    """One movement of an amount its caller has checked, and its ledger entry, in one transaction;
    returns the entry."""
    now = utcnow()
    with atomic():
        entry = _entry(_move(tenant_id, kind, amount, now), now, **options)
        (entry_id,) = _insert_entries([entry])
    (_tenant, entry_type, signed, balance, reserved, position, reference, description, campaign_id,
     messaging_account_id, created_at) = entry
    return LedgerEntry(id=entry_id, tenant=tenant_id, type=entry_type, amount=signed, balance_after=balance,
                       reserved_after=reserved, position=position, reference=reference, description=description,
                       campaign_id=campaign_id, messaging_account_id=messaging_account_id, created_at=created_at)


def reserve(tenant_id: int, amount: int, *, campaign_id: int | None = None,
            messaging_account_id: int | None = None, reference: str | None = None) -> LedgerEntry:
    """Hold credits for messages about to be sent; fails unless the available balance covers them."""
    return _moved(tenant_id, "reserve", _positive(amount), reference=reference, campaign_id=campaign_id,
                  messaging_account_id=messaging_account_id)


def consume(tenant_id: int, amount: int, *, campaign_id: int | None = None,
            messaging_account_id: int | None = None, reference: str | None = None) -> LedgerEntry:
    """The platform accepted messages: reserved credits leave the balance."""
    return _moved(tenant_id, "consume", _positive(amount), reference=reference, campaign_id=campaign_id,
                  messaging_account_id=messaging_account_id)


def release(tenant_id: int, amount: int, *, campaign_id: int | None = None,
            messaging_account_id: int | None = None, reference: str | None = None,
            description: str | None = None) -> LedgerEntry:
    """Messages that never reached the platform: their reservation returns to the available balance."""
    return _moved(tenant_id, "release", _positive(amount), reference=reference, description=description,
                  campaign_id=campaign_id, messaging_account_id=messaging_account_id)


def refund(tenant_id: int, amount: int, *, campaign_id: int | None = None,
           messaging_account_id: int | None = None, reference: str | None = None,
           description: str | None = None) -> LedgerEntry:
    """A message the platform accepted and then failed: its consumed credit comes back."""
    return _moved(tenant_id, "refund", _positive(amount), reference=reference, description=description,
                  campaign_id=campaign_id, messaging_account_id=messaging_account_id)


@dataclass(frozen=True)
class Move:
    """One wallet movement of `apply_moves`: `kind` is reserve, consume, release or refund."""

    tenant_id: int
    kind: str
    amount: int
    options: dict[str, Any] = field(default_factory=dict)


def apply_moves(moves: list[Move]) -> None:
    """Many wallet movements in the caller's transaction, in the lock order: ascending tenant,
    each tenant's in the order given (a reservation before the consumption it covers). One
    conditional UPDATE per movement, then every ledger entry in one INSERT."""
    if not moves:
        return
    now = utcnow()
    # Inside the caller's transaction as it is (no savepoint: a failed movement changed nothing,
    # and its exception rolls the caller back); a transaction of its own when called outside one.
    with atomic() if not db.in_transaction() else contextlib.nullcontext():
        entries = [_entry(_move(move.tenant_id, move.kind, _positive(move.amount), now), now, **move.options)
                   for move in sorted(moves, key=lambda m: m.tenant_id)]
        _insert_entries(entries)


def ledger_page(tenant_id: int, page: int, per_page: int) -> tuple[list[LedgerEntry], int]:
    """One page of the ledger, newest first, and the number of entries: an index seek on the
    entries' positions and a read of the wallet's count, whatever the ledger's size or the page."""
    total, positions = _ledger_positions(tenant_id, page, per_page)
    return (_LEDGER_PAGE.rows(tenant_id, *positions) if positions else []), total


def ledger_entries(tenant_id: int, page: int, per_page: int) -> tuple[list[dict], int]:
    """`ledger_page` as GET /credits/ledger answers it: each entry's `as_dict`, made straight from
    the driver's row (the same two statements; no model object per entry)."""
    total, positions = _ledger_positions(tenant_id, page, per_page)
    if positions is None:
        return [], total
    return [{"id": entry_id, "type": kind, "amount": amount, "balance_after": balance_after,
             "reserved_after": reserved_after, "reference": reference, "description": description,
             "campaign_id": campaign_id, "messaging_account_id": account_id, "created_at": stored_isoformat(created_at)}
            for (entry_id, kind, amount, balance_after, reserved_after, reference, description, campaign_id,
                 account_id, created_at) in _LEDGER_ROWS.driver_rows(tenant_id, *positions)], total


def _ledger_positions(tenant_id: int, page: int, per_page: int) -> tuple[int, tuple[int, int] | None]:
    """The ledger's number of entries (the wallet's count) and the positions of the page's oldest
    and newest entries; None past the end."""
    row = fetch_one(_LEDGER_COUNT, (tenant_id,))
    total = row[0] if row is not None else 0
    newest = total - (page - 1) * per_page
    return total, ((max(1, newest - per_page + 1), newest) if newest >= 1 else None)


_LEDGER_COUNT = 'SELECT "ledger_entries" FROM "wallet" WHERE "tenant_id" = ?'
_LEDGER_PAGE = Prepared(lambda tenant_id, oldest, newest: LedgerEntry.select().where(
    (LedgerEntry.tenant == tenant_id) & LedgerEntry.position.between(oldest, newest))
    .order_by(LedgerEntry.position.desc()), -7_000_000_001, -7_000_000_002, -7_000_000_003)
_LEDGER_ROWS = Prepared(lambda tenant_id, oldest, newest: LedgerEntry.select(
    LedgerEntry.id, LedgerEntry.type, LedgerEntry.amount, LedgerEntry.balance_after, LedgerEntry.reserved_after,
    LedgerEntry.reference, LedgerEntry.description, LedgerEntry.campaign_id, LedgerEntry.messaging_account_id,
    LedgerEntry.created_at).where((LedgerEntry.tenant == tenant_id) & LedgerEntry.position.between(oldest, newest))
    .order_by(LedgerEntry.position.desc()).tuples(), -7_000_000_001, -7_000_000_002, -7_000_000_003)


def set_status(tenant_id: int, status: str) -> Wallet:
    if status not in {"active", "paused"}:
        raise Invalid("a wallet is active or paused")
    Wallet.update(status=status, updated_at=utcnow()).where(Wallet.tenant == tenant_id).execute()
    _changed(tenant_id)
    return wallet_of(tenant_id)


def set_low_balance_threshold(tenant_id: int, threshold: int) -> Wallet:
    if threshold < 0:
        raise Invalid("the threshold cannot be negative")
    Wallet.update(low_balance_threshold=threshold).where(Wallet.tenant == tenant_id).execute()
    _changed(tenant_id)
    return wallet_of(tenant_id)


def ledger(tenant_id: int):
    """The tenant's ledger, newest first (a query, for pagination)."""
    return (LedgerEntry.select().where(LedgerEntry.tenant == tenant_id)
            .order_by(LedgerEntry.id.desc()))
