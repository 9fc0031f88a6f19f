"""MercadoPago Checkout Pro over plain `requests`.

The official SDK (`mercadopago`) fixes its API base URL in a read-only property, so it cannot be
pointed at the simulator or a regional proxy; the four calls used here are small enough to make
directly. Wire format:

    POST /checkout/preferences        {items, external_reference, notification_url, expires,
                                       expiration_date_to} -> {id, init_point}
    GET  /v1/payments/{id}            the payment (status, transaction_amount, currency_id,
                                       transaction_amount_refunded, external_reference, ...)
    GET  /v1/payments/search          ?range=date_last_updated&begin_date&end_date&offset&limit
                                       -> {paging: {total, offset, limit}, results: [payment]}

Notifications: POST to `notification_url?data.id=ID&type=payment` with the headers
`x-signature: ts=TS,v1=HMAC` and `x-request-id`; v1 is HMAC-SHA256, keyed with the
application's secret signature, over the manifest `id:{data.id};request-id:{x-request-id};ts:{ts};`
(a part whose value is absent is left out). Amounts are JSON numbers: read here as exact decimals.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

import requests

from gateway import (
    CHARGED_BACK,
    FAILED,
    PAID,
    PENDING,
    REFUNDED,
    CheckoutLink,
    GatewayError,
    InvalidNotification,
    Notification,
    Transaction,
)

DEFAULT_BASE_URL = "https://api.mercadopago.com"
TIMEOUT = (3.05, 15)
PAGE_SIZE = 50
# MercadoPago's statuses, by what they mean for the debt.
STATES = {"approved": PAID, "authorized": PENDING, "pending": PENDING, "in_process": PENDING,
          "in_mediation": PAID, "rejected": FAILED, "cancelled": FAILED, "refunded": REFUNDED,
          "charged_back": CHARGED_BACK}


def manifest(resource_id: str | None, request_id: str | None, ts: str) -> str:
    parts = []
    if resource_id:
        # The documented rule: an alphanumeric id is signed in lower case.
        parts.append(f"id:{resource_id.lower() if resource_id.isalnum() else resource_id};")
    if request_id:
        parts.append(f"request-id:{request_id};")
    parts.append(f"ts:{ts};")
    return "".join(parts)


def sign(secret: str, resource_id: str | None, request_id: str | None, ts: str) -> str:
    """The `x-signature` header value for a notification (the simulator signs with this too)."""
    digest = hmac.new(secret.encode(), manifest(resource_id, request_id, ts).encode(), hashlib.sha256).hexdigest()
    return f"ts={ts},v1={digest}"


def _timestamp(ts: str) -> dt.datetime:
    value = int(ts)
    # Notifications carry milliseconds; older examples show seconds.
    seconds = value / 1000 if value > 10**11 else value
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def _loads(raw: bytes | str) -> Any:
    return json.loads(raw, parse_float=Decimal)


def _decimal(value: Any, default: Decimal | None = None) -> Decimal:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | Decimal | str):
        raise GatewayError(f"the gateway sent an amount that is not a number: {value!r}")
    try:
        amount = Decimal(value)
    except InvalidOperation:
        raise GatewayError(f"the gateway sent an amount that is not a number: {value!r}") from None
    if not amount.is_finite():
        raise GatewayError(f"the gateway sent an amount that is not a number: {value!r}")
    return amount


def _when(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _wire_amount(amount: Decimal) -> int | float:
    # A JSON number as the API expects it; at most 15 significant digits round-trip exactly.
    return int(amount) if amount == amount.to_integral_value() else float(amount)


def _wire_time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds")


def transaction_of(payment: Mapping[str, Any]) -> Transaction:
    """A `/v1/payments` object as a Transaction."""
    if not isinstance(payment, Mapping) or payment.get("id") is None:
        raise GatewayError("the gateway sent a payment without an id")
    status = str(payment.get("status") or "")
    currency = payment.get("currency_id")
    if not isinstance(currency, str):
        raise GatewayError(f"payment {payment['id']} has no currency")
    reference = payment.get("external_reference")
    return Transaction(
        id=str(payment["id"]), state=STATES.get(status, PENDING), status=status,
        amount=_decimal(payment.get("transaction_amount")), currency=currency.upper(),
        refunded=_decimal(payment.get("transaction_amount_refunded"), Decimal(0)),
        reference=reference if isinstance(reference, str) and reference else None,
        paid_at=_when(payment.get("date_approved")),
        updated_at=_when(payment.get("date_last_updated")) or _when(payment.get("date_created")),
    )


def parse_notification(headers: Mapping[str, str], query: Mapping[str, str], body: bytes,
                       secret: str, now: dt.datetime, tolerance: dt.timedelta = dt.timedelta(minutes=5)
                       ) -> Notification:
    """Check `x-signature` and the timestamp's freshness; raises InvalidNotification.

    `headers` keys in lower case. The resource id is the one the signature covers, the query's
    (`data.id`): a notification whose query names none is refused, whatever its body says (a
    signature made without an id would otherwise vouch for any id a body chose), and so is a
    body that names another resource.
    """
    signature = headers.get("x-signature", "")
    request_id = headers.get("x-request-id", "")
    if not signature:
        raise InvalidNotification("missing_signature", "the x-signature header is missing")
    fields = dict(part.strip().split("=", 1) for part in signature.split(",") if "=" in part)
    ts, given = fields.get("ts", ""), fields.get("v1", "")
    if not ts.isdigit() or not given:
        raise InvalidNotification("invalid_signature", "the x-signature header is malformed")
    resource_id = query.get("data.id") or query.get("id")
    expected = sign(secret, resource_id, request_id or None, ts).split("v1=", 1)[1]
    if not hmac.compare_digest(expected.encode(), given.encode()):
        raise InvalidNotification("invalid_signature", "the x-signature does not match the notification")
    sent_at = _timestamp(ts)
    if abs(now - sent_at) > tolerance:
        raise InvalidNotification("stale_notification", "the notification's timestamp is outside the tolerance")
    if not request_id:
        raise InvalidNotification("invalid_notification", "the x-request-id header is missing")
    if not resource_id:
        raise InvalidNotification("invalid_notification",
                                  "the notification's query names no resource (data.id), so its signature covers none")
    try:
        payload = _loads(body) if body else {}
    except ValueError:
        raise InvalidNotification("invalid_notification", "the body is not JSON") from None
    if not isinstance(payload, dict):
        raise InvalidNotification("invalid_notification", "the body is not a JSON object")
    data = payload.get("data") if isinstance(payload.get("data"), dict) else {}
    body_id = data.get("id")
    if body_id is not None and str(body_id) != resource_id:
        raise InvalidNotification("invalid_notification", "the body names another resource than the signed one")
    topic = str(payload.get("type") or query.get("type") or query.get("topic") or "")
    action = payload.get("action")
    claimed_amount, claimed_currency = data.get("transaction_amount"), data.get("currency_id")
    try:
        claimed = _decimal(claimed_amount) if claimed_amount is not None else None
    except GatewayError:
        raise InvalidNotification("invalid_notification", "data.transaction_amount is not a number") from None
    return Notification(request_id=request_id, topic=topic, action=action if isinstance(action, str) else None,
                        resource_id=resource_id,
                        sent_at=sent_at,
                        claimed_amount=claimed,
                        claimed_currency=str(claimed_currency).upper() if claimed_currency is not None else None)


class MercadoPago:
    """One seller's MercadoPago account (its access token), at `base_url`."""

    def __init__(self, access_token: str, base_url: str = DEFAULT_BASE_URL,
                 session: requests.Session | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = access_token
        self._session = session or requests.Session()

    def _call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
              body: Mapping[str, Any] | None = None, idempotency_key: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if idempotency_key:
            headers["X-Idempotency-Key"] = idempotency_key
        try:
            response = self._session.request(method, self.base_url + path, params=params, json=body,
                                             headers=headers, timeout=TIMEOUT)
        except requests.RequestException as error:
            raise GatewayError(f"the payment gateway is not reachable ({type(error).__name__})") from None
        try:
            data = _loads(response.content) if response.content else {}
        except ValueError:
            data = None
        if response.status_code >= 400 or data is None:
            message = data.get("message") if isinstance(data, dict) else None
            raise GatewayError(f"the payment gateway answered {response.status_code}"
                               + (f": {message}" if isinstance(message, str) else ""), response.status_code)
        return data

    def create_link(self, *, reference: str, title: str, amount: Decimal, currency: str,
                    notification_url: str, expires_at: dt.datetime, back_url: str | None = None) -> CheckoutLink:
        body: dict = {
            "items": [{"id": reference, "title": title, "quantity": 1, "currency_id": currency,
                       "unit_price": _wire_amount(amount)}],
            "external_reference": reference,
            "notification_url": notification_url,
            "expires": True,
            "expiration_date_to": _wire_time(expires_at),
            "binary_mode": True,  # approved or rejected at once: a payer is never left pending
        }
        if back_url:
            # Where the payer's browser returns after paying (or not): the gateway adds the
            # payment's id, status and external_reference to its query.
            body["back_urls"] = {"success": back_url, "failure": back_url, "pending": back_url}
            body["auto_return"] = "all"
        data = self._call("POST", "/checkout/preferences", body=body, idempotency_key=reference)
        if not isinstance(data, dict) or not data.get("id") or not data.get("init_point"):
            raise GatewayError("the gateway's preference has no id or init_point")
        return CheckoutLink(id=str(data["id"]), url=str(data["init_point"]))

    parse_notification = staticmethod(parse_notification)

    def get_transaction(self, transaction_id: str) -> Transaction:
        return transaction_of(self._call("GET", f"/v1/payments/{transaction_id}"))

    def list_transactions(self, since: dt.datetime, until: dt.datetime | None = None) -> Iterator[Transaction]:
        """Every payment updated in [since, until], oldest change first, page by page."""
        offset = 0
        while True:
            params = {"range": "date_last_updated", "begin_date": _wire_time(since),
                      "end_date": _wire_time(until or dt.datetime.now(dt.UTC)), "sort": "date_last_updated",
                      "criteria": "asc", "offset": offset, "limit": PAGE_SIZE}
            data = self._call("GET", "/v1/payments/search", params=params)
            results = data.get("results") if isinstance(data, dict) else None
            if not isinstance(results, list):
                raise GatewayError("the gateway's search answer has no results")
            for payment in results:
                yield transaction_of(payment)
            total = (data.get("paging") or {}).get("total", 0)
            offset += len(results)
            if not results or offset >= int(total):
                return
