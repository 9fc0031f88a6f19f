"""GET /credits/balance and GET /credits/ledger."""

from __future__ import annotations

import math

from api.operation import Reply, ok, operation
from api.pagination import page_params
from api.schemas import PAGE_QUERY, Output, Success
from models.tenancy import credits


class Wallet(Output):
    balance: int
    reserved_balance: int
    available_balance: int
    status: str
    low_balance_threshold: int


class LedgerEntry(Output):
    id: int
    type: str
    amount: int
    balance_after: int
    reserved_after: int
    reference: str | None
    description: str | None
    campaign_id: int | None
    messaging_account_id: int | None
    created_at: str | None


class LedgerMeta(Output):
    current_page: int
    per_page: int
    total: int
    last_page: int


class LedgerPage(Output):
    success: bool
    data: list[LedgerEntry]
    meta: LedgerMeta


class BalanceResource:
    @operation("Read the company's credit balance", scope="credits:read", responses={200: Success[Wallet]},
               errors=(401, 403, 429), tags=("credits",))
    def on_get(self, req, resp) -> Reply:
        return ok(credits.balance_of(req.context.tenant_id))


class LedgerResource:
    @operation("List ledger entries, newest first", scope="credits:read", responses={200: LedgerPage},
               errors=(401, 403, 422, 429), query=PAGE_QUERY, tags=("credits",))
    def on_get(self, req, resp) -> Reply:
        page, per_page = page_params(req)
        entries, total = credits.ledger_entries(req.context.tenant_id, page, per_page)
        return ok(entries, meta={"current_page": page, "per_page": per_page, "total": total,
                                 "last_page": max(1, math.ceil(total / per_page))})


ROUTES = [("/credits/balance", BalanceResource()), ("/credits/ledger", LedgerResource())]
