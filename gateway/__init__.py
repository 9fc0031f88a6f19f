"""The payment gateway adapter: checkout links, signed notifications, transactions.

`gateway.mercadopago` speaks MercadoPago's Checkout Pro wire format (preferences, `x-signature`
notifications, `/v1/payments`); `gateway.simulator` is a local stand-in for it. Like
`messaging/`, this package imports nothing of ours: the service hands it credentials and
settings, and gets back plain values (exact decimals, aware datetimes).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

# What a transaction's gateway status means for the debt, whatever the gateway calls it.
PAID = "paid"  # the money was taken (it may since have been refunded in part)
REFUNDED = "refunded"  # given back whole
CHARGED_BACK = "charged_back"  # taken back by the card issuer
FAILED = "failed"  # declined or cancelled before any money moved
PENDING = "pending"  # not decided yet


class GatewayError(Exception):
    """The gateway could not be reached or answered with an error; `status` is its HTTP status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status == 429 or self.status >= 500


class InvalidNotification(Exception):
    """A notification that is unsigned, badly signed, stale or malformed; `code` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class CheckoutLink:
    id: str  # the gateway's id for it (a preference id)
    url: str  # where the payer goes


@dataclass(frozen=True)
class Notification:
    """A verified notification: which resource changed. Its body is never trusted beyond that."""

    request_id: str
    topic: str  # "payment" for the ones that matter here
    action: str | None
    resource_id: str  # the resource the signature covers (the query's `data.id`)
    sent_at: dt.datetime
    # What the body says of the transaction, when it says anything: checked against the
    # gateway's record, never used in its place.
    claimed_amount: Decimal | None = None
    claimed_currency: str | None = None


@dataclass(frozen=True)
class Transaction:
    """A transaction as the gateway records it (the authoritative state)."""

    id: str
    state: str  # PAID, REFUNDED, CHARGED_BACK, FAILED or PENDING
    status: str  # the gateway's own word
    amount: Decimal
    currency: str
    refunded: Decimal  # given back so far
    reference: str | None  # what the link was created with (our link id)
    paid_at: dt.datetime | None
    updated_at: dt.datetime | None

    @property
    def reversed_amount(self) -> Decimal:
        """How much of the payment has been taken back: all of it for a refund or a chargeback."""
        if self.state in (REFUNDED, CHARGED_BACK):
            return self.amount
        return min(self.refunded, self.amount)


class Gateway(Protocol):
    def create_link(self, *, reference: str, title: str, amount: Decimal, currency: str,
                    notification_url: str, expires_at: dt.datetime, back_url: str | None = None) -> CheckoutLink: ...

    def parse_notification(self, headers: Mapping[str, str], query: Mapping[str, str], body: bytes,
                           secret: str, now: dt.datetime) -> Notification: ...

    def get_transaction(self, transaction_id: str) -> Transaction: ...

    def list_transactions(self, since: dt.datetime, until: dt.datetime | None = None) -> Iterator[Transaction]: ...
