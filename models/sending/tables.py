"""The sending core's tables: campaigns, their counters and recipients, and single
messages, with the statuses that describe them."""

from __future__ import annotations

from peewee import CharField, DateTimeField, ForeignKeyField, IntegerField

from models.clock import isoformat, utcnow
from models.numbers.tables import MessagingAccount
from models.store.base import BaseModel, JSONField
from models.store.prepared import Prepared
from models.tenancy.tables import Tenant

# Campaigns (campaigns.py and its campaign_*.py siblings).

CAMPAIGN_STATUSES = ("queued", "pending", "processing", "completed", "failed", "cancelled")
ACTIVE_STATUSES = ("queued", "pending", "processing")
# `skipped`: never sent, for a reason in its `error_code` (`marketing_opt_out`: the user asked the
# number for no marketing messages); no credit is reserved for it.
RECIPIENT_STATUSES = ("pending", "queued", "sent", "delivered", "read", "failed", "cancelled", "skipped")
# What a campaign reports; `cancelled` and `skipped` are extra, so the counters always add up to the total.
COUNTERS = ("pending", "queued", "sent", "delivered", "read", "failed", "cancelled", "skipped")


class Campaign(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE", index=False)
    account = ForeignKeyField(MessagingAccount, on_delete="CASCADE")
    # "api" for POST /campaigns; other areas (collection reminders) name themselves.
    source = CharField(max_length=16, default="api")
    external_reference = CharField(max_length=160, null=True)
    template_name = CharField(max_length=255)
    template_language = CharField(max_length=20)
    header_type = CharField(max_length=16, null=True)
    header_url = CharField(max_length=1000, null=True)
    body_placeholders = JSONField(null=True)
    status = CharField(max_length=16, default="queued")
    hold_reason = CharField(max_length=64, null=True)  # why a campaign is `pending`
    total_recipients = IntegerField()
    created_at = DateTimeField(default=utcnow)
    # When a scheduled campaign starts (null: at once); it stays `queued` until then.
    send_at = DateTimeField(null=True)
    started_at = DateTimeField(null=True)
    finished_at = DateTimeField(null=True)

    class Meta:
        indexes = (
            (("tenant", "source", "id"), False),
            (("status",), False),
        )


class CampaignCounters(BaseModel):
    """A campaign's counters: its credits, and its recipients per status. Every change is an
    addition (`n = n + k`) in the transaction that moves the credits or the recipients, so a
    campaign's counts are read from one row instead of counted over its recipients; the campaign
    row itself is locked only when the campaign changes state."""

    campaign = ForeignKeyField(Campaign, primary_key=True, on_delete="CASCADE")
    reserved = IntegerField(default=0)
    consumed = IntegerField(default=0)
    released = IntegerField(default=0)
    refunded = IntegerField(default=0)
    pending = IntegerField(default=0)
    queued = IntegerField(default=0)
    sent = IntegerField(default=0)
    delivered = IntegerField(default=0)
    read = IntegerField(default=0)
    failed = IntegerField(default=0)
    cancelled = IntegerField(default=0)
    skipped = IntegerField(default=0)

    class Meta:
        table_name = "campaign_counters"

    @property
    def leftover(self) -> int:
        """Reserved and neither consumed nor released: in flight, or waiting to be sent."""
        return self.reserved - self.consumed - self.released


class CampaignRecipient(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    # The (campaign, status, id) index serves claims, counters and the recipients list.
    campaign = ForeignKeyField(Campaign, on_delete="CASCADE", index=False)
    wa_id = CharField(max_length=160)  # a phone number or a business-scoped user id
    external_contact_id = CharField(max_length=160, null=True)
    vars = JSONField(null=True)
    payload = JSONField(null=True)
    buttons = JSONField(null=True)  # [{index, type: url, text} | {index, type: quick_reply, payload}]
    status = CharField(max_length=16, default="pending")
    attempts = IntegerField(default=0)  # times it was handed to the platform
    throttled = IntegerField(default=0)  # pair-rate throttles (131056): the X of the 4^X s wait
    retries = IntegerField(default=0)  # transient platform errors, bounded
    error_code = CharField(max_length=32, null=True)
    last_error = CharField(max_length=1000, null=True)
    not_before = DateTimeField(null=True)
    claim_token = CharField(max_length=64, null=True)
    claimed_at = DateTimeField(null=True)
    # Set just before the claim's platform call (cleared when the claim is given back): a dead
    # engine's claim without it never reached the platform and is sent again; with it, only the
    # platform's status webhook can tell.
    send_started_at = DateTimeField(null=True)
    message_id = CharField(max_length=40, null=True)
    wam_id = CharField(max_length=255, null=True, index=True)
    sent_at = DateTimeField(null=True)
    delivered_at = DateTimeField(null=True)
    read_at = DateTimeField(null=True)
    failed_at = DateTimeField(null=True)
    created_at = DateTimeField(default=utcnow)
    # 1, 2, ... within the campaign, in the order the request listed the recipients: a page of
    # the recipients list is an index seek on (campaign, position), whatever the page number.
    position = IntegerField(null=True)

    class Meta:
        indexes = (
            (("campaign", "status", "id"), False),
            (("campaign", "position"), True),
            (("status", "claimed_at"), False),
            # The portal's chart of a campaign's sends and the overview's sends of today (migration 0032).
            (("campaign", "sent_at"), False),
            (("campaign", "failed_at"), False),
        )

    def as_dict(self) -> dict:
        return {
            "id": self.public_id,
            "wa_id": self.wa_id,
            "external_contact_id": self.external_contact_id,
            "status": self.status,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "message_id": self.message_id,
            "sent_at": isoformat(self.sent_at),
            "created_at": isoformat(self.created_at),
            "wam_id": self.wam_id,
            "error_code": self.error_code,
            "delivered_at": isoformat(self.delivered_at),
            "read_at": isoformat(self.read_at),
            "payload": self.payload,
            "buttons": self.buttons,
        }


# Single messages (messages.py).

MESSAGE_TYPES = ("text", "image", "document", "audio", "video", "interactive")
PUBLIC_STATUS = {"queued": "queued", "sent": "sent", "delivered": "sent", "read": "sent", "failed": "failed"}


class Message(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    account = ForeignKeyField(MessagingAccount, on_delete="CASCADE")
    to = CharField(max_length=160)  # a phone number or a business-scoped user id
    type = CharField(max_length=16)
    content = JSONField()
    external_reference = CharField(max_length=160, null=True)
    status = CharField(max_length=16, default="queued")
    wam_id = CharField(max_length=255, null=True, index=True)
    claim_token = CharField(max_length=64, null=True)
    claimed_at = DateTimeField(null=True)
    send_started_at = DateTimeField(null=True)  # as a recipient's: the claim's platform call was about to start
    # Claims that reached the platform; waiting for the number's pace or a throttle gives one back.
    attempts = IntegerField(default=0)
    throttled = IntegerField(default=0)  # pair-rate throttles (131056): the X of the 4^X s wait
    not_before = DateTimeField(null=True)  # a retry waits until then
    error_code = CharField(max_length=32, null=True)
    last_error = CharField(max_length=1000, null=True)
    created_at = DateTimeField(default=utcnow)
    sent_at = DateTimeField(null=True)
    delivered_at = DateTimeField(null=True)
    read_at = DateTimeField(null=True)
    failed_at = DateTimeField(null=True)

    class Meta:
        indexes = ((("status", "claimed_at"), False),)

    def as_dict(self, account_public_id: str | None = None) -> dict:
        if account_public_id is None:
            account_public_id = _ACCOUNT_PUBLIC_ID.first(self.account_id)[0]
        return {
            "id": self.public_id,
            "wam_id": self.wam_id,
            "account_id": account_public_id,
            "to": self.to,
            "type": self.type,
            "status": PUBLIC_STATUS[self.status],
            "external_reference": self.external_reference,
            "credits_reserved": 1,
            "created_at": isoformat(self.created_at),
            "sent_at": isoformat(self.sent_at),
            "error": {"code": self.error_code, "message": self.last_error} if self.status == "failed" else None,
        }


_ACCOUNT_PUBLIC_ID = Prepared(lambda account_id: MessagingAccount.select(MessagingAccount.public_id)
                              .where(MessagingAccount.id == account_id).limit(1).tuples(), -7_000_000_001)
