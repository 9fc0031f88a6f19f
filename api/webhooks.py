"""POST/GET /webhooks/endpoints and DELETE /webhooks/endpoints/{endpoint_id}."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from api.operation import Reply, ok, operation
from api.pagination import paginate
from api.schemas import PAGE_QUERY, HttpsUrl, Input, Output, Page, Success
from models.events import webhooks
from models.events.tables import CORE_EVENTS

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
    ("/webhooks/endpoints", EndpointsResource()),
    ("/webhooks/endpoints/{endpoint_id}", EndpointResource()),
]
