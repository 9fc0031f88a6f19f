"""POST/GET /webhooks/endpoints, DELETE /webhooks/endpoints/{endpoint_id}, and GET /webhooks/deliveries (the
delivery log)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal
from urllib.parse import urlencode

from pydantic import Field

from api.errors import validation_error
from api.operation import Reply, ok, operation
from api.pagination import DEFAULT_PER_PAGE, paginate
from api.schemas import PAGE_QUERY, HttpsUrl, Input, Output, Page, Success
from config import get_settings
from models.clock import to_utc_naive
from models.events import webhooks
from models.events.tables import ALL_EVENTS, CORE_EVENTS, DELIVERY_STATUSES

# The events a company subscribes an endpoint to (models/events/types.py); debt.payment_received
# is configured per tenant by an administrator.
WebhookEventName = Literal[CORE_EVENTS]  # type: ignore[valid-type]

RATE_LIMIT = 30


class EndpointInput(Input):
    url: HttpsUrl
    events: Annotated[list[WebhookEventName], Field(min_length=1, max_length=50)]


class WebhookEndpoint(Output):
    id: str
    url: str
    events: list[WebhookEventName]
    status: Literal["active", "inactive"]
    signing_secret_preview: str | None
    last_success_at: str | None
    last_failure_at: str | None
    failure_count: int
    created_at: str | None


class CreatedEndpoint(WebhookEndpoint):
    signing_secret: str = Field(description="Returned only in this response; store it to verify signatures.")


class DeactivatedEndpoint(Output):
    id: str
    status: Literal["inactive"]


class Delivery(Output):
    id: int
    event_id: str
    event: str
    endpoint_id: str
    url: str
    sequence: int = Field(description="0 for the event's first delivery to the endpoint, 1, 2, ... for replays.")
    status: Literal[DELIVERY_STATUSES]  # type: ignore[valid-type]
    attempts: int
    max_attempts: int
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: str | None
    delivered_at: str | None
    created_at: str | None


class DeliveryLinks(Output):
    first: str
    next: str | None


class DeliveryMeta(Output):
    path: str
    per_page: int
    next_cursor: int | None = Field(description="Pass it back as `cursor` for the next page; null on the last.")
    has_more: bool


class DeliveryPage(Output):
    data: list[Delivery]
    links: DeliveryLinks
    meta: DeliveryMeta


DELIVERY_QUERY = (
    ("endpoint_id", {"type": "string"}, "only deliveries to this endpoint (whend_ id)"),
    ("event", {"type": "string", "enum": list(ALL_EVENTS)}, "only deliveries of this event"),
    ("status", {"type": "string", "enum": list(DELIVERY_STATUSES)}, "only deliveries in this status"),
    ("since", {"type": "string", "format": "date-time"}, "only deliveries created at or after this time"),
    ("until", {"type": "string", "format": "date-time"}, "only deliveries created before this time"),
    ("cursor", {"type": "integer", "minimum": 1}, "the `meta.next_cursor` of the previous page"),
    ("per_page", {"type": "integer", "minimum": 1, "maximum": 100, "default": DEFAULT_PER_PAGE}, "items per page"),
)
# Far past any id; a bound keeps the cursor inside what the database's integers hold.
MAX_CURSOR = 2**62


def _delivery_filters(req) -> tuple[dict, int | None, int]:
    """The query's filters for `webhooks.deliveries`, its cursor and page size; every bad value
    named in one 422."""
    errors: dict[str, list[str]] = {}
    filters: dict = {"endpoint_public_id": req.get_param("endpoint_id") or None}
    for name, allowed in (("event", ALL_EVENTS), ("status", DELIVERY_STATUSES)):
        value = req.get_param(name) or None
        if value is not None and value not in allowed:
            errors[name] = [f"{name} must be one of {', '.join(allowed)}"]
        filters["event_name" if name == "event" else name] = value
    for name in ("since", "until"):
        raw = req.get_param(name)
        try:
            moment = dt.datetime.fromisoformat(raw) if raw is not None else None
        except ValueError:
            moment = None
            errors[name] = ["must be an ISO 8601 date-time with an offset"]
        if moment is not None and moment.tzinfo is None:
            errors[name] = ["must be an ISO 8601 date-time with an offset"]
        filters[name] = to_utc_naive(moment) if moment is not None and moment.tzinfo is not None else None
    numbers: dict[str, int | None] = {}
    for name, default, high in (("cursor", None, MAX_CURSOR), ("per_page", DEFAULT_PER_PAGE, 100)):
        raw = req.get_param(name)
        try:
            numbers[name] = default if raw is None else int(raw)
        except ValueError:
            numbers[name] = -1
        value = numbers[name]
        if value is not None and not 1 <= value <= high:
            errors[name] = [f"{name} must be a whole number between 1 and {high}"]
    if errors:
        raise validation_error(errors)
    return filters, numbers["cursor"], numbers["per_page"]  # type: ignore[return-value]


class DeliveriesResource:
    @operation("List webhook deliveries, newest first", scope="webhooks:read",
               responses={200: DeliveryPage}, errors=(401, 403, 422, 429, 503), query=DELIVERY_QUERY,
               tags=("webhooks",),
               description="The delivery log, filtered by endpoint, event, status and creation time (any "
                           "together). Paged by cursor rather than by page number, so a page deep in a long log "
                           "reads no more than the first, and new deliveries do not shift the pages still to be "
                           "read: pass `meta.next_cursor` back as `cursor` (or follow "
                           "`links.next`) until it is null. Each matching delivery is on exactly one page.")
    def on_get(self, req, resp) -> Reply:
        filters, cursor, per_page = _delivery_filters(req)
        rows, has_more = webhooks.delivery_log_page(req.context.tenant_id, cursor, per_page, **filters)
        next_cursor = rows[-1]["id"] if has_more else None
        # From the configured public URL, never the request's Host header (api/pagination.py).
        path = get_settings().public_url + req.path
        others = {name: value for name, value in req.params.items() if name != "cursor"}

        def link(**cursor_param: int) -> str:
            query_string = urlencode({**others, **cursor_param})
            return f"{path}?{query_string}" if query_string else path

        return Reply(200, {"data": rows,
                           "links": {"first": link(), "next": link(cursor=next_cursor) if next_cursor else None},
                           "meta": {"path": path, "per_page": per_page, "next_cursor": next_cursor,
                                    "has_more": has_more}})


class EndpointsResource:
    @operation("Register a webhook endpoint", scope="webhooks:write", body=EndpointInput,
               responses={201: Success[CreatedEndpoint]}, errors=(401, 403, 409, 422, 429, 503),
               rate_limit=RATE_LIMIT, tags=("webhooks",), secret_response=True,
               description="The URL must be https:// and resolve only to public addresses. 409 "
                           "`endpoint_exists` when an active endpoint already has this URL (details.endpoint_id "
                           "names it), `endpoint_limit_reached` past 20 active endpoints.")
    def on_post(self, req, resp) -> Reply:
        body: EndpointInput = req.context.body
        endpoint, secret = webhooks.create_endpoint(req.context.tenant_id, body.url, body.events)
        return ok({**endpoint.as_dict(), "signing_secret": secret}, status=201)

    @operation("List webhook endpoints, newest first", scope="webhooks:read",
               responses={200: Page[WebhookEndpoint]}, errors=(401, 403, 422, 429, 503), query=PAGE_QUERY,
               rate_limit=RATE_LIMIT, tags=("webhooks",))
    def on_get(self, req, resp) -> Reply:
        return Reply(200, paginate(req, webhooks.endpoints_of(req.context.tenant_id),
                                   lambda endpoint: endpoint.as_dict()))


class EndpointResource:
    @operation("Deactivate a webhook endpoint", scope="webhooks:write",
               responses={200: Success[DeactivatedEndpoint]}, errors=(401, 403, 404, 409, 429, 503),
               rate_limit=RATE_LIMIT, tags=("webhooks",),
               description="Stops deliveries at once, retries pending for it included. Deactivating an "
                           "inactive endpoint answers the same 200.")
    def on_delete(self, req, resp, endpoint_id: str) -> Reply:
        endpoint = webhooks.deactivate_endpoint(req.context.tenant_id, endpoint_id)
        return ok({"id": endpoint.public_id, "status": endpoint.status})


ROUTES = [
    ("/webhooks/deliveries", DeliveriesResource()),
    ("/webhooks/endpoints", EndpointsResource()),
    ("/webhooks/endpoints/{endpoint_id}", EndpointResource()),
]
