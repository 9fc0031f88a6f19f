"""Single messages: text, media and interactive messages inside the 24-hour customer window.

`create_message` validates and, in one transaction, reserves one credit and stores the message
as `queued`; the caller wakes the sending core once committed. The core (models/sending/, the message
store) sends it as it sends campaign recipients: paced by the number's bucket, claimed first
(a conditional UPDATE that sets a claim token, the 24-hour window checked again then), so two
engines can never send one message, and the outcome recorded with its credit movement and event
in one transaction:

- accepted: `sent`, wam_id filled, the credit consumed, `message.sent`;
- rejected: `failed`, the credit released, `message.failed`;
- throttled or a platform hiccup: back to the queue, due again after a wait;
- no answer (timeout after the request left): left claimed; a status webhook carrying its
  callback data settles it, else recovery fails it after a safe delay (never resent);
- its engine died: claimed but not yet started (the send-started mark, recorded just before the
  platform call), it is queued again with no attempt used; started, it is settled as above.

Internally a message's status also moves on to `delivered` and `read` (so statuses never move
backwards and each is reported once); the contract's Message shows those as `sent`.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from messaging.errors import PlatformError
from models.clock import isoformat, stored_isoformat, utcnow
from models.errors import Invalid, NotFound
from models.ids import new_id
from models.inputs import Input
from models.inputs import text as limited  # a field below is called `text`
from models.numbers import accounts, platform_users
from models.numbers.graph import graph_client
from models.numbers.tables import ContactWindow, MessagingAccount
from models.sending.sendable import digits, sendable_account
from models.sending.tables import MESSAGE_TYPES, PUBLIC_STATUS, Message
from models.store.db import atomic
from models.store.prepared import Prepared
from models.store.secrets import decrypt
from models.tenancy import credits

log = logging.getLogger(__name__)
MIN_DIGITS, MAX_DIGITS = 8, 15

Url = Annotated[str, StringConstraints(max_length=2000, pattern=r"^https?://[^\s/?#]+[^\s]*$")]


# Request schemas (also the OpenAPI document's MessageInput).


class TextInput(Input):
    body: limited(4096, min_length=1)


class _Media(Input):
    url: Url | None = None
    media_id: limited(255, min_length=1) | None = None

    @model_validator(mode="after")
    def _one_source(self):
        if (self.url is None) == (self.media_id is None):
            raise ValueError("exactly one of url and media_id is required")
        return self


class MediaInput(_Media):
    caption: limited(1024) | None = None


class AudioInput(_Media):
    """Audio takes no caption."""


class DocumentInput(MediaInput):
    filename: limited(255) | None = None


class InteractiveButton(Input):
    id: limited(256, min_length=1)
    title: limited(20, min_length=1)


class InteractiveRow(Input):
    id: limited(200, min_length=1)
    title: limited(24, min_length=1)
    description: limited(72) | None = None


class InteractiveSection(Input):
    title: limited(24) | None = None
    rows: Annotated[list[InteractiveRow], Field(min_length=1, max_length=10)]


class InteractiveInput(Input):
    kind: Literal["buttons", "list"]
    body: limited(1024, min_length=1)
    header: limited(60) | None = None
    footer: limited(60) | None = None
    buttons: Annotated[list[InteractiveButton], Field(min_length=1, max_length=3)] | None = None
    button: limited(20, min_length=1) | None = None
    sections: Annotated[list[InteractiveSection], Field(min_length=1, max_length=10)] | None = None

    @model_validator(mode="after")
    def _fits_kind(self):
        if self.kind == "buttons":
            if self.buttons is None:
                raise ValueError("buttons is required when kind is buttons")
            if self.button is not None or self.sections is not None:
                raise ValueError("button and sections belong to kind list")
        else:
            if self.button is None or self.sections is None:
                raise ValueError("button and sections are required when kind is list")
            if self.buttons is not None:
                raise ValueError("buttons belong to kind buttons")
        return self


class MessageInput(Input):
    account_id: limited(64)
    # A phone number (up to 32 characters), or a business-scoped user id (`CC.digits`, up to 160).
    to: limited(160)
    type: Literal["text", "image", "document", "audio", "video", "interactive"]
    external_reference: limited(160) | None = None
    text: TextInput | None = None
    image: MediaInput | None = None
    video: MediaInput | None = None
    audio: AudioInput | None = None
    document: DocumentInput | None = None
    interactive: InteractiveInput | None = None

    @field_validator("to")
    @classmethod
    def _phone_or_user_id(cls, value: str) -> str:
        if len(value) > 32 and not platform_users.is_user_id(value.strip()):
            raise ValueError("String should have at most 32 characters")
        return value

    @model_validator(mode="after")
    def _content_matches_type(self):
        if getattr(self, self.type) is None:
            raise ValueError(f"{self.type} is required when type is {self.type}")
        others = [kind for kind in MESSAGE_TYPES if kind != self.type and getattr(self, kind) is not None]
        if others:
            raise ValueError(f"{', '.join(others)} does not go with type {self.type}")
        return self

    def content(self) -> dict[str, Any]:
        return getattr(self, self.type).model_dump(exclude_none=True)


def event_fields(message: Message, account_public_id: str, status: str, at: dt.datetime | None,
                 error: dict | None = None) -> dict[str, Any]:
    """The fields of `message.*` events for a single message (contract section 6)."""
    fields: dict[str, Any] = {
        "account_id": account_public_id,
        "campaign_id": None,
        "recipient": message.to,
        "external_contact_id": None,
        "wam_id": message.wam_id,
        "status": status,
        "timestamp": isoformat(at or utcnow()),
        "message_id": message.public_id,
    }
    if error is not None:
        fields["error"] = error
    return fields


def normalize_recipient(raw: str) -> str:
    """A phone number as digits, or a business-scoped user id as given (a user who hides their phone)."""
    if platform_users.is_user_id(raw.strip()):
        return raw.strip()
    number = digits(raw)
    if not MIN_DIGITS <= len(number) <= MAX_DIGITS:
        raise Invalid(f"`to` must have {MIN_DIGITS} to {MAX_DIGITS} digits; {raw!r} has {len(number)}",
                      code="invalid_recipient", details={"to": raw})
    return number


def create_message(tenant_id: int, data: MessageInput) -> Message:
    """Validate the rules of a single message and store it queued with one credit reserved.

    Raises NotFound (`account_not_found`) or Invalid (`account_not_ready`, `account_inactive`,
    `invalid_recipient`, `outside_24h_window`, `daily_limit_reached`, `insufficient_credits`,
    `wallet_paused`). Nothing is reserved unless every rule passes.
    """
    account = sendable_account(tenant_id, data.account_id)
    # The window, daily count, pacing and the send go by the user's key: a business-scoped id known
    # to belong to a phone number is sent to that number.
    to = platform_users.user_key(account.id, normalize_recipient(data.to))
    if to not in platform_users.open_windows(account.id, [to], utcnow()):
        raise Invalid(f"{to} has not written to this number in the last 24 hours; use a template campaign",
                      code="outside_24h_window", details={"to": to})
    if account.daily_limit is not None and not accounts.recently_messaged(account.id, [to]):
        sent_today = accounts.messages_sent_today(account.id)
        if sent_today >= account.daily_limit:
            raise Invalid(f"the number reached its daily limit of {account.daily_limit} users",
                          code="daily_limit_reached",
                          details={"daily_limit": account.daily_limit, "messages_sent_today": sent_today})
    public_id = new_id("msg_")
    with atomic():
        credits.reserve(tenant_id, 1, messaging_account_id=account.id, reference=public_id)
        return Message.create(public_id=public_id, tenant=tenant_id, account=account.id, to=to, type=data.type,
                              content=data.content(), external_reference=data.external_reference)


_MESSAGE = Prepared(lambda public_id, tenant_id: Message.select()
                    .where((Message.public_id == public_id) & (Message.tenant == tenant_id)).limit(1),
                    "\0public_id", -7_000_000_001)


def get_message(tenant_id: int, public_id: str) -> Message:
    message = _MESSAGE.first(public_id, tenant_id)
    if message is None:
        raise NotFound(f"no message {public_id}", code="message_not_found")
    return message


# GET /messages/{id}: the columns its answer shows, with its number's public id, in one statement
# built once, read as the driver gives them (the content, which it does not show, is not read).
_MESSAGE_READ = Prepared(lambda public_id, tenant_id: Message.select(
    Message.public_id, Message.wam_id, MessagingAccount.public_id, Message.to, Message.type, Message.status,
    Message.external_reference, Message.created_at, Message.sent_at, Message.error_code, Message.last_error)
    .join(MessagingAccount, on=MessagingAccount.id == Message.account)
    .where((Message.public_id == public_id) & (Message.tenant == tenant_id)).limit(1).tuples(),
    "\0public_id", -7_000_000_001)


def read_message(tenant_id: int, public_id: str) -> dict:
    """`get_message(...).as_dict()` in one statement; the same 404."""
    row = _MESSAGE_READ.driver_row(public_id, tenant_id)
    if row is None:
        raise NotFound(f"no message {public_id}", code="message_not_found")
    (public_id, wam_id, account_public_id, to, kind, status, external_reference, created_at, sent_at, error_code,
     last_error) = row
    return {
        "id": public_id,
        "wam_id": wam_id,
        "account_id": account_public_id,
        "to": to,
        "type": kind,
        "status": PUBLIC_STATUS[status],
        "external_reference": external_reference,
        "credits_reserved": 1,
        "created_at": stored_isoformat(created_at),
        "sent_at": stored_isoformat(sent_at),
        "error": {"code": error_code, "message": last_error} if status == "failed" else None,
    }


def mark_conversation_read(message_id: int) -> bool:
    """Before a single message goes out, mark the customer's last message read and show the typing
    indicator (the platform drops it when the reply arrives, or after 25 s). Best effort: the
    reply is sent either way. True when marked."""
    row = _TO_MARK_READ.driver_row(message_id, "queued")
    if row is None:
        return False
    public_id, last_inbound_wamid, phone_id, access_token = row
    if not last_inbound_wamid or not access_token:
        return False
    try:
        graph_client().mark_read(phone_id, decrypt(access_token), last_inbound_wamid, typing=True)
    except PlatformError as error:
        log.info("message %s: could not mark the conversation read: %s", public_id, error)
        return False
    return True


# The queued message, its customer's last message to the number and the number's platform ids,
# in one statement built once: it runs before every single message.
_TO_MARK_READ = Prepared(lambda message_id, status: Message.select(
    Message.public_id, ContactWindow.last_inbound_wamid, MessagingAccount.phone_id, MessagingAccount.access_token)
    .join(MessagingAccount, on=MessagingAccount.id == Message.account)
    .join(ContactWindow, on=(ContactWindow.account == Message.account) & (ContactWindow.wa_id == Message.to))
    .where((Message.id == message_id) & (Message.status == status)).limit(1).tuples(),
    -7_000_000_101, "\0status")
