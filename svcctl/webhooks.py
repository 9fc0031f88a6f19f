"""svcctl webhooks: endpoints, the delivery log, replays and test pings."""

from __future__ import annotations

import datetime as dt
import re

import typer

from jobs import webhooks as delivery
from models.clock import isoformat, to_utc_naive, utcnow
from models.errors import Invalid, NotFound
from models.events import webhooks
from models.events.delivery.ping import send_test
from models.events.tables import WebhookDelivery, WebhookEndpoint
from models.tenancy.tenants import get_tenant
from svcctl.output import JSON_OPTION, err, fail, print_json, record, show, styled, table, with_database

app = typer.Typer(help="Webhooks: endpoints, deliveries, replays and test pings.", no_args_is_help=True)

_RELATIVE = re.compile(r"^(\d+)\s*([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_since(value: str, now: dt.datetime | None = None, option: str = "--since") -> dt.datetime:
    """An ISO 8601 date-time (UTC when it has no offset) or a duration back from now: 90s, 15m, 2h, 3d."""
    value = value.strip()
    if match := _RELATIVE.match(value):
        amount, unit = match.groups()
        return (now or utcnow()) - dt.timedelta(**{_UNITS[unit]: int(amount)})
    try:
        return to_utc_naive(dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        raise Invalid(f"{option}: expected an ISO 8601 date-time or a duration like 2h, got {value!r}") from None


@app.command("endpoints")
@with_database
def list_endpoints(tenant: str = typer.Option(..., "--tenant"), as_json: bool = JSON_OPTION):
    """A tenant's endpoints, the payment endpoint included."""
    tenant_id = get_tenant(tenant).id
    rows = list(WebhookEndpoint.select().where(WebhookEndpoint.tenant == tenant_id)
                .order_by(WebhookEndpoint.id.desc()))
    data = [{**endpoint.as_dict(), "kind": endpoint.kind} for endpoint in rows]
    show(data, as_json, lambda: table("webhook endpoints", ("id", "kind", "status", "url", "events", "failures",
                                                            "last success", "last failure"),
                                      [(e["id"], e["kind"], e["status"], e["url"], ", ".join(e["events"]),
                                        e["failure_count"], e["last_success_at"], e["last_failure_at"])
                                       for e in data]))


@app.command("deliveries")
@with_database
def list_deliveries(tenant: str = typer.Option(..., "--tenant"),
                    endpoint: str = typer.Option(None, "--endpoint", help="A whend_ id."),
                    event: str = typer.Option(None, "--event", help="An event name, e.g. message.sent."),
                    status: str = typer.Option(None, "--status",
                                               help="pending, failed, delivered, exhausted or cancelled."),
                    since: str = typer.Option(None, "--since", help="Created at or after: 2h, 3d or an ISO 8601 "
                                                                    "date-time (UTC without an offset)."),
                    until: str = typer.Option(None, "--until", help="Created before; as --since."),
                    limit: int = typer.Option(50, "--limit", min=1, max=10000),
                    as_json: bool = JSON_OPTION):
    """The delivery log, newest first."""
    created_since = parse_since(since) if since else None
    created_until = parse_since(until, option="--until") if until else None
    query = webhooks.deliveries(get_tenant(tenant).id, endpoint, event, status, created_since, created_until)
    query = query.limit(limit)
    data = [webhooks.delivery_as_dict(item) for item in query]
    # The table keeps to what fits a terminal; --json and `attempts` have the rest.
    show(data, as_json, lambda: table("webhook deliveries", ("id", "event id", "event", "status", "tries",
                                                             "last", "next attempt"),
                                      [(d["id"], d["event_id"], d["event"], d["status"],
                                        f"{d['attempts']}/{d['max_attempts']}",
                                        d["last_status_code"] or (d["last_error"] or "")[:30], d["next_attempt_at"])
                                       for d in data]))


@app.command("attempts")
@with_database
def list_attempts(delivery_id: int = typer.Argument(..., help="A delivery id from `deliveries`."),
                  as_json: bool = JSON_OPTION):
    """Every attempt of one delivery: status, latency, response excerpt, error."""
    if WebhookDelivery.get_or_none(WebhookDelivery.id == delivery_id) is None:
        raise NotFound(f"no delivery {delivery_id}")
    data = [attempt.as_dict() for attempt in webhooks.attempts_of(delivery_id)]
    show(data, as_json, lambda: table(f"attempts of delivery {delivery_id}",
                                      ("#", "at", "outcome", "status", "ms", "error", "response"),
                                      [(a["number"], a["attempted_at"], a["outcome"], a["status_code"],
                                        a["latency_ms"], a["error"], (a["response_excerpt"] or "")[:80])
                                       for a in data]))


@app.command("replay")
@with_database
def replay(event_id: str = typer.Argument(None, help="An evt_ id."),
           since: str = typer.Option(None, "--since", help="Replay every event since: ISO 8601 or 2h, 30m, 3d."),
           tenant: str = typer.Option(None, "--tenant", help="With --since: only this tenant's events."),
           as_json: bool = JSON_OPTION):
    """Deliver events again (same event id, same body) to the endpoints subscribed to them now."""
    if (event_id is None) == (since is None):
        fail("give either an EVENT_ID or --since TIME")
    if event_id is not None:
        created, endpoint_ids = webhooks.replay_event(event_id)
        scope = {"event_id": event_id}
    else:
        start = parse_since(since)
        tenant_id = get_tenant(tenant).id if tenant else None
        created, endpoint_ids = webhooks.replay_since(start, tenant_id)
        scope = {"since": isoformat(start)}
    delivery.start_drains(endpoint_ids)
    data = {**scope, "deliveries": created, "endpoints": len(endpoint_ids)}
    show(data, as_json, lambda: record(data, "replay queued"))


@app.command("test")
@with_database
def test_endpoint(endpoint_id: str = typer.Argument(..., help="A whend_ id."), as_json: bool = JSON_OPTION):
    """Send a signed `webhook.ping` to an endpoint now and print what it answered."""
    endpoint = webhooks.find_endpoint(endpoint_id)
    result = send_test(endpoint)
    response = result.response
    data = {"endpoint_id": endpoint.public_id, "url": result.url, "event_id": result.event_id,
            "delivered": response.ok, "status_code": response.status_code, "latency_ms": response.latency_ms,
            "error": response.error, "response_excerpt": response.excerpt}
    if as_json:
        print_json(data)
    else:
        show(data, False, lambda: record(data, "test ping"))
    if not response.ok:
        err.print(styled(("the endpoint did not accept the ping:", "red"), " ", response.error))
        raise typer.Exit(1)


@app.command("sweep")
@with_database
def sweep(as_json: bool = JSON_OPTION):
    """Fan out pending events now and queue a drain for every endpoint with due deliveries."""
    fanned, drains = delivery.kick()
    data = {"events_fanned_out": fanned, "drains_queued": drains}
    show(data, as_json, lambda: record(data, "webhook sweep"))
