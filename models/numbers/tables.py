"""The numbers package's tables: messaging numbers (accounts), their templates, customer windows
and business-initiated sends, the platform's users, onboarding attempts, and the platform's
webhook batches as received.

The batches are here rather than beside what applies them (models/inbox/): sending's recovery
reads them, since a status that settles a send may still be waiting in one.
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from peewee import BooleanField, CharField, DateTimeField, ForeignKeyField, IntegerField, TextField

from models.clock import isoformat, utcnow
from models.store.base import BaseModel, JSONField
from models.store.secrets import EncryptedText
from models.tenancy.tables import Tenant

# Numbers, templates and the customer windows (accounts.py, templates.py).

COEXISTENCE_MPS = 20
CUSTOMER_WINDOW = dt.timedelta(hours=24)


class MessagingAccount(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    tenant = ForeignKeyField(Tenant, backref="accounts", on_delete="CASCADE")
    label = CharField(max_length=120, null=True)
    external_reference = CharField(max_length=160, null=True)
    phone_number = CharField(max_length=32, null=True)
    name = CharField(max_length=255, null=True)
    status = CharField(max_length=16, default="active")
    paused_reason = CharField(max_length=255, null=True)
    connection_mode = CharField(max_length=16, default="coexistence")
    business_account_id = CharField(max_length=64, null=True, index=True)
    phone_id = CharField(max_length=64, null=True, index=True)
    access_token = EncryptedText(null=True)
    subscribed_to_webhooks = BooleanField(default=False)
    quality_rating = CharField(max_length=16, null=True)
    daily_limit = IntegerField(null=True)
    mps = IntegerField(default=COEXISTENCE_MPS)
    contacts_synced_at = DateTimeField(null=True)
    history_synced_at = DateTimeField(null=True)
    # Coexistence sync progress: contacts imported, chats imported, the platform's percentage.
    contacts_imported = IntegerField(default=0)
    history_threads = IntegerField(default=0)
    history_progress = IntegerField(null=True)
    templates_synced_at = DateTimeField(null=True)
    created_at = DateTimeField(default=utcnow)
    connected_at = DateTimeField(null=True)

    @property
    def ready(self) -> bool:
        """Onboarding finished: the number can send."""
        return self.connected_at is not None and bool(self.phone_id) and bool(self.access_token)

    def as_dict(self, messages_sent_today: int | None = None) -> dict:
        return {
            "id": self.public_id,
            "label": self.label,
            "external_reference": self.external_reference,
            "phone_number": self.phone_number,
            "name": self.name,
            "status": self.status,
            "connection_mode": self.connection_mode,
            "business_account_id": self.business_account_id,
            "phone_id": self.phone_id,
            "subscribed_to_webhooks": self.subscribed_to_webhooks,
            "quality_rating": self.quality_rating,
            "daily_limit": self.daily_limit,
            "messages_sent_today": messages_sent_today,
            "created_at": isoformat(self.created_at),
            "connected_at": isoformat(self.connected_at),
        }


class Template(BaseModel):
    account = ForeignKeyField(MessagingAccount, backref="templates", on_delete="CASCADE")
    platform_id = CharField(max_length=64, null=True)
    name = CharField(max_length=512)
    language = CharField(max_length=20)
    status = CharField(max_length=32)
    category = CharField(max_length=32, null=True)
    quality_score = CharField(max_length=32, null=True)
    body_text = TextField(null=True)
    header_type = CharField(max_length=16, null=True)
    variable_count = IntegerField(default=0)
    variables = JSONField(default=list)
    components = JSONField(default=list)
    active = BooleanField(default=True)
    updated_at = DateTimeField(default=utcnow)
    # The platform's review, kept as it said it (models/numbers/template_review.py): the reason of
    # a rejection, what it said about a pause or pacing, the category it moved the template from.
    rejected_reason = CharField(max_length=255, null=True)
    status_detail = CharField(max_length=512, null=True)
    previous_category = CharField(max_length=32, null=True)

    class Meta:
        indexes = ((("account", "name", "language"), True),)

    def as_dict(self) -> dict:
        return {
            "id": self.platform_id,
            "name": self.name,
            "display_name": self.name.replace("_", " ").capitalize(),
            "language": self.language,
            "status": self.status,
            "category": self.category,
            "quality_score": self.quality_score,
            "body_text": self.body_text,
            "header_type": self.header_type,
            "variable_count": self.variable_count,
            "variables": self.variables or [],
            "components": self.components or [],
            "updated_at": isoformat(self.updated_at),
        }

    def with_review(self) -> dict:
        """The template with what the platform's review said (templates authored here)."""
        return {**self.as_dict(), "rejected_reason": self.rejected_reason, "status_detail": self.status_detail,
                "previous_category": self.previous_category}


class ContactWindow(BaseModel):
    """When a customer last wrote to a number: single messages are allowed for 24 hours after."""

    account = ForeignKeyField(MessagingAccount, on_delete="CASCADE")
    wa_id = CharField(max_length=160)  # the phone number, or the business-scoped id of a user who hides it
    last_inbound_at = DateTimeField()
    # The message that opened it: marked read, with a typing indicator, when the business answers.
    last_inbound_wamid = CharField(max_length=255, null=True)

    class Meta:
        indexes = ((("account", "wa_id"), True),)


class BusinessInitiated(BaseModel):
    """A user the number started a conversation with: the messaging tier counts these per moving 24 h."""

    account = ForeignKeyField(MessagingAccount, on_delete="CASCADE")
    wa_id = CharField(max_length=160)
    last_sent_at = DateTimeField(index=True)

    class Meta:
        indexes = ((("account", "wa_id"), True),)


# WhatsApp users as the platform knows them, per number (platform_users.py).

class PlatformUser(BaseModel):
    account = ForeignKeyField(MessagingAccount, on_delete="CASCADE", index=False)
    user_id = CharField(max_length=160, null=True)
    wa_id = CharField(max_length=32, null=True)
    parent_user_id = CharField(max_length=160, null=True)
    username = CharField(max_length=160, null=True)
    profile_name = CharField(max_length=255, null=True)
    contact_name = CharField(max_length=255, null=True)  # from the business app's contacts
    marketing_opt_out = BooleanField(default=False)
    updated_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "platform_user"
        indexes = ((("account", "user_id"), True), (("account", "wa_id"), True))


# Onboarding attempts (onboarding.py).

MAX_PLATFORM_ID = 64
TERMINAL = ("completed", "failed", "cancelled", "expired")
# Error codes sent back as `redirect_url?success=false&error=<code>` (docs/connecting-a-number.md).
ATTEMPT_EXPIRED = "attempt_expired"
SIGNUP_CANCELLED = "signup_cancelled"
SIGNUP_FAILED = "signup_failed"
CODE_EXCHANGE_FAILED = "code_exchange_failed"
NUMBER_UNAVAILABLE = "number_unavailable"
NUMBER_CONNECTED_ELSEWHERE = "number_connected_elsewhere"
PLATFORM_UNAVAILABLE = "platform_unavailable"
ATTEMPT_IN_PROGRESS = "attempt_in_progress"


class OnboardingAttempt(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    tenant = ForeignKeyField(Tenant, backref="onboarding_attempts", on_delete="CASCADE")
    redirect_url = CharField(max_length=1000)
    label = CharField(max_length=120, null=True)
    external_reference = CharField(max_length=120, null=True)
    status = CharField(max_length=16, default="pending")
    error = CharField(max_length=64, null=True)
    error_detail = TextField(null=True)
    account = ForeignKeyField(MessagingAccount, null=True, on_delete="SET NULL")
    waba_id = CharField(max_length=MAX_PLATFORM_ID, null=True)
    phone_number_id = CharField(max_length=MAX_PLATFORM_ID, null=True)
    created_at = DateTimeField(default=utcnow)
    expires_at = DateTimeField()
    claimed_at = DateTimeField(null=True)
    finished_at = DateTimeField(null=True)

    @property
    def expired(self) -> bool:
        return self.status == "pending" and utcnow() >= self.expires_at

    def redirect(self) -> str:
        """Where the user goes once the attempt has ended (see `docs/connecting-a-number.md`)."""
        if self.status == "completed":
            params = {"success": "true", "account_id": self.account.public_id, "attempt_id": self.public_id}
        else:
            params = {"success": "false", "error": self.error or SIGNUP_FAILED, "attempt_id": self.public_id}
        return with_query(self.redirect_url, params)


def with_query(url: str, params: dict[str, str]) -> str:
    """`url` with `params` added to its query; its own parameters and fragment are kept."""
    parts = urlsplit(url)
    own = [(name, value) for name, value in parse_qsl(parts.query, keep_blank_values=True) if name not in params]
    return urlunsplit(parts._replace(query=urlencode(own + list(params.items()))))


# The platform's webhooks as received (models/inbox/).

# A claim older than this belongs to a worker that died while processing; another takes it over.
# Short on purpose: processing is idempotent, so a slow run overtaken by a second one only costs
# the repeated work, while a long timeout would hold a dead worker's statuses back that long.
CLAIM_TIMEOUT = dt.timedelta(seconds=15)
# Every run that takes a batch is an attempt; one that does not finish (it raised, or its worker
# died and its claim expired) uses it up. After this many, the batch is parked with its last error
# (`parked_at`): a batch that kills every worker taking it costs this many worker restarts, not an
# endless loop. `svcctl inbox retry` gives a parked batch its attempts again; `svcctl inbox drop`
# gives it up.
MAX_ATTEMPTS = 5


class PlatformWebhookBatch(BaseModel):
    """One signed POST from the platform, exactly as received."""

    body = TextField()
    received_at = DateTimeField(default=utcnow)
    claimed_at = DateTimeField(null=True)
    # Inbound, echo, template, quality and account updates are applied, with their events.
    applied_at = DateTimeField(null=True)
    # Everything is done, statuses included.
    processed_at = DateTimeField(null=True)
    attempts = IntegerField(default=0)
    last_error = TextField(null=True)
    # Left alone after `MAX_ATTEMPTS` unfinished runs, until an operator retries or drops it.
    parked_at = DateTimeField(null=True)
    # Dropped by an operator while parked: processed without its statuses applied.
    dropped_at = DateTimeField(null=True)
    # The callback data (`rcp_`/`msg_` ids) its statuses carry, one a line: the sends it may prove
    # accepted, readable without the body (models/sending/recovery.py).
    callbacks = TextField(null=True)

    class Meta:
        indexes = ((("processed_at", "id"), False),)

    @classmethod
    def waiting(cls):
        """Not processed and not parked: a worker's to take."""
        return cls.processed_at.is_null() & cls.parked_at.is_null()

    @classmethod
    def parked(cls):
        """Parked and not processed since (a retried batch is not parked; a dropped one is processed)."""
        return cls.processed_at.is_null() & cls.parked_at.is_null(False)


class ProcessedMessage(BaseModel):
    """An inbound message or echo whose event exists: the platform may deliver it again."""

    wamid = CharField(max_length=255, unique=True)
    kind = CharField(max_length=16)
    processed_at = DateTimeField(default=utcnow)
