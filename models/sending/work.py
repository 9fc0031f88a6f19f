"""The units the engine moves between its stores, the pacer and the messenger."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Protocol

from messaging.errors import PlatformError


@dataclass
class Job:
    """One claimed message (a campaign recipient or a single message), with everything needed to
    send it and to record the outcome. `store` names the store that claimed it."""

    store: str
    id: int
    public_id: str
    tenant_id: int
    account_id: int
    account_public_id: str
    phone_id: str
    token: str
    wa_id: str
    throttled: int
    retries: int
    payload: dict[str, Any]
    claim_token: str
    campaign_id: int | None = None
    campaign_public_id: str | None = None
    external_contact_id: str | None = None
    wam_id: str | None = None
    send_at: float = 0.0  # time.monotonic() of the slot pacing granted: never sent before it
    error: PlatformError | None = None


@dataclass
class NumberPlan:
    """What one store has for one number now."""

    account_id: int
    tenant_id: int
    public_id: str
    mps: int
    due: int  # claimable now
    campaigns: list[int] = field(default_factory=list)  # campaign store: the campaigns with work due
    allowance: int | None = None  # new users the daily limit still allows (None: unlimited)


@dataclass
class BatchResult:
    accepted: int = 0
    failed: int = 0
    retried: int = 0
    unanswered: int = 0
    throttled_numbers: set[int] = field(default_factory=set)
    unanswered_numbers: set[int] = field(default_factory=set)  # sends whose answer was lost
    accepted_numbers: set[int] = field(default_factory=set)
    disconnected: dict[int, str] = field(default_factory=dict)  # number id -> reason
    template_refused: dict[int, str] = field(default_factory=dict)  # campaign id -> reason
    blocked: dict[int, str] = field(default_factory=dict)  # number id -> reason (paused)

    def add(self, other: BatchResult) -> None:
        self.accepted += other.accepted
        self.failed += other.failed
        self.retried += other.retried
        self.unanswered += other.unanswered
        self.throttled_numbers |= other.throttled_numbers
        self.unanswered_numbers |= other.unanswered_numbers
        self.accepted_numbers |= other.accepted_numbers
        self.disconnected.update(other.disconnected)
        self.template_refused.update(other.template_refused)
        self.blocked.update(other.blocked)


class Store(Protocol):
    """Where the engine's work comes from and where its outcomes go."""

    name: str
    in_flight: int  # claimed and unanswered at the last plan, by any engine

    def plan(self, now: dt.datetime | None = None) -> list[NumberPlan]:
        """The numbers with work due now; holds and fails what cannot be sent."""

    def claim(self, grants: dict[int, int], plans: dict[int, NumberPlan], claim_token: str,
              now: dt.datetime | None = None) -> list[Job]:
        """Claim up to `grants[number]` due messages per number, in one transaction."""

    def start(self, jobs: list[Job], now: dt.datetime | None = None) -> set[int]:
        """Mark these claims started, just before their platform calls, in one transaction;
        returns the ids marked (a claim given up meanwhile is not, and is not sent)."""

    def record(self, jobs: list[Job]) -> BatchResult:
        """Write a sent batch's outcomes, credits and events in one transaction."""

    def settle(self, jobs: list[Job], result: BatchResult) -> None:
        """After the record committed: what the outcomes ask of the store (finished campaigns,
        a number that can send no more, a refused template)."""

    def hold(self, plan: NumberPlan, reason: str) -> None:
        """The number rests a while (throttled): mark its work as waiting, if the store shows that."""

    def claims_before(self, when: dt.datetime) -> list[tuple[int, str | None, dt.datetime, bool]]:
        """Claims taken before `when` and still unanswered: (id, claim token, claimed at, started)."""

    def give_back_unstarted(self, claims: list[tuple[int, str | None]]) -> int:
        """Give these claims, (id, claim token), back to the queue if still not started (never
        handed to the platform): sent later at a new slot, no attempt used; returns how many."""

    def fail_unconfirmed(self, claims: list[tuple[int, str | None]], now: dt.datetime) -> int:
        """Fail these claims, (id, claim token), as `send_unconfirmed` (credit released, never
        resent); returns how many were still unanswered under that token."""


def ids_by_claim_token(claims: list[tuple[int, str | None]]) -> dict[str | None, list[int]]:
    """Row ids grouped by the claim token each was read with: a store writes each group with its
    own token check, so a row a later claim took over is left alone."""
    groups: dict[str | None, list[int]] = defaultdict(list)
    for row_id, token in claims:
        groups[token].append(row_id)
    return groups
