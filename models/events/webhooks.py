"""Webhook endpoints, their deliveries and every delivery attempt.

- An endpoint belongs to a tenant. `api` endpoints are managed through /webhooks/endpoints and
  subscribe to core events; the tenant's one `payment` endpoint receives `debt.payment_received`
  and is set by an administrator (`set_payment_endpoint`).
- The signing secret is stored encrypted (models.store.secrets) and shown once, when created.
- `fan_out` turns outbox events into one delivery per subscribed active endpoint; a delivery is
  retried on RETRY_SCHEDULE until delivered or `exhausted`. Every attempt is kept.
- Nothing here talks to the network except the SSRF check's DNS lookups: the delivery engine
  (`delivery/`) claims due deliveries (`claim_due`), POSTs them and hands the outcomes back (`record`).

Delivery statuses: `pending` (not attempted yet), `failed` (the last attempt failed, a retry is
scheduled), `delivered`, `exhausted` (every attempt failed), `cancelled` (the endpoint was
deactivated before it succeeded).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import hmac
import operator
import random
import secrets as random_secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import orjson
from peewee import IntegrityError, fn

from config import get_settings
from models.clock import isoformat, stored_isoformat, utcnow
from models.errors import Conflict, Invalid, NotFound
from models.events import ssrf
from models.events.tables import (
    CORE_EVENTS,
    DELIVERY_STATUSES,
    KIND_API,
    KIND_PAYMENT,
    OPEN_STATUSES,
    PAYMENT_EVENT,
    PING_EVENT,
    Event,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from models.ids import new_id
from models.store import secrets
from models.store.db import atomic, bound_datetime, execute, fetch_one, is_postgres, placeholders, unindexed

# Seconds after the first attempt at which each attempt is due (DECISIONS: webhook retries).
# Each retry waits the gap from the previous attempt, so a delay (a backlog, a worker restart)
# shifts the rest of the curve instead of bunching several retries together.
RETRY_SCHEDULE: tuple[float, ...] = (0, 10, 60, 300, 1800, 7200, 21600, 43200, 86400)
# debt.payment_received: the first attempt plus 5 retries on the same curve.
PAYMENT_ATTEMPTS = 6
# Each gap is stretched or shrunk at random by up to this fraction, so the retries of a burst
# spread out while every attempt stays within 5 % of its place on the curve.
JITTER = 0.05
# A Retry-After longer than this is capped: the receiver still gets the event within a day.
MAX_RETRY_AFTER = 86400.0
EXCERPT_BYTES = 1024
MAX_ERROR_CHARS = 500
# A claimed delivery whose worker disappears is claimable again after this long (at least once).
CLAIM_SECONDS = 300
MAX_ACTIVE_ENDPOINTS = 20
SECRET_PREFIX = "whsec_"
PREVIEW_CHARS = 10



# --- signing -------------------------------------------------------------------------------


def new_signing_secret() -> str:
    return SECRET_PREFIX + random_secrets.token_urlsafe(32)


def preview_of(secret: str) -> str:
    return secret[:PREVIEW_CHARS] + "…"


@functools.lru_cache(maxsize=64)
def _keyed_mac(secret: str) -> hmac.HMAC:
    """The HMAC state after the key is absorbed; each signature starts from a copy of it."""
    return hmac.new(secret.encode(), digestmod=hashlib.sha256)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """`sha256=` + hex HMAC-SHA256 of `timestamp + "." + raw_body`, keyed with the secret."""
    mac = _keyed_mac(secret).copy()
    mac.update(str(timestamp).encode() + b"." + body)
    return "sha256=" + mac.hexdigest()


def signed_headers(secret: str, event_id: str, event_name: str, body: bytes, timestamp: int) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-Service-Event-Id": event_id,
        "X-Service-Event": event_name,
        "X-Service-Timestamp": str(timestamp),
        "X-Service-Signature": signature(secret, timestamp, body),
    }


# --- endpoints -----------------------------------------------------------------------------


def _url_hash(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


def check_target(url: str) -> None:
    """Refuse a URL we would not deliver to: not https, or (unless allowed) not public."""
    try:
        target = ssrf.parse_target(url)
        if not get_settings().webhook_allow_private:
            ssrf.vet(target, allow_private=False)
    except ssrf.UnsafeTarget as error:
        raise Invalid(f"url: {error}", details={"errors": {"url": [str(error)]}}) from None
    if len(url) > 1000:
        raise Invalid("url: at most 1000 characters", details={"errors": {"url": ["at most 1000 characters"]}})


def _normalize_events(events: Iterable[str]) -> list[str]:
    chosen = list(dict.fromkeys(events))
    unknown = [name for name in chosen if name not in CORE_EVENTS]
    if not chosen or unknown:
        message = f"unknown event {unknown[0]!r}" if unknown else "at least one event is required"
        raise Invalid(f"events: {message}", details={"errors": {"events": [message]}})
    return chosen


def create_endpoint(tenant_id: int, url: str, events: Iterable[str]) -> tuple[WebhookEndpoint, str]:
    """Register an endpoint; returns it with its signing secret, which is never shown again.

    409 `endpoint_exists` when the tenant already has an active endpoint with this URL (one URL
    receiving each event twice is never what a company wants; DELETE it first to replace it),
    409 `endpoint_limit_reached` past MAX_ACTIVE_ENDPOINTS active endpoints.
    """
    chosen = _normalize_events(events)
    check_target(url)
    secret = new_signing_secret()
    try:
        with atomic():
            active = (WebhookEndpoint.select()
                      .where((WebhookEndpoint.tenant == tenant_id) & (WebhookEndpoint.kind == KIND_API)
                             & (WebhookEndpoint.status == "active")).count())
            if active >= MAX_ACTIVE_ENDPOINTS:
                raise Conflict(f"a company may have at most {MAX_ACTIVE_ENDPOINTS} active webhook endpoints",
                               code="endpoint_limit_reached", details={"limit": MAX_ACTIVE_ENDPOINTS})
            endpoint = WebhookEndpoint.create(
                public_id=new_id("whend_"), tenant=tenant_id, kind=KIND_API, url=url, events=chosen,
                secret_ciphertext=secrets.encrypt(secret), secret_preview=preview_of(secret),
                active_url_hash=_url_hash(url))
    except IntegrityError:
        existing = WebhookEndpoint.get_or_none(
            (WebhookEndpoint.tenant == tenant_id) & (WebhookEndpoint.kind == KIND_API)
            & (WebhookEndpoint.active_url_hash == _url_hash(url)))
        raise Conflict("an active webhook endpoint with this URL already exists", code="endpoint_exists",
                       details={"endpoint_id": existing.public_id if existing else None}) from None
    return endpoint, secret


def endpoints_of(tenant_id: int):
    """The tenant's API-managed endpoints, newest first."""
    return (WebhookEndpoint.select()
            .where((WebhookEndpoint.tenant == tenant_id) & (WebhookEndpoint.kind == KIND_API))
            .order_by(WebhookEndpoint.id.desc()))


def get_endpoint(tenant_id: int, public_id: str, kind: str | None = KIND_API) -> WebhookEndpoint:
    condition = (WebhookEndpoint.tenant == tenant_id) & (WebhookEndpoint.public_id == public_id)
    if kind is not None:
        condition &= WebhookEndpoint.kind == kind
    endpoint = WebhookEndpoint.get_or_none(condition)
    if endpoint is None:
        raise NotFound(f"no webhook endpoint {public_id}", code="endpoint_not_found")
    return endpoint


def find_endpoint(public_id: str) -> WebhookEndpoint:
    """Any tenant's endpoint by id: administration only (svcctl)."""
    endpoint = WebhookEndpoint.get_or_none(WebhookEndpoint.public_id == public_id)
    if endpoint is None:
        raise NotFound(f"no webhook endpoint {public_id}", code="endpoint_not_found")
    return endpoint


def _deactivate(endpoint: WebhookEndpoint, reason: str) -> None:
    """Inside a transaction: stop the endpoint and cancel what it has not received yet."""
    now = utcnow()
    WebhookEndpoint.update(status="inactive", active_url_hash=None, deactivated_at=now).where(
        (WebhookEndpoint.id == endpoint.id) & (WebhookEndpoint.status == "active")).execute()
    WebhookDelivery.update(status="cancelled", next_attempt_at=None, last_error=reason, updated_at=now).where(
        (WebhookDelivery.endpoint == endpoint.id) & WebhookDelivery.status.in_(OPEN_STATUSES)).execute()
    endpoint.status = "inactive"
    endpoint.deactivated_at = now


def deactivate_endpoint(tenant_id: int, public_id: str) -> WebhookEndpoint:
    """DELETE: the endpoint stops receiving events, retries pending for it included. Idempotent."""
    with atomic():
        endpoint = get_endpoint(tenant_id, public_id)
        if endpoint.status == "active":
            _deactivate(endpoint, "endpoint deactivated")
    return endpoint


def get_payment_endpoint(tenant_id: int) -> WebhookEndpoint | None:
    return WebhookEndpoint.get_or_none((WebhookEndpoint.tenant == tenant_id)
                                       & (WebhookEndpoint.kind == KIND_PAYMENT)
                                       & (WebhookEndpoint.status == "active"))


def set_payment_endpoint(tenant_id: int, url: str) -> tuple[WebhookEndpoint, str]:
    """Set the tenant's `debt.payment_received` target; returns it with its new signing secret.

    Setting it again (even to the same URL) replaces the endpoint and its secret. Payments not
    yet delivered to the previous endpoint move to the new one rather than being dropped: the
    ERP still needs them, and the new URL is where the company now receives them.
    """
    check_target(url)
    secret = new_signing_secret()
    with atomic():
        previous = get_payment_endpoint(tenant_id)
        if previous is not None:
            WebhookEndpoint.update(status="inactive", active_url_hash=None, deactivated_at=utcnow()).where(
                WebhookEndpoint.id == previous.id).execute()
        endpoint = WebhookEndpoint.create(
            public_id=new_id("whend_"), tenant=tenant_id, kind=KIND_PAYMENT, url=url, events=[PAYMENT_EVENT],
            secret_ciphertext=secrets.encrypt(secret), secret_preview=preview_of(secret),
            active_url_hash=_url_hash(url))
        if previous is not None:
            WebhookDelivery.update(endpoint=endpoint.id, claimed_until=None, updated_at=utcnow()).where(
                (WebhookDelivery.endpoint == previous.id) & WebhookDelivery.status.in_(OPEN_STATUSES)).execute()
    return endpoint, secret


def _subscribed(endpoint: WebhookEndpoint, event_name: str) -> bool:
    if endpoint.kind == KIND_PAYMENT:
        return event_name == PAYMENT_EVENT
    return event_name in endpoint.events


# --- fan-out -------------------------------------------------------------------------------


def max_attempts_for(event_name: str) -> int:
    return min(PAYMENT_ATTEMPTS, len(RETRY_SCHEDULE)) if event_name == PAYMENT_EVENT else len(RETRY_SCHEDULE)


@dataclass
class FanOut:
    events: int = 0
    deliveries: int = 0
    endpoint_ids: set[int] = field(default_factory=set)


def _active_endpoints_by_tenant(tenant_ids: Iterable[int]) -> dict[int, list[WebhookEndpoint]]:
    by_tenant: dict[int, list[WebhookEndpoint]] = {}
    query = WebhookEndpoint.select().where(WebhookEndpoint.tenant.in_(list(tenant_ids))
                                           & (WebhookEndpoint.status == "active"))
    for endpoint in query:
        by_tenant.setdefault(endpoint.tenant_id, []).append(endpoint)
    return by_tenant


# Picks the oldest events not fanned out yet and stamps them; the outer `IS NULL` is re-checked
# on each row as it is written, so of two concurrent fan-outs only one stamps (and returns) it.
# On PostgreSQL the picked rows are locked with SKIP LOCKED: concurrent fan-outs take disjoint
# events instead of waiting for each other's rows in different orders (a deadlock).
_FAN_OUT_CLAIM_SQL = (
    'UPDATE "event" SET "fanned_out_at" = ? WHERE "id" IN ('
    ' SELECT "id" FROM "event" WHERE "fanned_out_at" IS NULL ORDER BY "id" LIMIT ?{lock})'
    ' AND "fanned_out_at" IS NULL RETURNING "id", "tenant_id", "name"'
)


def fan_out(limit: int = 500, now: dt.datetime | None = None) -> FanOut:
    """Turn up to `limit` outbox events into deliveries, in one transaction.

    1. Claim the oldest events not fanned out yet (_FAN_OUT_CLAIM_SQL); RETURNING gives exactly
       the rows this call stamped.
    2. Insert one delivery per claimed event and subscribed active endpoint, in the same
       transaction: a crash leaves either both (stamp and deliveries) or neither.
    """
    now = now or utcnow()
    result = FanOut()
    with atomic():
        lock = " FOR UPDATE SKIP LOCKED" if is_postgres() else ""
        claimed = execute(_FAN_OUT_CLAIM_SQL.format(lock=lock), (now, limit)).fetchall()
        result.events = len(claimed)
        if not claimed:
            return result
        endpoints = _active_endpoints_by_tenant({tenant_id for _id, tenant_id, _name in claimed})
        # A batch holds many events of few (tenant, name) pairs: who subscribes is worked out once a pair.
        subscribers: dict[tuple[int, str], list[WebhookEndpoint]] = {}
        created_at = bound_datetime(now)  # three columns of every row
        rows = []
        for event_id, tenant_id, name in sorted(claimed):
            targets = subscribers.get((tenant_id, name))
            if targets is None:
                targets = subscribers[tenant_id, name] = [
                    endpoint for endpoint in endpoints.get(tenant_id, ()) if _subscribed(endpoint, name)]
                result.endpoint_ids.update(endpoint.id for endpoint in targets)
            for endpoint in targets:
                rows.append(_delivery_row(event_id, endpoint, tenant_id, name, 0, created_at))
        result.deliveries = _insert_deliveries(rows)
    return result


def _delivery_row(event_id: int, endpoint: WebhookEndpoint, tenant_id: int, name: str, sequence: int,
                  now) -> tuple:
    """Values in _DELIVERY_COLUMNS order; `now` as `bound_datetime` gives it."""
    return (event_id, endpoint.id, tenant_id, name, sequence, "pending", 0, max_attempts_for(name), now, now, now)


_DELIVERY_COLUMNS = ("event_id", "endpoint_id", "tenant_id", "event_name", "sequence", "status", "attempts",
                     "max_attempts", "next_attempt_at", "created_at", "updated_at")


def _insert_deliveries(rows: list[tuple]) -> int:
    """Multi-row INSERT .. ON CONFLICT DO NOTHING, written once (this is the fan-out's hot path).

    Returns how many were inserted (a delivery that already exists is left alone)."""
    columns = ", ".join(f'"{name}"' for name in _DELIVERY_COLUMNS)
    row_marks = "(" + ", ".join("?" * len(_DELIVERY_COLUMNS)) + ")"
    inserted = 0
    # Chunks keep each statement well under SQLite's bound-parameter limit.
    for start in range(0, len(rows), 200):
        chunk = rows[start:start + 200]
        inserted += execute(f'INSERT INTO "{WebhookDelivery._meta.table_name}" ({columns}) VALUES '
                            f'{", ".join([row_marks] * len(chunk))} ON CONFLICT DO NOTHING',
                            [value for row in chunk for value in row]).rowcount
    return inserted


# --- claiming and recording attempts -------------------------------------------------------


class Work(NamedTuple):
    """One claimed delivery, with the exact bytes to POST (a tuple: a claim makes hundreds at once,
    and a frozen dataclass sets each field through object.__setattr__)."""

    delivery_id: int
    attempt: int  # the number this attempt will have (1 = first)
    max_attempts: int
    event_id: str
    event_name: str
    body: bytes


@dataclass
class Outcome:
    """What one attempt produced; the delivery engine fills it in, `record` stores it."""

    delivery_id: int
    attempt: int
    max_attempts: int
    attempted_at: dt.datetime
    ok: bool
    status_code: int | None = None
    latency_ms: int | None = None
    excerpt: str | None = None
    error: str | None = None
    retry_after: float | None = None
    # Connection refused, timed out, TLS failure: the endpoint itself is unreachable.
    unreachable: bool = False


def _due_sql(table: str) -> str:
    """A delivery of `table` (its name or alias) due now: open, its time come, and no live claim
    on it; OPEN_STATUSES spelled out. Two parameters: now, twice."""
    return (f'''"{table}"."status" IN ('pending', 'failed') AND "{table}"."next_attempt_at" <= ? '''
            f'AND ("{table}"."claimed_until" IS NULL OR "{table}"."claimed_until" < ?)')


# A drain's statements around its claims, written once by hand: a drain runs them however few
# deliveries it carries (most carry one or two), and peewee building their text cost more than
# running them. OPEN_STATUSES spelled out.
_ACQUIRE_DRAIN_SQL = ("""UPDATE "webhook_endpoint" SET "drain_until" = ? WHERE "id" = ? AND "status" = 'active' """
                      'AND ("drain_until" IS NULL OR "drain_until" < ?)')
_DRAIN_HELD_SQL = 'SELECT 1 FROM "webhook_endpoint" WHERE "id" = ? AND "drain_until" >= ?'
_EXTEND_DRAIN_SQL = 'UPDATE "webhook_endpoint" SET "drain_until" = ? WHERE "id" = ? AND "drain_until" = ?'
_RELEASE_DRAIN_SQL = 'UPDATE "webhook_endpoint" SET "drain_until" = NULL WHERE "id" = ? AND "drain_until" = ?'
_RELEASE_CLAIMS_SQL = ('UPDATE "webhook_delivery" SET "claimed_until" = NULL WHERE "endpoint_id" = ? '
                       """AND "status" IN ('pending', 'failed') AND "claimed_until" > ?""")
_HAS_DUE_SQL = f'SELECT 1 FROM "webhook_delivery" WHERE "endpoint_id" = ? AND {_due_sql("webhook_delivery")} LIMIT 1'
_ENDPOINTS_WITH_DUE_SQL = (
    'SELECT DISTINCT "d"."endpoint_id" FROM "webhook_delivery" AS "d" JOIN "webhook_endpoint" AS "e" '
    f"""ON "e"."id" = "d"."endpoint_id" WHERE "e"."status" = 'active' AND {_due_sql("d")}"""
)
_EARLIEST_RETRY_SQL = ('SELECT MIN("next_attempt_at") FROM "webhook_delivery" WHERE "endpoint_id" = ? '
                       """AND "status" IN ('pending', 'failed') AND "next_attempt_at" > ?""")
_PLAN_WAKE_SQL = ('UPDATE "webhook_endpoint" SET "wake_at" = ? WHERE "id" = ? '
                  'AND ("wake_at" IS NULL OR "wake_at" <= ? OR "wake_at" > ?)')
_TAKE_WAKE_SQL = 'UPDATE "webhook_endpoint" SET "wake_at" = NULL WHERE "id" = ? AND "wake_at" = ?'


def acquire_drain(endpoint_id: int, now: dt.datetime, seconds: float) -> dt.datetime | None:
    """Take the endpoint's drain lease; None when another drain holds it or it is inactive.

    Only the holder sends to the endpoint, which is what bounds its concurrency. The lease
    expires by itself so a worker that dies does not keep it. The returned expiry is the
    holder's token: extending and releasing match on it, so a drain whose lease lapsed and was
    taken over can never release or extend its successor's.
    """
    until = now + dt.timedelta(seconds=seconds)
    return until if execute(_ACQUIRE_DRAIN_SQL, (until, endpoint_id, now)).rowcount == 1 else None


def drain_held(endpoint_id: int, now: dt.datetime) -> bool:
    """Whether a drain holds the endpoint's lease now: asked with a read, so that a drain turned
    away (the fan-out starts one for every endpoint that got deliveries) writes nothing."""
    return fetch_one(_DRAIN_HELD_SQL, (endpoint_id, now)) is not None


def extend_drain(endpoint_id: int, lease: dt.datetime, now: dt.datetime, seconds: float) -> dt.datetime | None:
    """Push the lease out; None when it is no longer ours."""
    until = now + dt.timedelta(seconds=seconds)
    return until if execute(_EXTEND_DRAIN_SQL, (until, endpoint_id, lease)).rowcount == 1 else None


def release_drain(endpoint_id: int, lease: dt.datetime) -> None:
    execute(_RELEASE_DRAIN_SQL, (endpoint_id, lease))


def release_claims(endpoint_id: int, now: dt.datetime) -> int:
    """Free the endpoint's claimed deliveries that no outcome was recorded for; call right after
    taking its drain lease. Only the lease holder claims, so these belong to an earlier drain
    that lost or gave up the lease, most likely with its worker: they go out again now (at
    least once) rather than when their claim expires, CLAIM_SECONDS later."""
    return execute(_RELEASE_CLAIMS_SQL, (endpoint_id, now)).rowcount


def has_due(endpoint_id: int, now: dt.datetime) -> bool:
    return fetch_one(_HAS_DUE_SQL, (endpoint_id, now, now)) is not None


def endpoints_with_due_work(now: dt.datetime) -> list[int]:
    return [row[0] for row in execute(_ENDPOINTS_WITH_DUE_SQL, (now, now)).fetchall()]


_CLAIM_SQL = (
    'UPDATE "webhook_delivery" SET "claimed_until" = ? WHERE "id" IN ('
    ' SELECT "d"."id" FROM "webhook_delivery" AS "d"'
    ' JOIN "webhook_endpoint" AS "e" ON "e"."id" = "d"."endpoint_id"'
    f""" WHERE "d"."endpoint_id" = ? AND "e"."status" = 'active' AND {_due_sql("d")}"""
    ' ORDER BY "d"."next_attempt_at", "d"."id" LIMIT ?)'
    ' AND ("claimed_until" IS NULL OR "claimed_until" < ?)'
    ' RETURNING "id", "attempts", "max_attempts", "event_id", "next_attempt_at"'
)


def claim_due(endpoint_id: int, limit: int, now: dt.datetime) -> list[Work]:
    """Claim up to `limit` due deliveries of an active endpoint, oldest due first.

    One conditional UPDATE picks and claims them: the claim condition is re-checked on each
    row as it is written, so a delivery is never handed to two senders at once. The claim
    expires after CLAIM_SECONDS, so one whose worker died is sent again (at least once).
    Hand-written SQL: this runs for every batch of every delivery.
    """
    claimed_until = now + dt.timedelta(seconds=CLAIM_SECONDS)
    # One transaction for the claim and the read of the bodies: if the read fails, the claim
    # is undone with it and the whole call can simply run again.
    with atomic():
        claimed = execute(_CLAIM_SQL, (claimed_until, endpoint_id, now, now, limit, now)).fetchall()
        if not claimed:
            return []
        # The body is the event's JSON text exactly as stored when it was emitted (read raw,
        # never parsed and re-serialized): every attempt and every replay sends the same bytes.
        event_ids = sorted({row[3] for row in claimed})
        events = {row[0]: row[1:] for row in execute(
            f'SELECT "id", "public_id", "name", "payload" FROM "{Event._meta.table_name}" WHERE "id" IN '
            f'({", ".join("?" * len(event_ids))})', event_ids).fetchall()}
    works = []
    # Due order (next_attempt_at, then id): RETURNING gives the rows in no particular order.
    for delivery_id, attempts, max_attempts, event_id, _due_at in sorted(claimed, key=_due_order):
        public_id, name, payload = events[event_id]
        works.append(Work(delivery_id, attempts + 1, max_attempts, public_id, name, payload.encode()))
    return works


_due_order = operator.itemgetter(4, 0)


def retry_delay(attempts_made: int, rng: random.Random | None = None) -> float:
    """Seconds from attempt number `attempts_made` to the next: the schedule's gap, give or take jitter."""
    gap = RETRY_SCHEDULE[attempts_made] - RETRY_SCHEDULE[attempts_made - 1]
    return gap * (1 + (rng or random).uniform(-JITTER, JITTER))


def _truncate(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    return text if len(text) <= limit else text[:limit - 1] + "…"


def record(endpoint_id: int, outcomes: Sequence[Outcome], rng: random.Random | None = None) -> None:
    """Store a batch of attempts and move their deliveries on, in one transaction.

    A delivery moves only while it is still open: one cancelled meanwhile (its endpoint was
    deleted) keeps its status, though the attempt that was already on the wire is logged.
    The SQL is written once by hand: this runs for every delivery, beside the HTTP it records.
    """
    if not outcomes:
        return
    # Each attempt's time goes into three columns (the attempt's, the delivery's update and delivery times).
    attempted_at = [bound_datetime(outcome.attempted_at) for outcome in outcomes]
    with atomic():
        _update_endpoint_health(endpoint_id, outcomes)  # the endpoint's row first: the lock order
        _insert_attempts(outcomes, attempted_at)
        _advance([_advance_params(outcome, at, rng) for outcome, at in zip(outcomes, attempted_at, strict=True)])


_ATTEMPT_COLUMNS = ("delivery_id", "number", "attempted_at", "outcome", "status_code", "latency_ms",
                    "response_excerpt", "error")
# The columns `_advance_params` gives, in its order; the delivery's id comes last.
_ADVANCE_COLUMNS = ("status", "attempts", "next_attempt_at", "last_status_code", "last_error", "updated_at",
                    "delivered_at")
_ADVANCE_CHUNK = 500


def _advance(rows: list[tuple]) -> None:
    """Move the deliveries on: one UPDATE per chunk, each column one value or a CASE by id.

    One statement, not one per delivery: SQLite's driver gives up the GIL at every statement it
    steps, and with the senders' threads busy each of them waited its turn to take it back, the
    transaction (and SQLite's writers' turn) held all the while. Only an open delivery moves (see
    `record`); OPEN_STATUSES spelled out.
    """
    rows = list({row[-1]: row for row in rows}.values())  # a delivery's last outcome, as statement by statement
    for start in range(0, len(rows), _ADVANCE_CHUNK):
        chunk = rows[start:start + _ADVANCE_CHUNK]
        ids = [row[-1] for row in chunk]
        sets, params = [], []
        for position, column in enumerate(_ADVANCE_COLUMNS):
            values = [row[position] for row in chunk]
            if len(set(values)) == 1:  # the usual case for all but the times: delivered, first attempt
                value_sql = "?"
                params.append(values[0])
            else:
                value_sql = f'CASE "id"{" WHEN ? THEN ?" * len(chunk)} END'
                for row_id, value in zip(ids, values, strict=True):
                    params += [row_id, value]
            sets.append(f'"{column}" = ' + (f'COALESCE({value_sql}, "delivered_at")' if column == "delivered_at"
                                            else value_sql))
        execute(f'UPDATE "webhook_delivery" SET {", ".join(sets)}, "claimed_until" = NULL '
                f"""WHERE "id" IN ({placeholders(len(ids))}) AND {unindexed('"status"')} IN ('pending', 'failed')""",
                params + ids)


def _insert_attempts(outcomes: Sequence[Outcome], attempted_at: list) -> None:
    columns = ", ".join(f'"{name}"' for name in _ATTEMPT_COLUMNS)
    row_marks = "(" + ", ".join("?" * len(_ATTEMPT_COLUMNS)) + ")"
    for start in range(0, len(outcomes), 200):
        chunk = outcomes[start:start + 200]
        params: list = []
        for outcome, at in zip(chunk, attempted_at[start:start + 200], strict=True):
            params += [outcome.delivery_id, outcome.attempt, at,
                       "delivered" if outcome.ok else "failed", outcome.status_code, outcome.latency_ms,
                       _truncate(outcome.excerpt, EXCERPT_BYTES), _truncate(outcome.error, MAX_ERROR_CHARS)]
        execute(f'INSERT INTO "{WebhookAttempt._meta.table_name}" ({columns}) VALUES '
                f'{", ".join([row_marks] * len(chunk))}', params)


def _advance_params(outcome: Outcome, attempted_at, rng: random.Random | None) -> tuple:
    """A row of `_advance` (`_ADVANCE_COLUMNS`, then the delivery's id): delivered, failed with a
    retry scheduled, or exhausted (`attempted_at`: the outcome's, as `bound_datetime` gives it)."""
    if outcome.ok:
        status, next_at, error, delivered_at = "delivered", None, None, attempted_at
    else:
        error, delivered_at = _truncate(outcome.error, MAX_ERROR_CHARS), None
        if outcome.attempt >= min(outcome.max_attempts, len(RETRY_SCHEDULE)):
            status, next_at = "exhausted", None
        else:
            delay = retry_delay(outcome.attempt, rng)
            if outcome.retry_after is not None:
                delay = max(delay, min(outcome.retry_after, MAX_RETRY_AFTER))
            status, next_at = "failed", outcome.attempted_at + dt.timedelta(seconds=delay)
    return (status, outcome.attempt, next_at, outcome.status_code, error, attempted_at, delivered_at,
            outcome.delivery_id)


# The endpoint's health after a batch, one statement per shape: (any success, any failure).
_HEALTH_SQL = {
    (True, True): 'UPDATE "webhook_endpoint" SET "last_success_at" = ?, "failure_count" = ?, "last_failure_at" = ? '
                  'WHERE "id" = ?',
    (True, False): 'UPDATE "webhook_endpoint" SET "last_success_at" = ?, "failure_count" = ? WHERE "id" = ?',
    (False, True): 'UPDATE "webhook_endpoint" SET "failure_count" = "failure_count" + ?, "last_failure_at" = ? '
                   'WHERE "id" = ?',
}


def _update_endpoint_health(endpoint_id: int, outcomes: Sequence[Outcome]) -> None:
    """`failure_count` counts consecutive failures: a success resets it, in attempt order."""
    ordered = sorted(outcomes, key=_attempted_at)
    last_success = last_failure = None
    trailing = 0  # failures after the last success
    for outcome in ordered:
        if outcome.ok:
            last_success, trailing = outcome.attempted_at, 0
        else:
            last_failure, trailing = outcome.attempted_at, trailing + 1
    if last_success is None:
        params: tuple = (trailing, last_failure, endpoint_id)
    elif last_failure is None:
        params = (last_success, trailing, endpoint_id)
    else:
        params = (last_success, trailing, last_failure, endpoint_id)
    execute(_HEALTH_SQL[last_success is not None, last_failure is not None], params)


_attempted_at = operator.attrgetter("attempted_at")


def plan_wake(endpoint_id: int, now: dt.datetime) -> dt.datetime | None:
    """The time of the endpoint's next retry if a drain must be scheduled for it, else None.

    Scheduling goes through `wake_at`: a conditional UPDATE succeeds only when no drain is
    already scheduled at or before that time, so a burst of failures schedules one drain. The
    drain scheduled for a wake takes it off (`take_wake`) when it runs, so a drain that finds
    nothing due yet always schedules the next one.
    """
    (earliest,) = fetch_one(_EARLIEST_RETRY_SQL, (endpoint_id, now))
    if earliest is None:
        return None
    if isinstance(earliest, str):  # SQLite returns an aggregate of datetimes as text
        earliest = dt.datetime.fromisoformat(earliest)
    return earliest if execute(_PLAN_WAKE_SQL, (earliest, endpoint_id, now, earliest)).rowcount == 1 else None


def take_wake(endpoint_id: int, wake: dt.datetime) -> None:
    """The drain scheduled for `wake` is running: no drain is scheduled for it any more."""
    execute(_TAKE_WAKE_SQL, (endpoint_id, wake))


# --- replay, listing, retention ------------------------------------------------------------


def _replay_to_current_endpoints(events: Sequence[Event], now: dt.datetime) -> tuple[int, set[int]]:
    """New deliveries (next sequence) of `events` to the endpoints subscribed to them today."""
    endpoints = _active_endpoints_by_tenant({event.tenant_id for event in events})
    latest: dict[tuple[int, int], int] = {}
    query = (WebhookDelivery.select(WebhookDelivery.event, WebhookDelivery.endpoint,
                                    fn.MAX(WebhookDelivery.sequence))
             .where(WebhookDelivery.event.in_([event.id for event in events]))
             .group_by(WebhookDelivery.event, WebhookDelivery.endpoint))
    for event_id, endpoint_id, sequence in query.tuples():
        latest[(event_id, endpoint_id)] = sequence
    rows = []
    touched: set[int] = set()
    created_at = bound_datetime(now)
    for event in events:
        for endpoint in endpoints.get(event.tenant_id, ()):
            if _subscribed(endpoint, event.name):
                sequence = latest.get((event.id, endpoint.id), -1) + 1
                rows.append(_delivery_row(event.id, endpoint, event.tenant_id, event.name, sequence, created_at))
                touched.add(endpoint.id)
    return _insert_deliveries(rows), touched


def replay_event(event_public_id: str, tenant_id: int | None = None) -> tuple[int, set[int]]:
    """Deliver an event again (same event id, same body) to the endpoints subscribed to it now.

    Returns the number of deliveries created and the endpoints to drain.
    """
    condition = Event.public_id == event_public_id
    if tenant_id is not None:
        condition &= Event.tenant == tenant_id
    event = Event.get_or_none(condition)
    if event is None:
        raise NotFound(f"no event {event_public_id}", code="event_not_found")
    with atomic():
        return _replay_to_current_endpoints([event], utcnow())


def replay_since(since: dt.datetime, tenant_id: int | None = None, batch: int = 500) -> tuple[int, set[int]]:
    """Replay every event created at or after `since` (optionally one tenant's)."""

    def events_after(last_id: int) -> list[Event]:
        condition = (Event.created_at >= since) & (Event.id > last_id)
        if tenant_id is not None:
            condition &= Event.tenant == tenant_id
        return list(Event.select().where(condition).order_by(Event.id).limit(batch))

    return _replay_in_batches(events_after)


def replay_failed_since(tenant_id: int, since: dt.datetime, batch: int = 500) -> tuple[int, set[int]]:
    """Replay the tenant's events with a delivery created at or after `since` that has not
    succeeded and will not by itself soon: `exhausted`, or `failed` and waiting for a retry."""

    def events_after(last_id: int) -> list[Event]:
        failed = (WebhookDelivery.select(WebhookDelivery.event).distinct()
                  .where((WebhookDelivery.tenant == tenant_id) & (WebhookDelivery.created_at >= since)
                         & WebhookDelivery.status.in_(("failed", "exhausted")) & (WebhookDelivery.event > last_id))
                  .order_by(WebhookDelivery.event).limit(batch))
        return list(Event.select().where(Event.id.in_([row.event_id for row in failed])).order_by(Event.id))

    return _replay_in_batches(events_after)


def _replay_in_batches(events_after: Callable[[int], list[Event]]) -> tuple[int, set[int]]:
    """Replay batch after batch of events (ascending id after the last one replayed), each batch in
    a transaction of its own; returns the deliveries created and the endpoints they went to."""
    total = 0
    touched: set[int] = set()
    last_id = 0
    while events := events_after(last_id):
        with atomic():
            created, endpoints = _replay_to_current_endpoints(events, utcnow())
        total += created
        touched |= endpoints
        last_id = events[-1].id
    return total, touched


def deliveries(tenant_id: int, endpoint_public_id: str | None = None, event_name: str | None = None,
               status: str | None = None, since: dt.datetime | None = None, until: dt.datetime | None = None):
    """A tenant's deliveries, newest first, with their endpoint and event joined; each filter
    given narrows it (created at or after `since`, before `until`: naive UTC).

    Newest first means by id, which is unique: a list paged by id (`delivery_log_page`) has no
    ties to break, however many deliveries share a creation time, so every matching delivery
    is on exactly one page."""
    query = (WebhookDelivery.select(WebhookDelivery, WebhookEndpoint, Event)
             .join(WebhookEndpoint).switch(WebhookDelivery).join(Event)
             .where(WebhookDelivery.tenant == tenant_id).order_by(WebhookDelivery.id.desc()))
    if since is not None:
        query = query.where(WebhookDelivery.created_at >= since)
    if until is not None:
        query = query.where(WebhookDelivery.created_at < until)
    if endpoint_public_id is not None:
        query = query.where(WebhookEndpoint.public_id == endpoint_public_id)
    if event_name is not None:
        query = query.where(WebhookDelivery.event_name == event_name)
    if status is not None:
        if status not in DELIVERY_STATUSES:
            raise Invalid(f"unknown delivery status {status!r}; one of {', '.join(DELIVERY_STATUSES)}")
        query = query.where(WebhookDelivery.status == status)
    return query


def delivery_as_dict(delivery: WebhookDelivery) -> dict:
    return {
        "id": delivery.id,
        "event_id": delivery.event.public_id,
        "event": delivery.event_name,
        "endpoint_id": delivery.endpoint.public_id,
        "url": delivery.endpoint.url,
        "sequence": delivery.sequence,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "max_attempts": delivery.max_attempts,
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "next_attempt_at": isoformat(delivery.next_attempt_at) if delivery.status in OPEN_STATUSES else None,
        "delivered_at": isoformat(delivery.delivered_at),
        "created_at": isoformat(delivery.created_at),
    }


# The delivery log's page for the API, written by hand: peewee built the query and a delivery,
# its endpoint and its event as model objects for every row, several times what the database
# did. The statement is put together from fixed pieces, one per filter given, so each set of
# filters has one text, spelled once per engine.
_DELIVERY_LOG = ('SELECT d."id", e."public_id", d."event_name", w."public_id", w."url", d."sequence", d."status", '
                 'd."attempts", d."max_attempts", d."last_status_code", d."last_error", d."next_attempt_at", '
                 'd."delivered_at", d."created_at" '
                 'FROM "webhook_delivery" AS d JOIN "webhook_endpoint" AS w ON w."id" = d."endpoint_id" '
                 'JOIN "event" AS e ON e."id" = d."event_id" WHERE d."tenant_id" = ?')
_DELIVERY_FILTERS = (('since', ' AND d."created_at" >= ?'), ('until', ' AND d."created_at" < ?'),
                     ('endpoint_public_id', ' AND w."public_id" = ?'), ('event_name', ' AND d."event_name" = ?'),
                     ('status', ' AND d."status" = ?'), ('before_id', ' AND d."id" < ?'))


def delivery_log_page(tenant_id: int, before_id: int | None, limit: int, *, endpoint_public_id: str | None = None,
                      event_name: str | None = None, status: str | None = None, since: dt.datetime | None = None,
                      until: dt.datetime | None = None) -> tuple[list[dict], bool]:
    """The deliveries `deliveries(...)` holds after the cursor `before_id` (the last id of the
    page before; None for the first): up to `limit`, newest first, each as `delivery_as_dict`
    gives it, and whether more follow; from one statement, an index seek on (tenant, id) whatever
    the page's depth (tests/test_webhooks_deliveries_read.py keeps the peewee version)."""
    if status is not None and status not in DELIVERY_STATUSES:
        raise Invalid(f"unknown delivery status {status!r}; one of {', '.join(DELIVERY_STATUSES)}")
    given = {"since": bound_datetime(since), "until": bound_datetime(until), "endpoint_public_id": endpoint_public_id,
             "event_name": event_name, "status": status, "before_id": before_id}
    sql, params = _DELIVERY_LOG, [tenant_id]
    for name, condition in _DELIVERY_FILTERS:
        if given[name] is not None:
            sql += condition
            params.append(given[name])
    rows = execute(sql + ' ORDER BY d."id" DESC LIMIT ?', [*params, limit + 1]).fetchall()
    found = []
    for (delivery_id, event_id, name, endpoint_id, url, sequence, delivery_status, attempts, max_attempts,
         last_status_code, last_error, next_attempt_at, delivered_at, created_at) in rows[:limit]:
        found.append({
            "id": delivery_id, "event_id": event_id, "event": name, "endpoint_id": endpoint_id, "url": url,
            "sequence": sequence, "status": delivery_status, "attempts": attempts, "max_attempts": max_attempts,
            "last_status_code": last_status_code, "last_error": last_error,
            "next_attempt_at": stored_isoformat(next_attempt_at) if delivery_status in OPEN_STATUSES else None,
            "delivered_at": stored_isoformat(delivered_at), "created_at": stored_isoformat(created_at),
        })
    return found, len(rows) > limit


def attempts_of(delivery_id: int):
    return WebhookAttempt.select().where(WebhookAttempt.delivery == delivery_id).order_by(WebhookAttempt.id)


def prune(retention_days: int, now: dt.datetime | None = None) -> tuple[int, int]:
    """Delete attempts older than the retention, and finished deliveries last touched before it."""
    cutoff = (now or utcnow()) - dt.timedelta(days=retention_days)
    with atomic():
        attempts = WebhookAttempt.delete().where(WebhookAttempt.attempted_at < cutoff).execute()
        finished = WebhookDelivery.delete().where(
            WebhookDelivery.status.not_in(OPEN_STATUSES) & (WebhookDelivery.updated_at < cutoff)).execute()
    return attempts, finished


def ping_body(endpoint: WebhookEndpoint, event_id: str, now: dt.datetime | None = None) -> bytes:
    """The test event `svcctl webhooks test` sends; never stored in the outbox."""
    return orjson.dumps({"event": PING_EVENT, "id": event_id, "endpoint_id": endpoint.public_id,
                         "timestamp": isoformat(now or utcnow())})
