"""Sharing an engine's send capacity: pure functions, no storage."""

from __future__ import annotations

from collections import defaultdict


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


def split_evenly(numbers: dict[int, list[int]], wanted: dict[int, int]) -> list[tuple[int, int]]:
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
