"""Payments through the gateway: payment links on debts, the gateway's notifications, the payer's
`/pay/{plk_}` page, and the feed of payments back to the ERP (`GET /cartera/pagos`, declared on
api.receivables' resource for that path).

The notification endpoint is outside /api/v1 like the platform's webhook: it is checked on its
signature, stored once per request id and answered at once; the worker fetches the transaction
from the gateway and records it (models/receivables/payments.py).
"""

from __future__ import annotations

import datetime as dt
import html
import logging

import falcon
from pydantic import Field

from api.errors import ApiError, validation_error
from api.operation import Reply, ok, operation, read_body
from api.schemas import Output, Success, text
from config import get_settings
from gateway import GatewayError, InvalidNotification
from gateway.mercadopago import parse_notification
from models.errors import DomainError
from models.receivables import debtor_links, export, payments
from models.receivables.inputs import ExactInput, PositiveAmount
from models.tenancy.tables import Tenant

log = logging.getLogger(__name__)

TAGS = ("cartera",)


class PaymentLinkInput(ExactInput):
    amount: PositiveAmount | None = Field(None, alias="monto")
    installment_external_id: text(160, 1) | None = Field(None, alias="cuota_external_id")


class PaymentLinkItem(Output):
    id: str
    url: str
    checkout_url: str | None
    monto: float
    moneda: str
    cuota_external_id: str | None
    origin: str
    status: str
    expires_at: str
    paid_at: str | None
    created_at: str


class ExportItem(Output):
    cursor: int
    tipo: str
    boty_payment_id: str
    reverso_id: str | None
    motivo: str | None
    deuda_external_id: str
    transaction_id: str | None
    monto: float
    moneda: str
    metodo: str
    ocurrido_en: str
    saldo_pendiente: float
    monto_sin_asignar: float
    registrado_en: str


class ExportMeta(Output):
    next_cursor: int
    has_more: bool


class ExportPage(Output):
    success: bool = True
    data: list[ExportItem]
    meta: ExportMeta


EXPORT_QUERY = (
    ("since", {"type": "string", "format": "date-time"}, "only what was recorded at or after this time"),
    ("cursor", {"type": "integer", "minimum": 0, "default": 0}, "the `next_cursor` of the previous page"),
    ("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 100}, "items per page"),
)


class PaymentLinkResource:
    @operation("Create a payment link for a debt", scope="cartera:write", body=PaymentLinkInput, receivables=True,
               responses={201: Success[PaymentLinkItem]}, errors=(401, 403, 404, 409, 422, 429, 502), tags=TAGS,
               calls_out_first=True,
               description="The amount defaults to what the installment `cuota_external_id` still owes, else to "
                           "the next open installment's remainder, else to the open balance; a given `monto` is at "
                           "most the balance. The link expires after SVC_PAYMENTS_LINK_TTL_HOURS (72 h). `url` is "
                           "the service's own page that sends the payer to the gateway's checkout (`checkout_url`). "
                           "409 `debt_not_payable` on a paid or resolved debt, 409 "
                           "`payment_gateway_not_configured` without gateway credentials, 502 "
                           "`payment_gateway_unavailable` when the gateway cannot make the checkout.")
    def on_post(self, req, resp, external_id: str) -> Reply:
        body = req.context.body
        link = payments.create_link(req.context.tenant_id, external_id, amount=body.amount,
                                    installment_external_id=body.installment_external_id)
        return ok(link, status=201)


def export_query(req) -> tuple[dt.datetime | None, int, int]:
    """`since`, `cursor` and `limit` of an ERP feed's GET (EXPORT_QUERY); 422 when one is wrong."""
    errors: dict[str, list[str]] = {}
    since = None
    if (raw := req.get_param("since")) is not None:
        try:
            since = dt.datetime.fromisoformat(raw)
        except ValueError:
            since = None
        if since is None or since.tzinfo is None:
            errors["since"] = ["must be an ISO 8601 date-time with an offset"]
    numbers = {}
    for name, default, high in (("cursor", 0, 2**62), ("limit", 100, 500)):
        raw = req.get_param(name)
        try:
            numbers[name] = default if raw is None else int(raw)
        except ValueError:
            numbers[name] = -1
        if not (0 if name == "cursor" else 1) <= numbers[name] <= high:
            errors[name] = [f"{name} must be a whole number between {0 if name == 'cursor' else 1} and {high}"]
    if errors:
        raise validation_error(errors)
    return since, numbers["cursor"], numbers["limit"]


def export_page(req) -> Reply:
    """GET /cartera/pagos: payments and reversals made in the service, oldest first, by cursor."""
    since, cursor, limit = export_query(req)
    rows = export.export_page(req.context.tenant_id, since=since, after=cursor, limit=limit + 1)
    page = rows[:limit]
    next_cursor = page[-1]["cursor"] if page else cursor
    return Reply(200, {"success": True, "data": page,
                       "meta": {"next_cursor": next_cursor, "has_more": len(rows) > len(page)}})


class GatewayWebhookResource:
    """POST /payments/webhook/{ten_}: the gateway's signed notifications for one company."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, tenant_id: str) -> None:
        raw = read_body(req)
        tenant = Tenant.get_or_none(Tenant.public_id == tenant_id)
        secret = payments.webhook_secret_of(tenant.id) if tenant is not None else None
        if secret is None:
            raise ApiError(404, "not_found", "no payment gateway is connected here")
        headers = {name.lower(): value for name, value in req.headers.items()}
        query = {name: value for name, value in req.params.items() if isinstance(value, str)}
        settings = get_settings()
        try:
            notification = parse_notification(headers, query, raw, secret, dt.datetime.now(dt.UTC),
                                              dt.timedelta(seconds=settings.payments_notification_tolerance))
        except InvalidNotification as error:
            log.warning("gateway notification for %s refused: %s", tenant_id, error.code)
            raise ApiError(400 if error.code == "invalid_notification" else 401, error.code, error.message) from None
        stored = payments.store_notification(tenant.id, notification)
        if stored is not None:
            try:
                from jobs.payments import process_gateway_notification

                process_gateway_notification(stored.id)
            except Exception:
                # Stored and committed: reconciliation records the transaction all the same.
                log.exception("could not queue gateway notification %s", stored.id)
        resp.status = falcon.HTTP_200
        resp.content_type = falcon.MEDIA_JSON
        resp.media = {"success": True, "data": {"status": "accepted" if stored is not None else "duplicate"}}


UNAVAILABLE = {
    "not_found": (404, "Link no encontrado", "Este link de pago no existe."),
    "expired": (410, "Link vencido", "Este link de pago venció. Pide uno nuevo a quien te lo envió."),
    "paid": (409, "Link ya pagado", "Este link de pago ya fue pagado. ¡Gracias!"),
    "settled": (409, "Deuda sin saldo", "Esta deuda no tiene saldo pendiente."),
    "unavailable": (503, "Intenta de nuevo", "No pudimos abrir el pago en este momento. Intenta en unos minutos."),
}


def _page(resp: falcon.Response, reason: str) -> None:
    status, title, text = UNAVAILABLE[reason]
    resp.status = falcon.code_to_http_status(status)
    resp.content_type = "text/html; charset=utf-8"
    resp.text = (f"<!doctype html><html lang='es'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                 f"<meta name='viewport' content='width=device-width, initial-scale=1'></head><body>"
                 f"<h1 id='{reason}'>{html.escape(title)}</h1><p>{html.escape(text)}</p></body></html>")


class PayResource:
    """GET /pay/{plk_}: a payment link; redirects to the checkout. GET /pay/{dl_}: a reminder's
    button, which opens the debtor's page."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, link_id: str) -> None:
        if link_id.startswith(debtor_links.TOKEN_PREFIX):
            # A reminder's button (`/pay/{{1}}`, the template's URL) carrying the debtor's page token.
            resp.status = falcon.HTTP_303
            resp.location = f"{debtor_links.PAGE_PATH}/{link_id[:64]}"
            resp.cache_control = ["no-store"]
            resp.set_header("Referrer-Policy", "no-referrer")
            return
        try:
            target = payments.checkout_for(link_id[:64])
        except payments.LinkUnavailable as unavailable:
            _page(resp, unavailable.reason)
            return
        except (GatewayError, DomainError) as error:
            log.warning("checkout for link %s not available: %s", link_id[:64], getattr(error, "message", error))
            _page(resp, "unavailable")
            return
        resp.status = falcon.HTTP_302
        resp.location = target
        resp.cache_control = ["no-store"]


ROUTES = [("/cartera/deudas/{external_id}/payment-link", PaymentLinkResource())]
ROOT_ROUTES = [(payments.WEBHOOK_PATH + "/{tenant_id}", GatewayWebhookResource()),
               (payments.PAY_PATH + "/{link_id}", PayResource())]
