"""Webhooks: endpoints (signing secrets shown once), the payment endpoint, the delivery log with
every attempt, replays and test events."""

from __future__ import annotations

import datetime as dt

from config.i18n import N_
from jobs import webhooks as delivery
from models.clock import to_utc_naive, utcnow
from models.errors import NotFound
from models.events import webhooks
from models.events.delivery.ping import send_test
from models.events.tables import ALL_EVENTS, CORE_EVENTS, DELIVERY_STATUSES, WebhookDelivery, WebhookEndpoint
from models.store.db import atomic
from portal.errors import CHECK_THE_FORM
from portal.web import BASE, Refused, audit, choice, ctx, form, locale_of, page, paginate_by_keyset, redirect, render

REPLAY_WINDOWS = {"1": N_("the last hour"), "6": N_("the last 6 hours"), "24": N_("the last day"),
                  "72": N_("the last 3 days"), "168": N_("the last 7 days")}


def _show(req, resp, status: int = 200, **shown) -> None:
    tenant_id = ctx(req).tenant_id
    render(req, resp, "webhooks.html", status=status, endpoints=list(webhooks.endpoints_of(tenant_id)),
           payment=webhooks.get_payment_endpoint(tenant_id), events=CORE_EVENTS,
           created=shown.get("created"), test=shown.get("test"))


class Endpoints:
    @page()
    def on_get(self, req, resp):
        _show(req, resp)

    @page(write="webhooks")
    def on_post(self, req, resp):
        with atomic():
            endpoint, secret = webhooks.create_endpoint(ctx(req).tenant_id, form(req).get("url"),
                                                        form(req).getlist("events"))
            audit(req, "webhook.endpoint_created", endpoint.public_id, {"url": endpoint.url, "events": endpoint.events})
        _show(req, resp, status=201, created={"endpoint": endpoint, "secret": secret})


class PaymentEndpoint:
    @page(write="webhooks")
    def on_post(self, req, resp):
        with atomic():
            endpoint, secret = webhooks.set_payment_endpoint(ctx(req).tenant_id, form(req).get("url"))
            audit(req, "webhook.payment_endpoint_set", endpoint.public_id, {"url": endpoint.url})
        _show(req, resp, created={"endpoint": endpoint, "secret": secret})


class EndpointDisable:
    @page(write="webhooks")
    def on_post(self, req, resp, endpoint_id: str):
        with atomic():
            endpoint = webhooks.deactivate_endpoint(ctx(req).tenant_id, endpoint_id)
            audit(req, "webhook.endpoint_disabled", endpoint.public_id)
        redirect(resp, f"{BASE}/webhooks", "endpoint_disabled")


class EndpointTest:
    @page(write="webhooks")
    def on_post(self, req, resp, endpoint_id: str):
        endpoint = webhooks.get_endpoint(ctx(req).tenant_id, endpoint_id, kind=None)
        result = send_test(endpoint)
        audit(req, "webhook.test_sent", endpoint.public_id, {"status_code": result.response.status_code})
        _show(req, resp, test={"endpoint": endpoint, "result": result})


def _filters(req) -> dict[str, str | None]:
    return {"event": req.get_param("event") or None, "endpoint": req.get_param("endpoint") or None,
            "status": choice(req, "status", DELIVERY_STATUSES), "since": req.get_param("since") or None,
            "until": req.get_param("until") or None}


def _moment(req, text: str | None) -> dt.datetime | None:
    """A time filter's value (the form's `YYYY-MM-DDTHH:MM`, in the company's time zone, as the
    log shows its times) in naive UTC."""
    if text is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise Refused(422, CHECK_THE_FORM, N_("Enter a date and time as year-month-day and hours:minutes.")) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=locale_of(req).zone)
    return to_utc_naive(moment)


class Deliveries:
    @page()
    def on_get(self, req, resp):
        tenant_id = ctx(req).tenant_id
        filters = _filters(req)
        query = webhooks.deliveries(tenant_id, filters["endpoint"], filters["event"], filters["status"],
                                    _moment(req, filters["since"]), _moment(req, filters["until"]))
        listing = paginate_by_keyset(req, query)
        endpoints = list(WebhookEndpoint.select().where(WebhookEndpoint.tenant == tenant_id)
                         .order_by(WebhookEndpoint.id.desc()))
        render(req, resp, "deliveries.html", listing=listing, filters=filters, events=ALL_EVENTS,
               statuses=DELIVERY_STATUSES, endpoints=endpoints, windows=REPLAY_WINDOWS)


class DeliveryDetail:
    @page()
    def on_get(self, req, resp, delivery_id: str):
        if not delivery_id.isdigit():
            raise NotFound(f"no delivery {delivery_id}")
        # Through the tenant's own delivery query: another company's id is not found.
        found = webhooks.deliveries(ctx(req).tenant_id).where(WebhookDelivery.id == int(delivery_id)).first()
        if found is None:
            raise NotFound(f"no delivery {delivery_id}")
        render(req, resp, "delivery.html", delivery=found, attempts=list(webhooks.attempts_of(found.id)))


class EventReplay:
    @page(write="webhooks")
    def on_post(self, req, resp, event_id: str):
        created, endpoint_ids = webhooks.replay_event(event_id, ctx(req).tenant_id)
        audit(req, "webhook.event_replayed", event_id, {"deliveries": created})
        delivery.start_drains(endpoint_ids)
        redirect(resp, f"{BASE}/webhooks/deliveries", "replayed")


class ReplayFailed:
    @page(write="webhooks")
    def on_post(self, req, resp):
        hours = form(req).get("hours")
        if hours not in REPLAY_WINDOWS:
            raise Refused(422, CHECK_THE_FORM, N_("Choose a time window to replay."))
        since = utcnow() - dt.timedelta(hours=int(hours))
        created, endpoint_ids = webhooks.replay_failed_since(ctx(req).tenant_id, since)
        audit(req, "webhook.failed_replayed", None, {"since_hours": int(hours), "deliveries": created})
        delivery.start_drains(endpoint_ids)
        redirect(resp, f"{BASE}/webhooks/deliveries", "replayed")


ROUTES = [
    ("/webhooks", Endpoints()),
    ("/webhooks/payment-endpoint", PaymentEndpoint()),
    ("/webhooks/endpoints/{endpoint_id}/disable", EndpointDisable()),
    ("/webhooks/endpoints/{endpoint_id}/test", EndpointTest()),
    ("/webhooks/deliveries", Deliveries()),
    ("/webhooks/deliveries/{delivery_id}", DeliveryDetail()),
    ("/webhooks/events/{event_id}/replay", EventReplay()),
    ("/webhooks/replay-failed", ReplayFailed()),
]
