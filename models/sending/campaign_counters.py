"""A campaign's counters: its credits (reserved, consumed, released, refunded) and its recipients
per status, in a row of their own (`CampaignCounters`), moved together with the tenant's wallet.

The invariants every writer keeps:

- A recipient's credit is reserved at creation and then either consumed (the platform accepted
  it) or released (it never reached the platform); a failure reported after acceptance refunds.
  `reserved = consumed + released` once nothing is in flight, and each counter moves in the same
  transaction as its ledger entry (`move_credits_many`). The counters are added to rather than
  read and written back, so recording sends and status updates never locks the campaign row (the
  lock order is in docs/reliability.md).
- The recipients per status are counted in the same row: every statement that moves recipients
  from one status to another notes the move (`count_moved`) and adds it to the counters
  (`add_to_counters`, or `move_credits_many` with the credits) in its own transaction, so the
  counters always add up to `total_recipients` and a read never counts the recipients.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from models.sending.tables import COUNTERS, Campaign, CampaignCounters
from models.store.db import execute, is_postgres, placeholders
from models.tenancy import credits

CREDIT_COLUMNS = {"reserve": CampaignCounters.reserved, "consume": CampaignCounters.consumed,
                  "release": CampaignCounters.released, "refund": CampaignCounters.refunded}
CREDIT_KINDS = tuple(CREDIT_COLUMNS)
# A campaign's counter columns by the kind of move that adds to them: the credit kinds above, and
# each recipient status, added to by the recipients moved into it and taken from by those moved out.
COUNTER_COLUMNS = {**CREDIT_COLUMNS, **{status: getattr(CampaignCounters, status) for status in COUNTERS}}


def count_moved(moves: dict[int, dict[str, int]], campaign_id: int, before: str, after: str, n: int = 1) -> None:
    """Note in `moves` (for `add_to_counters` or `move_credits_many`) that `n` of the campaign's
    recipients moved from status `before` to `after`."""
    if n and before != after:
        kinds = moves.setdefault(campaign_id, {})
        kinds[before] = kinds.get(before, 0) - n
        kinds[after] = kinds.get(after, 0) + n


def counters_of(campaign_ids: Iterable[int]) -> dict[int, CampaignCounters]:
    ids = list(campaign_ids)
    if not ids:
        return {}
    return {row.campaign_id: row for row in CampaignCounters.select().where(CampaignCounters.campaign.in_(ids))}


def campaign_credits(campaign: Campaign | int) -> CampaignCounters:
    campaign_id = campaign if isinstance(campaign, int) else campaign.id
    return CampaignCounters.get_by_id(campaign_id)


def move_credits(campaign: Campaign, *, consume: int = 0, release: int = 0, refund: int = 0,
                 description: str | None = None) -> None:
    """Ledger entries and the campaign's credit counters, together; call inside a transaction."""
    move_credits_many({campaign.id: {"consume": consume, "release": release, "refund": refund}}, description)


def move_credits_many(moves: dict[int, dict[str, int]], description: str | None = None) -> None:
    """Credit movements of many campaigns (`{campaign id: {"reserve"|"consume"|"release"|"refund":
    n}}`, with the recipients they moved per status, `count_moved`), in the lock order of
    docs/reliability.md: the counter rows (ascending campaign id), then the wallets (ascending
    tenant). Call after the transaction's recipient rows are written and its business sends
    recorded. Each tenant gets one ledger entry per kind (naming the
    campaign when there is one); a reservation the wallet cannot cover raises (and the caller's
    transaction rolls back).
    """
    add_to_counters(moves)
    credits.apply_moves(ledger_moves(moves, description))


def release_withdrawn(withdrawn: dict[int, int], before: str, after: str, description: str | None) -> None:
    """`withdrawn[campaign id]` recipients of each campaign moved from `before` to `after` without
    reaching the platform (cancelled, failed before or without a send): their credit released and
    the move counted, with `move_credits_many`."""
    moves = {campaign_id: {"release": n} for campaign_id, n in withdrawn.items()}
    for campaign_id, n in withdrawn.items():
        count_moved(moves, campaign_id, before, after, n)
    move_credits_many(moves, description)


def _nonzero(moves: dict[int, dict[str, int]]) -> dict[int, dict[str, int]]:
    moves = {campaign_id: {k: n for k, n in kinds.items() if n} for campaign_id, kinds in moves.items()}
    return {campaign_id: kinds for campaign_id, kinds in moves.items() if kinds}


def ledger_moves(moves: dict[int, dict[str, int]], description: str | None = None,
                 campaigns: dict[int, Any] | None = None) -> list[credits.Move]:
    """The wallet movements of campaigns' credit moves: one per tenant and kind. `campaigns`, when
    the caller has them: each campaign's `id`, `public_id`, `tenant_id` and `account_id` by id."""
    moves = _nonzero({campaign_id: {kind: n for kind, n in kinds.items() if kind in CREDIT_COLUMNS}
                      for campaign_id, kinds in moves.items()})
    if not moves:
        return []
    ids = sorted(moves)
    if campaigns is None:
        campaigns = {c.id: c for c in Campaign.select(Campaign.id, Campaign.public_id, Campaign.tenant,
                                                      Campaign.account).where(Campaign.id.in_(ids))}
    per_tenant: dict[int, dict[str, list[int]]] = {}
    for campaign_id in sorted(moves):
        for kind in moves[campaign_id]:
            per_tenant.setdefault(campaigns[campaign_id].tenant_id, {}).setdefault(kind, []).append(campaign_id)
    entries: list[credits.Move] = []
    for tenant_id in sorted(per_tenant):
        for kind in CREDIT_KINDS:
            ids = per_tenant[tenant_id].get(kind)
            if not ids:
                continue
            single = campaigns[ids[0]] if len(ids) == 1 else None
            options: dict[str, Any] = {
                "campaign_id": single.id if single else None,
                "messaging_account_id": single.account_id if single else None,
                "reference": single.public_id if single else ",".join(campaigns[c].public_id for c in ids)[:255]}
            if kind in ("release", "refund") and description:
                options["description"] = description[:1000]
            entries.append(credits.Move(tenant_id, kind, sum(moves[c][kind] for c in ids), options))
    return entries


def add_to_counters(moves: dict[int, dict[str, int]]) -> None:
    """Add to the campaigns' counters (`{campaign id: {kind of COUNTER_COLUMNS: n}}`): their rows
    locked in ascending campaign id, then one UPDATE for all of them (hand-written: it runs in
    every batch a campaign sends)."""
    moves = _nonzero(moves)
    if not moves:
        return
    ids = sorted(moves)
    table = CampaignCounters._meta.table_name
    if is_postgres():
        execute(f'SELECT campaign_id FROM "{table}" WHERE campaign_id IN ({placeholders(len(ids))}) '
                "ORDER BY campaign_id FOR UPDATE", ids).fetchall()
    changes, params = [], []
    for kind, column in COUNTER_COLUMNS.items():
        deltas = [(campaign_id, moves[campaign_id][kind]) for campaign_id in ids if moves[campaign_id].get(kind)]
        if deltas:
            name = f'"{column.column_name}"'
            changes.append(f"{name} = {name} + CASE campaign_id{' WHEN ? THEN ?' * len(deltas)} ELSE 0 END")
            params += [value for pair in deltas for value in pair]
    execute(f'UPDATE "{table}" SET {", ".join(changes)} WHERE campaign_id IN ({placeholders(len(ids))})',
            params + ids)
