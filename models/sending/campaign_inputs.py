"""What a client sends to create a campaign (POST /campaigns, also the OpenAPI document's
CampaignInput), checked before anything is looked up: the recipients, their variables, payloads
and button parameters, and `send_at`, each within the bounds below.

A payload that does not fit is a 422 `validation_failed` naming every field at fault
(`validate_spec`); whether it fits the template and the number is decided by campaigns.py.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Literal

import orjson
import pydantic
from pydantic import AliasChoices, Field, StringConstraints, field_validator, model_validator

from messaging.payloads import USER_ID
from models.errors import Invalid
from models.inputs import Input, text

MAX_RECIPIENTS = 5000

# What the contract leaves open is bounded here, so that what a campaign stores stays in
# proportion to what it costs: a variable list longer than any template's, a free-form `payload`
# as big as the request, or defaults copied to every recipient would otherwise store megabytes
# for one credit (docs/api.md, "Limits").
MAX_VARIABLES = 100
MAX_PAYLOAD_BYTES = 4096  # a recipient's `payload`, as compact JSON
MAX_CAMPAIGN_STORED_BYTES = 4 * 1024 * 1024  # every recipient's variables and payload, as stored

Variable = Annotated[str, StringConstraints(max_length=1000)] | None
Variables = Annotated[list[Variable], Field(max_length=MAX_VARIABLES)]

# Template buttons (the platform's bounds): at most 10 buttons; a URL button's URL, with its
# suffix, at most 2000 characters. A quick-reply payload is bounded here like an interactive
# reply's id. A recipient's buttons are stored as given, at most 4 KiB as compact JSON.
MAX_BUTTONS = 10
MAX_BUTTON_URL = 2000
MAX_QUICK_REPLY_PAYLOAD = 256
DYNAMIC_SUFFIX = "{{1}}"
UrlSuffix = Annotated[str, StringConstraints(min_length=1, max_length=MAX_BUTTON_URL)]
QuickReplyPayload = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUICK_REPLY_PAYLOAD)]


class ButtonInput(Input):
    """One button's parameter: `{index, type: "url", text}` (the suffix of a URL button whose URL
    ends in `{{1}}`) or `{index, type: "quick_reply", payload}` (returned when it is pressed)."""

    index: Annotated[int, Field(ge=0, lt=MAX_BUTTONS)]
    type: Literal["url", "quick_reply"]
    text: UrlSuffix | None = None
    payload: QuickReplyPayload | None = None

    @model_validator(mode="after")
    def _one_parameter(self) -> ButtonInput:
        if self.type == "url" and (self.text is None or self.payload is not None):
            raise ValueError("a url button takes `text` (the URL's suffix) and no `payload`")
        if self.type == "quick_reply" and (self.payload is None or self.text is not None):
            raise ValueError("a quick_reply button takes `payload` and no `text`")
        return self

    def stored(self) -> dict[str, Any]:
        value = self.text if self.type == "url" else self.payload
        return {"index": self.index, "type": self.type, ("text" if self.type == "url" else "payload"): value}


class RecipientInput(Input):
    # A phone number, or `user_id`: the business-scoped id of a user who hides their phone.
    wa_id: text(32) | None = None
    user_id: text(160) | None = None
    external_contact_id: text(160) | None = None
    vars: Variables | None = None
    payload: dict[str, Any] | None = None
    buttons: Annotated[list[ButtonInput], Field(max_length=MAX_BUTTONS)] | None = Field(
        None, description="the template's button parameters for this recipient, by button index: a URL button's "
                          "{{1}} suffix or a quick-reply payload (docs/campaigns.md, Template buttons)")

    @field_validator("buttons")
    @classmethod
    def _distinct_buttons(cls, value: list[ButtonInput] | None) -> list[ButtonInput] | None:
        if value is not None:
            indexes = [button.index for button in value]
            if len(set(indexes)) != len(indexes):
                raise ValueError("each button index at most once")
            size = len(orjson.dumps([button.stored() for button in value]))
            if size > MAX_PAYLOAD_BYTES:
                raise ValueError(f"must be at most {MAX_PAYLOAD_BYTES} bytes as JSON, got {size}")
        return value

    @field_validator("payload")
    @classmethod
    def _bounded_payload(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                size = len(orjson.dumps(value))
            except orjson.JSONEncodeError:
                raise ValueError("integers must fit in 64 bits") from None
            if size > MAX_PAYLOAD_BYTES:
                raise ValueError(f"must be at most {MAX_PAYLOAD_BYTES} bytes as JSON, got {size}")
        return value

    @model_validator(mode="after")
    def _one_identity(self) -> RecipientInput:
        if (self.wa_id is None) == (self.user_id is None):
            raise ValueError("give exactly one of wa_id (a phone number) and user_id (a business-scoped user id)")
        if self.user_id is not None and not USER_ID.match(self.user_id):
            raise ValueError("user_id must be a business-scoped user id such as MX.1502576394655843")
        return self


# A scheduled campaign (`send_at`): an RFC 3339 date-time with its offset. A time up to
# SEND_AT_TOLERANCE in the past (a client's clock, the request's own trip) starts at once; one
# further back, or more than MAX_SCHEDULE_AHEAD ahead (credits stay reserved all that time), is a
# 422 naming `send_at`.
SEND_AT_TOLERANCE = dt.timedelta(seconds=60)
MAX_SCHEDULE_AHEAD = dt.timedelta(days=30)
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")
SEND_AT_FORMAT = "must be an RFC 3339 date-time with its offset, such as 2026-12-01T09:30:00-03:00"


def parse_send_at(value: object) -> dt.datetime:
    """An RFC 3339 date-time with its offset, as an aware datetime; ValueError otherwise."""
    if not isinstance(value, str) or not RFC3339.match(value):
        raise ValueError(SEND_AT_FORMAT)
    try:
        return dt.datetime.fromisoformat(value.upper())
    except ValueError:
        raise ValueError(f"{SEND_AT_FORMAT}; {value!r} is not a valid date and time") from None


class CampaignInput(Input):
    account_id: text(64)
    template_name: text(255)
    recipients: Annotated[list[RecipientInput], Field(min_length=1, max_length=MAX_RECIPIENTS)]
    external_reference: text(160) | None = None
    language: text(20) | None = Field(None, validation_alias=AliasChoices("language", "template_language"),
                                      description="alias: template_language")
    header_type: Literal["none", "image", "video", "document"] | None = None
    header_url: Annotated[str, StringConstraints(max_length=1000, pattern=r"^https?://[^\s/?#]+[^\s]*$")] | None \
        = None
    body_placeholders: Variables | None = None
    dedupe: bool = False
    send_at: dt.datetime | None = Field(
        None, description="when to start sending: an RFC 3339 date-time with its offset, at most "
                          "30 days ahead; the campaign stays `queued`, its credits reserved, until then "
                          "(docs/campaigns.md, Scheduled campaigns). Absent or null: at once.")

    @field_validator("send_at", mode="before")
    @classmethod
    def _rfc3339(cls, value: object) -> dt.datetime | None:
        return None if value is None else parse_send_at(value)


def _validation_errors(error: pydantic.ValidationError) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    for item in error.errors(include_url=False, include_context=False, include_input=False):
        path = ".".join(str(part) for part in item["loc"]) or "body"
        errors.setdefault(path, []).append(item["msg"])
    return errors


def validate_spec(spec: dict | CampaignInput) -> CampaignInput:
    if isinstance(spec, CampaignInput):
        return spec
    try:
        return CampaignInput.model_validate(spec)
    except pydantic.ValidationError as error:
        raise Invalid("The given data was invalid.", details={"errors": _validation_errors(error)}) from None
