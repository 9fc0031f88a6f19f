"""The test event: a signed `webhook.ping` POSTed to an endpoint now, outside the delivery log."""

from __future__ import annotations

from dataclasses import dataclass

from models.events import ssrf, webhooks
from models.events.delivery.client import Response, delivery_client, post_signed, vetted_addresses
from models.events.tables import WebhookEndpoint
from models.ids import new_id


@dataclass
class PingResult:
    event_id: str
    url: str
    response: Response


def send_test(endpoint: WebhookEndpoint) -> PingResult:
    """POST a signed `webhook.ping` to the endpoint now, through the same checks as deliveries."""
    event_id = new_id("evt_")
    body = webhooks.ping_body(endpoint, event_id)
    try:
        target = ssrf.parse_target(endpoint.url)
        addresses = vetted_addresses(target)
    except ssrf.UnsafeTarget as error:
        return PingResult(event_id, endpoint.url, Response(None, 0, error=f"refused: {error}"))
    response = post_signed(delivery_client(), target, addresses, endpoint.signing_secret, event_id,
                           webhooks.PING_EVENT, body)
    return PingResult(event_id, endpoint.url, response)
