"""The events package's tables: the outbox's events, and webhook endpoints, their deliveries and
every delivery attempt."""

from __future__ import annotations

from peewee import CharField, DateTimeField, ForeignKeyField, IntegerField, SmallIntegerField, TextField

from models.clock import isoformat, utcnow
from models.store import secrets
from models.store.base import BaseModel, JSONField
from models.store.secrets import EncryptedText
from models.tenancy.tables import Tenant

# The outbox (outbox.py).

# Every event the service posts, by name, in the order they are listed to companies. Each body is
# described by a model in types.py (the API document, the tests), which a running process never
# needs: the names are written out here so that none builds those models to start
# (tests/test_openapi_document.py checks that the two lists agree).
ALL_EVENTS = (
    "account.connected", "account.paused", "template.status_changed", "campaign.created", "campaign.completed",
    "message.sent", "message.delivered", "message.read", "message.failed", "message.inbound.created",
    "message.echo.created", "debt.payment_received", "debt.promise_made", "debt.disputed", "debt.promise_broken",
    "debt.escalated",
)
# The receivables events, whose fields go in `data` beside the event's id and time (as the contract
# shows for `debt.payment_received`); the others are flat, `{"event": name, ...fields}`.
ENVELOPED_EVENTS = frozenset(name for name in ALL_EVENTS if name.startswith("debt."))
# Delivered to the company's payment endpoint (webhooks.py), set by an administrator.
PAYMENT_EVENT = "debt.payment_received"
# Chosen in POST /webhooks/endpoints (the contract's nine, `account.paused`, and the other
# receivables events: what debtors say and what their plans do).
CORE_EVENTS = tuple(name for name in ALL_EVENTS if name != PAYMENT_EVENT)
PING_EVENT = "webhook.ping"
# The payment methods a payment may name (DECISIONS, `metodo`): its event's body and the inputs
# that take a payment read them from here, so the two can never disagree.
PAYMENT_METHODS = ("cash", "transfer", "card", "deposit", "check", "gateway", "other")


class Event(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    tenant = ForeignKeyField(Tenant, backref="events", on_delete="CASCADE")
    name = CharField(max_length=64)
    payload = JSONField()
    created_at = DateTimeField(default=utcnow)
    fanned_out_at = DateTimeField(null=True, index=True)


# Webhook endpoints, deliveries and attempts (webhooks.py).

KIND_API = "api"
KIND_PAYMENT = "payment"
OPEN_STATUSES = ("pending", "failed")
DELIVERY_STATUSES = ("pending", "failed", "delivered", "exhausted", "cancelled")


class WebhookEndpoint(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    tenant = ForeignKeyField(Tenant, backref="webhook_endpoints", on_delete="CASCADE")
    kind = CharField(max_length=16, default=KIND_API)
    url = CharField(max_length=1000)
    events = JSONField()
    status = CharField(max_length=16, default="active")
    secret_ciphertext = EncryptedText()
    secret_preview = CharField(max_length=32)
    # SHA-256 of the URL while active, NULL once inactive: the unique index below then allows
    # one active endpoint per URL and tenant, and any number of inactive ones (NULLs differ).
    active_url_hash = CharField(max_length=64, null=True)
    failure_count = IntegerField(default=0)
    last_success_at = DateTimeField(null=True)
    last_failure_at = DateTimeField(null=True)
    created_at = DateTimeField(default=utcnow)
    deactivated_at = DateTimeField(null=True)
    # One drain at a time per endpoint (its concurrency bound); see acquire_drain.
    drain_until = DateTimeField(null=True)
    # The earliest retry a drain has been scheduled for, so a burst of failures schedules one.
    wake_at = DateTimeField(null=True)

    class Meta:
        indexes = ((("tenant", "kind", "active_url_hash"), True),)

    @property
    def signing_secret(self) -> str:
        return secrets.decrypt(self.secret_ciphertext)

    def as_dict(self) -> dict:
        return {
            "id": self.public_id,
            "url": self.url,
            "events": list(self.events),
            "status": self.status,
            "signing_secret_preview": self.secret_preview,
            "last_success_at": isoformat(self.last_success_at),
            "last_failure_at": isoformat(self.last_failure_at),
            "failure_count": self.failure_count,
            "created_at": isoformat(self.created_at),
        }


class WebhookDelivery(BaseModel):
    # No index of their own: each is the first column of one in Meta (migration 0021).
    event = ForeignKeyField(Event, backref="deliveries", on_delete="CASCADE", index=False)
    endpoint = ForeignKeyField(WebhookEndpoint, backref="deliveries", on_delete="CASCADE", index=False)
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE", index=False)
    event_name = CharField(max_length=64)
    # 0 for the fan-out's delivery, 1, 2, ... for each replay of the event to the endpoint.
    sequence = SmallIntegerField(default=0)
    status = CharField(max_length=16, default="pending")
    attempts = IntegerField(default=0)
    max_attempts = IntegerField()
    next_attempt_at = DateTimeField(null=True)
    claimed_until = DateTimeField(null=True)
    last_status_code = IntegerField(null=True)
    last_error = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    updated_at = DateTimeField(default=utcnow)
    delivered_at = DateTimeField(null=True)

    class Meta:
        indexes = (
            # The fan-out inserts with ON CONFLICT DO NOTHING on this key: an event reaches an
            # endpoint once per fan-out even if two fan-outs were to overlap.
            (("event", "endpoint", "sequence"), True),
            (("endpoint", "status", "next_attempt_at"), False),
            (("status", "next_attempt_at"), False),
            (("tenant", "id"), False),
        )


class WebhookAttempt(BaseModel):
    delivery = ForeignKeyField(WebhookDelivery, backref="attempt_log", on_delete="CASCADE")
    number = IntegerField()
    attempted_at = DateTimeField(index=True)
    outcome = CharField(max_length=16)  # delivered | failed
    status_code = IntegerField(null=True)
    latency_ms = IntegerField(null=True)
    response_excerpt = TextField(null=True)
    error = TextField(null=True)

    def as_dict(self) -> dict:
        return {
            "number": self.number,
            "attempted_at": isoformat(self.attempted_at),
            "outcome": self.outcome,
            "status_code": self.status_code,
            "latency_ms": self.latency_ms,
            "response_excerpt": self.response_excerpt,
            "error": self.error,
        }
