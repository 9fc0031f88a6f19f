"""A local stand-in for MercadoPago Checkout Pro: the wire subset `gateway.mercadopago` speaks,
a checkout page where a person pays or is declined, and signed notifications delivered the way
real gateways deliver them (each one possibly twice, late, and out of order).

Gateway endpoints (Bearer access token of a seller):

    POST /checkout/preferences             -> {id, init_point, ...}
    GET  /checkout/preferences/{id}
    GET  /v1/payments/{id}
    GET  /v1/payments/search               range=date_last_updated, begin_date, end_date, offset, limit

Pages (for a browser):

    GET  /checkout/v1/redirect?pref_id=ID  the checkout: amount, `Pagar` (#pay), `Rechazar` (#decline)
    POST /checkout/v1/pay                  form: pref_id, outcome=approve|decline, amount (optional)

Control endpoints (JSON):

    GET  /_sim/health
    POST /_sim/sellers                     -> {user_id, access_token, webhook_secret}
    POST /_sim/payments                    {pref_id, outcome?, amount?, currency?, notify?} -> payment
    POST /_sim/payments/{id}/refund        {amount?}: whole or partial refund
    POST /_sim/payments/{id}/chargeback
    POST /_sim/payments/{id}/notify        {times?, delay?, shuffle?}: notify it again, `times` times
    GET  /_sim/notifications               every delivery attempt: request id, payment, HTTP status
    GET|POST /_sim/config                  duplicates, max_delay, shuffle, notify

A failed delivery (the service is down) is not retried: reconciliation must find the payment.
"""

from __future__ import annotations

import datetime as dt
import html
import itertools
import json
import logging
import random
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

import requests

from gateway.mercadopago import sign

log = logging.getLogger(__name__)

DEFAULT_BIND = "127.0.0.1:8091"
MAX_BODY = 1 << 20


class SimError(Exception):
    def __init__(self, status: int, message: str, error: str = "bad_request") -> None:
        super().__init__(message)
        self.status, self.message, self.error = status, message, error

    def body(self) -> dict[str, Any]:
        return {"message": self.message, "error": self.error, "status": self.status, "cause": []}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _iso(moment: dt.datetime | None) -> str | None:
    return moment.isoformat(timespec="milliseconds") if moment else None


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(type(value).__name__)


class GatewaySimulator:
    """`start()` serves in a background thread (tests); `serve_forever()` in the foreground."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, duplicates: int = 1, max_delay: float = 0.3,
                 shuffle: bool = True, notify: bool = True) -> None:
        self.host, self.port = host, port
        self.options = {"duplicates": duplicates, "max_delay": max_delay, "shuffle": shuffle, "notify": notify}
        self._lock = threading.Lock()
        self._sellers: dict[str, dict[str, Any]] = {}  # access token -> seller
        self._preferences: dict[str, dict[str, Any]] = {}
        self._payments: dict[str, dict[str, Any]] = {}
        self._deliveries: list[dict[str, Any]] = []
        self._ids = itertools.count(int(time.time()) * 1000)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._http = requests.Session()

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _bind(self) -> None:
        simulator = self

        class Handler(_Handler):
            sim = simulator

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]

    def start(self) -> str:
        self._bind()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="gateway-sim")
        self._thread.start()
        return self.base_url

    def serve_forever(self, on_ready: Callable[[GatewaySimulator], None] | None = None) -> None:
        self._bind()
        if on_ready:
            on_ready(self)
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- sellers, preferences, payments -----------------------------------------------------------

    def new_seller(self) -> dict[str, Any]:
        seller = {"user_id": str(next(self._ids)), "access_token": "APP_USR-" + secrets.token_hex(24),
                  "webhook_secret": secrets.token_hex(32)}
        with self._lock:
            self._sellers[seller["access_token"]] = seller
        return dict(seller)

    def _seller(self, authorization: str | None) -> dict[str, Any]:
        token = (authorization or "").removeprefix("Bearer ").strip()
        with self._lock:
            seller = self._sellers.get(token)
        if seller is None:
            raise SimError(401, "invalid access token", "unauthorized")
        return seller

    def create_preference(self, seller: dict[str, Any], body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("items"), list) or not body["items"]:
            raise SimError(400, "items needed")
        item = body["items"][0]
        currency = item.get("currency_id")
        price = item.get("unit_price")
        if not isinstance(currency, str) or not isinstance(price, int | Decimal) or isinstance(price, bool) \
                or price <= 0:
            raise SimError(400, "unit_price and currency_id are required")
        expires_to = None
        if body.get("expires") and body.get("expiration_date_to"):
            try:
                expires_to = dt.datetime.fromisoformat(str(body["expiration_date_to"]).replace("Z", "+00:00"))
            except ValueError:
                raise SimError(400, "invalid expiration_date_to") from None
        preference_id = f"{seller['user_id']}-{uuid.uuid4()}"
        preference = {
            "id": preference_id, "collector_id": int(seller["user_id"]), "items": [dict(item)],
            "external_reference": body.get("external_reference") or "",
            "notification_url": body.get("notification_url"), "expires": bool(body.get("expires")),
            "back_urls": body.get("back_urls") if isinstance(body.get("back_urls"), dict) else {},
            "expiration_date_to": _iso(expires_to), "date_created": _iso(_now()),
            "init_point": f"{self.base_url}/checkout/v1/redirect?pref_id={preference_id}",
            "sandbox_init_point": f"{self.base_url}/checkout/v1/redirect?pref_id={preference_id}",
        }
        with self._lock:
            self._preferences[preference_id] = {**preference, "_seller": seller, "_expires": expires_to}
        return preference

    def _preference(self, preference_id: str) -> dict[str, Any]:
        with self._lock:
            preference = self._preferences.get(preference_id)
        if preference is None:
            raise SimError(404, f"preference {preference_id} not found", "not_found")
        return preference

    def pay(self, preference_id: str, outcome: str = "approve", amount: Any = None, currency: str | None = None,
            notify: bool | None = None) -> dict[str, Any]:
        """The payer finishes the checkout: a payment approved (or rejected), then its notifications."""
        preference = self._preference(preference_id)
        if preference["_expires"] is not None and _now() > preference["_expires"]:
            raise SimError(400, "the preference has expired", "preference_expired")
        item = preference["items"][0]
        try:
            value = Decimal(str(amount)) if amount not in (None, "") else Decimal(str(item["unit_price"]))
        except InvalidOperation:
            raise SimError(400, "amount must be a number") from None
        if not value.is_finite() or value <= 0:
            raise SimError(400, "amount must be greater than 0")
        now = _now()
        approved = outcome == "approve"
        payment_id = str(next(self._ids))
        payment = {
            "id": int(payment_id), "status": "approved" if approved else "rejected",
            "status_detail": "accredited" if approved else "cc_rejected_other_reason",
            "transaction_amount": value, "transaction_amount_refunded": Decimal(0),
            "currency_id": currency or item["currency_id"], "external_reference": preference["external_reference"],
            "description": item.get("title"), "payment_type_id": "credit_card", "operation_type": "regular_payment",
            "collector_id": preference["collector_id"], "date_created": _iso(now),
            "date_approved": _iso(now) if approved else None, "date_last_updated": _iso(now), "refunds": [],
        }
        with self._lock:
            self._payments[payment_id] = {**payment, "_seller": preference["_seller"],
                                          "_notification_url": preference["notification_url"]}
        self._notify(payment_id, ["payment.created"], notify)
        return payment

    def _payment(self, payment_id: str, seller: dict[str, Any] | None = None) -> dict[str, Any]:
        with self._lock:
            payment = self._payments.get(payment_id)
        if payment is None or (seller is not None and payment["_seller"] is not seller):
            raise SimError(404, "Payment not found", "not_found")
        return payment

    def refund(self, payment_id: str, amount: Any = None) -> dict[str, Any]:
        with self._lock:
            payment = self._payments.get(payment_id)
            if payment is None or payment["status"] not in ("approved",):
                raise SimError(400, "only an approved payment can be refunded")
            left = payment["transaction_amount"] - payment["transaction_amount_refunded"]
            value = Decimal(str(amount)) if amount is not None else left
            if value <= 0 or value > left:
                raise SimError(400, "the refund exceeds what is left of the payment")
            payment["transaction_amount_refunded"] += value
            payment["refunds"].append({"id": next(self._ids), "amount": value, "date_created": _iso(_now())})
            if payment["transaction_amount_refunded"] == payment["transaction_amount"]:
                payment["status"], payment["status_detail"] = "refunded", "refunded"
            payment["date_last_updated"] = _iso(_now())
        self._notify(payment_id, ["payment.updated"])
        return self.public(payment)

    def chargeback(self, payment_id: str) -> dict[str, Any]:
        with self._lock:
            payment = self._payments.get(payment_id)
            if payment is None or payment["status"] != "approved":
                raise SimError(400, "only an approved payment can be charged back")
            payment["status"], payment["status_detail"] = "charged_back", "settled"
            payment["date_last_updated"] = _iso(_now())
        self._notify(payment_id, ["payment.updated"])
        return self.public(payment)

    @staticmethod
    def public(payment: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in payment.items() if not key.startswith("_")}

    def search(self, seller: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
        def moment(name: str) -> dt.datetime | None:
            raw = query.get(name)
            if not raw:
                return None
            try:
                return dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                raise SimError(400, f"invalid {name}") from None

        begin, end = moment("begin_date"), moment("end_date")
        offset, limit = int(query.get("offset") or 0), min(int(query.get("limit") or 30), 1000)
        with self._lock:
            found = [payment for payment in self._payments.values() if payment["_seller"] is seller]
        stamp = query.get("range") or "date_created"
        if stamp not in ("date_created", "date_last_updated", "date_approved"):
            raise SimError(400, "invalid range")

        def at(payment: dict[str, Any]) -> dt.datetime | None:
            value = payment.get(stamp)
            return dt.datetime.fromisoformat(value) if value else None

        found = [p for p in found if at(p) is not None and (begin is None or at(p) >= begin)
                 and (end is None or at(p) <= end)]
        found.sort(key=at, reverse=query.get("criteria") == "desc")
        page = found[offset:offset + limit]
        return {"paging": {"total": len(found), "limit": limit, "offset": offset},
                "results": [self.public(payment) for payment in page]}

    # -- notifications --------------------------------------------------------------------------

    def _notify(self, payment_id: str, actions: list[str], enabled: bool | None = None, times: int | None = None,
                delay: float | None = None, shuffle: bool | None = None) -> None:
        options = dict(self.options)
        if not (options["notify"] if enabled is None else enabled):
            return
        payment = self._payment(payment_id)
        if not payment["_notification_url"]:
            return
        copies = 1 + int(options["duplicates"]) if times is None else int(times)
        max_delay = float(options["max_delay"] if delay is None else delay)
        sends = []
        for action in actions:
            request_id = str(uuid.uuid4())
            body = {"id": next(self._ids), "live_mode": False, "type": "payment", "date_created": _iso(_now()),
                    "user_id": payment["_seller"]["user_id"], "api_version": "v1", "action": action,
                    "data": {"id": payment_id}}
            # Copies of one notification keep its request id, as a gateway's redelivery does.
            sends.extend((request_id, body) for _ in range(copies))
        if options["shuffle"] if shuffle is None else shuffle:
            random.shuffle(sends)
        for index, (request_id, body) in enumerate(sends):
            wait = random.uniform(0, max_delay) + index * max_delay / max(1, len(sends))
            threading.Timer(wait, self._deliver, args=(payment, request_id, body)).start()

    def _deliver(self, payment: dict[str, Any], request_id: str, body: dict[str, Any]) -> None:
        payment_id = str(body["data"]["id"])
        url = payment["_notification_url"]
        url += ("&" if "?" in url else "?") + urlencode({"data.id": payment_id, "type": "payment"})
        ts = str(int(time.time() * 1000))
        headers = {"x-signature": sign(payment["_seller"]["webhook_secret"], payment_id, request_id, ts),
                   "x-request-id": request_id, "Content-Type": "application/json"}
        try:
            status = self._http.post(url, data=json.dumps(body), headers=headers, timeout=(3.05, 22)).status_code
        except requests.RequestException as error:
            status = None
            log.info("notification %s for payment %s not delivered: %s", request_id, payment_id,
                     type(error).__name__)
        with self._lock:
            self._deliveries.append({"request_id": request_id, "payment_id": payment_id, "action": body["action"],
                                     "status": status, "at": _iso(_now())})

    def deliveries(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(item) for item in self._deliveries]

    def configure(self, **options: Any) -> dict[str, Any]:
        unknown = set(options) - set(self.options)
        if unknown:
            raise SimError(400, f"unknown options: {', '.join(sorted(unknown))}")
        with self._lock:
            self.options.update(options)
            return dict(self.options)

    # -- HTTP -----------------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
        parts = urlsplit(target)
        path, query = parts.path.rstrip("/") or "/", dict(parse_qsl(parts.query))
        try:
            if path.startswith("/checkout/v1/"):
                return self._page(method, path, query, headers, body)
            data = json.loads(body, parse_float=Decimal) if body else {}
            return 200 if method == "GET" else 201, "application/json", self._json(self._api(
                method, path, query, headers, data))
        except SimError as error:
            return error.status, "application/json", self._json(error.body())
        except (ValueError, KeyError, TypeError) as error:
            return 400, "application/json", self._json(SimError(400, f"bad request: {error}").body())

    @staticmethod
    def _json(data: Any) -> bytes:
        return json.dumps(data, default=_json_default).encode()

    def _api(self, method: str, path: str, query: dict[str, str], headers: dict[str, str], data: Any) -> Any:
        segments = path.strip("/").split("/")
        if segments[0] == "_sim":
            return self._control(method, segments[1:], data)
        seller = self._seller(headers.get("authorization"))
        if (method, path) == ("POST", "/checkout/preferences"):
            return self.create_preference(seller, data)
        if method == "GET" and segments[:2] == ["checkout", "preferences"] and len(segments) == 3:
            preference = self._preference(segments[2])
            if preference["_seller"] is not seller:
                raise SimError(404, "preference not found", "not_found")
            return {key: value for key, value in preference.items() if not key.startswith("_")}
        if method == "GET" and path == "/v1/payments/search":
            return self.search(seller, query)
        if method == "GET" and segments[:2] == ["v1", "payments"] and len(segments) == 3:
            return self.public(self._payment(segments[2], seller))
        raise SimError(404, f"no {method} {path}", "not_found")

    def _control(self, method: str, segments: list[str], data: Any) -> Any:
        args = data if isinstance(data, dict) else {}
        if (method, segments) == ("GET", ["health"]):
            return {"status": "ok"}
        if (method, segments) == ("POST", ["sellers"]):
            return self.new_seller()
        if (method, segments) == ("GET", ["notifications"]):
            return self.deliveries()
        if segments == ["config"]:
            return self.configure(**args) if method == "POST" else dict(self.options)
        if method == "POST" and segments == ["payments"]:
            return self.public(self.pay(str(args["pref_id"]), str(args.get("outcome", "approve")), args.get("amount"),
                                        args.get("currency"), args.get("notify")))
        if method == "POST" and len(segments) == 3 and segments[0] == "payments":
            payment_id, verb = segments[1], segments[2]
            if verb == "refund":
                return self.refund(payment_id, args.get("amount"))
            if verb == "chargeback":
                return self.chargeback(payment_id)
            if verb == "notify":
                # `times` notifications of their own (each with its request id), like a gateway
                # that reports the same change again later.
                self._payment(payment_id)
                times = int(args.get("times", 1))
                self._notify(payment_id, [str(args.get("action", "payment.updated"))] * times, True, 1,
                             args.get("delay"), args.get("shuffle"))
                return {"scheduled": times}
        raise SimError(404, f"no {method} /_sim/{'/'.join(segments)}", "not_found")

    def _page(self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
              body: bytes) -> tuple[int, str, bytes]:
        if method == "GET" and path == "/checkout/v1/redirect":
            preference = self._preference(query.get("pref_id", ""))
            if preference["_expires"] is not None and _now() > preference["_expires"]:
                return 410, "text/html", _html("Link vencido", "<p id='result'>expired</p>"
                                               "<p>Este link de pago venció.</p>")
            item = preference["items"][0]
            form = (f"<form method='post' action='/checkout/v1/pay'>"
                    f"<input type='hidden' name='pref_id' value='{html.escape(preference['id'])}'>"
                    f"<p>{html.escape(str(item.get('title') or ''))}</p>"
                    f"<p id='amount'>{html.escape(item['currency_id'])} "
                    f"{html.escape(str(_json_default(Decimal(str(item['unit_price'])))))}</p>"
                    "<label>Monto <input name='amount' id='custom-amount' placeholder='(todo)'></label>"
                    "<button id='pay' name='outcome' value='approve'>Pagar</button>"
                    "<button id='decline' name='outcome' value='decline'>Rechazar</button></form>")
            return 200, "text/html", _html("Checkout", form)
        if method == "POST" and path == "/checkout/v1/pay":
            form = {key: values[0] for key, values in parse_qs(body.decode()).items()}
            payment = self.pay(form.get("pref_id", ""), form.get("outcome", "approve"), form.get("amount") or None)
            back = self._preference(form.get("pref_id", ""))["back_urls"].get(
                "success" if payment["status"] == "approved" else "failure")
            if back:
                # What MercadoPago adds to a back URL; a plain link, as its page has one.
                query = urlencode({"payment_id": payment["id"], "status": payment["status"],
                                   "external_reference": payment["external_reference"],
                                   "preference_id": form.get("pref_id", "")})
                target = back + ("&" if "?" in back else "?") + query
                back = f"<p><a id='back' href='{html.escape(target)}'>Volver</a></p>"
            return 200, "text/html", _html("Resultado", f"<p id='result'>{payment['status']}</p>"
                                                        f"<p id='payment-id'>{payment['id']}</p>{back or ''}")
        raise SimError(404, f"no {method} {path}", "not_found")


def _html(title: str, content: str) -> bytes:
    return (f"<!doctype html><html lang='es'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"</head><body><h1>{html.escape(title)}</h1>{content}</body></html>").encode()


class _Handler(BaseHTTPRequestHandler):
    sim: GatewaySimulator
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.send_error(413)
            return
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            status, content_type, payload = self.sim.handle(self.command, self.path, headers, body)
        except SimError as error:
            status, content_type, payload = error.status, "application/json", json.dumps(error.body()).encode()
        self.send_response(status)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _serve  # noqa: N815 (the stdlib's naming)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("%s %s", self.address_string(), format % args)


def parse_bind(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--bind expects HOST:PORT, got {bind!r}")
    return host, int(port)
