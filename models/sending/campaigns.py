"""Campaigns: one approved template sent to up to 5000 recipients through one number.

A campaign is created in one transaction (credits reserved one per recipient, the campaign and
its recipients inserted in bulk, `campaign.created` written) and then sent by the sending core
(models/sending/). This module holds the creation and cancel rules, and what a client reads
(the tables are in tables.py). The invariants every writer keeps:

- A recipient's credit is reserved at creation and then either consumed (the platform accepted
  it) or released (it never reached the platform); a failure reported after acceptance refunds.
  `reserved = consumed + released` once nothing is in flight, and each counter moves in the same
  transaction as its ledger entry (`move_credits_many`). The counters live in a row of their own
  (`CampaignCounters`), added to rather than read and written back, so recording sends and status
  updates never locks the campaign row (the lock order is in docs/reliability.md).
- The recipients per status are counted in the same row: every statement that moves recipients
  from one status to another notes the move (`count_moved`) and adds it to the counters
  (`add_to_counters`, or `move_credits_many` with the credits) in its own transaction, so the
  counters always add up to `total_recipients` and a read never counts the recipients.
- Recipient statuses only move forward: pending -> queued -> sent -> delivered -> read, with
  failed and cancelled as ends. Every change is a conditional UPDATE on the status it expects.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import string
from collections.abc import Iterable
from typing import Annotated, Any, Literal

import orjson
import pydantic
from peewee import (
    fn,
)
from pydantic import AliasChoices, Field, StringConstraints, field_validator, model_validator

from messaging.payloads import USER_ID
from models.clock import isoformat, stored_isoformat, to_utc_naive, utcnow
from models.errors import Conflict, Invalid, NotFound
from models.events.outbox import announce
from models.events.tables import Event
from models.ids import new_id
from models.inputs import Input, text
from models.numbers import platform_users
from models.numbers.accounts import get_account
from models.numbers.tables import MessagingAccount, Template
from models.sending.tables import ACTIVE_STATUSES, COUNTERS, Campaign, CampaignCounters, CampaignRecipient
from models.store.db import after_commit, atomic, bound_datetime, db, execute, fetch_one, is_postgres, placeholders
from models.store.prepared import Prepared
from models.tenancy import credits

MAX_RECIPIENTS = 5000
INSERT_CHUNK = 500  # rows per INSERT: well under SQLite's bound-parameter limit

MARKETING_OPT_OUT = "marketing_opt_out"
MEDIA_HEADERS = ("image", "video", "document")


# Request schemas (also the OpenAPI document's CampaignInput).

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


# Public ids in bulk: `models.ids.new_id` draws one character at a time, which costs ~0.1 s for a
# 5000-recipient campaign; this draws all the randomness at once with the same alphabet and
# the same uniform distribution (bytes past 4 * 62 are dropped, not folded, so none is favoured).

_ALPHABET = (string.ascii_letters + string.digits).encode()
_BYTE_TO_CHAR = bytes(_ALPHABET[byte % 62] for byte in range(248)) + bytes(8)
_DROPPED = bytes(range(248, 256))
ID_LENGTH = 24


def public_ids(prefix: str, count: int) -> list[str]:
    needed = count * ID_LENGTH
    chars = b""
    while len(chars) < needed:
        chars += os.urandom(needed - len(chars) + 64).translate(_BYTE_TO_CHAR, _DROPPED)
    text_chars = chars[:needed].decode()
    return [prefix + text_chars[i:i + ID_LENGTH] for i in range(0, needed, ID_LENGTH)]


# Events.


# Hot statements written out. Peewee builds a node per value, which costs more than the database
# does once a statement carries a few hundred rows (a batch's CASE, a bulk INSERT); these build
# the SQL text once and pass the values as parameters. `?` stands for the engine's placeholder.


def run_sql(sql: str, params: list | tuple = ()):
    marker = db.obj.param
    return db.execute_sql(sql if marker == "?" else sql.replace("?", marker), params)


def case_by_id(column: str, pairs: list[tuple[int, Any]]) -> tuple[str, list]:
    """`column = CASE id WHEN .. THEN .. END` and its parameters."""
    params: list = []
    for row_id, value in pairs:
        params += [row_id, value]
    return f"{column} = CASE id{' WHEN ? THEN ?' * len(pairs)} END", params


def emit_rows(name: str, items: list[tuple[int, dict[str, Any]]], at: dt.datetime | None = None) -> int:
    """Write core events of one name, `(tenant id, fields)` each, in a few INSERTs: the outbox rows
    `models.events.outbox.emit` writes (`{"event": name, ...fields}`)."""
    return emit_named_rows([(name, tenant_id, fields) for tenant_id, fields in items], at)


def emit_named_rows(items: list[tuple[str, int, dict[str, Any]]], at: dt.datetime | None = None) -> int:
    """`emit_rows` for events of several names, `(name, tenant id, fields)` each, written (and so
    numbered) in the order given."""
    if not items:
        return 0
    now = bound_datetime(at or utcnow())
    table = Event._meta.table_name
    ids = public_ids("evt_", len(items))
    for start in range(0, len(items), INSERT_CHUNK):
        chunk = items[start:start + INSERT_CHUNK]
        params: list = []
        for public_id, (name, tenant_id, fields) in zip(ids[start:], chunk, strict=False):
            params += [public_id, tenant_id, name, orjson.dumps({"event": name, **fields}).decode(), now]
        execute(f'INSERT INTO "{table}" (public_id, tenant_id, name, payload, created_at) '
                f"VALUES {placeholders(len(chunk), 5)}", params)
    announce()
    return len(items)


def emit_many(tenant_id: int, name: str, items: list[dict[str, Any]], at: dt.datetime | None = None) -> int:
    """Write many core events of one tenant and name at once (see `emit_rows`)."""
    return emit_rows(name, [(tenant_id, fields) for fields in items], at)


def message_event(campaign_public_id: str, account_public_id: str, recipient: Any, status: str,
                  at: dt.datetime | None, error: dict | None = None) -> dict[str, Any]:
    """The fields of `message.*` events for a campaign recipient (contract section 6).

    `recipient` is anything with the recipient's `wa_id`, `external_contact_id`, `wam_id` and
    `public_id` (a row, or the dispatcher's job).
    """
    fields: dict[str, Any] = {
        "account_id": account_public_id,
        "campaign_id": campaign_public_id,
        "recipient": recipient.wa_id,
        "external_contact_id": recipient.external_contact_id,
        "wam_id": recipient.wam_id,
        "status": status,
        "timestamp": isoformat(at or utcnow()),
        "recipient_id": recipient.public_id,
    }
    if error is not None:
        fields["error"] = error
    return fields


def campaign_event(campaign: Campaign, account_public_id: str) -> dict[str, Any]:
    return {
        "account_id": account_public_id,
        "campaign_id": campaign.public_id,
        "external_reference": campaign.external_reference,
        "status": campaign.status,
        "total_recipients": campaign.total_recipients,
        "timestamp": isoformat(utcnow()),
    }


# Credits.


CREDIT_COLUMNS = {"reserve": CampaignCounters.reserved, "consume": CampaignCounters.consumed,
                  "release": CampaignCounters.released, "refund": CampaignCounters.refunded}
CREDIT_KINDS = tuple(CREDIT_COLUMNS)
# A campaign's counter columns by the kind of move that adds to them: the credit kinds above, and
# each recipient status, added to by the recipients moved into it and taken from by those moved out.
COUNTER_COLUMNS = {**CREDIT_COLUMNS, **{status: getattr(CampaignCounters, status) for status in COUNTERS}}


def count_moved(moves: dict[int, dict[str, int]], campaign_id: int, before: str, after: str, n: int = 1) -> None:
    """Note in `moves` (for `add_to_counters` or `move_credits_many`) that `n` of the campaign's
    recipients moved from status `before` to `after`."""
    if n and before != after:
        kinds = moves.setdefault(campaign_id, {})
        kinds[before] = kinds.get(before, 0) - n
        kinds[after] = kinds.get(after, 0) + n


def counters_of(campaign_ids: Iterable[int]) -> dict[int, CampaignCounters]:
    ids = list(campaign_ids)
    if not ids:
        return {}
    return {row.campaign_id: row for row in CampaignCounters.select().where(CampaignCounters.campaign.in_(ids))}


def campaign_credits(campaign: Campaign | int) -> CampaignCounters:
    campaign_id = campaign if isinstance(campaign, int) else campaign.id
    return CampaignCounters.get_by_id(campaign_id)


def move_credits(campaign: Campaign, *, consume: int = 0, release: int = 0, refund: int = 0,
                 description: str | None = None) -> None:
    """Ledger entries and the campaign's credit counters, together; call inside a transaction."""
    move_credits_many({campaign.id: {"consume": consume, "release": release, "refund": refund}}, description)


def move_credits_many(moves: dict[int, dict[str, int]], description: str | None = None) -> None:
    """Credit movements of many campaigns (`{campaign id: {"reserve"|"consume"|"release"|"refund":
    n}}`, with the recipients they moved per status, `count_moved`), in the lock order of
    docs/reliability.md: the counter rows (ascending campaign id), then the wallets (ascending
    tenant). Call after the transaction's recipient rows are written and its business sends
    recorded. Each tenant gets one ledger entry per kind (naming the
    campaign when there is one); a reservation the wallet cannot cover raises (and the caller's
    transaction rolls back).
    """
    add_to_counters(moves)
    credits.apply_moves(ledger_moves(moves, description))


def release_withdrawn(withdrawn: dict[int, int], before: str, after: str, description: str | None) -> None:
    """`withdrawn[campaign id]` recipients of each campaign moved from `before` to `after` without
    reaching the platform (cancelled, failed before or without a send): their credit released and
    the move counted, with `move_credits_many`."""
    moves = {campaign_id: {"release": n} for campaign_id, n in withdrawn.items()}
    for campaign_id, n in withdrawn.items():
        count_moved(moves, campaign_id, before, after, n)
    move_credits_many(moves, description)


def _nonzero(moves: dict[int, dict[str, int]]) -> dict[int, dict[str, int]]:
    moves = {campaign_id: {k: n for k, n in kinds.items() if n} for campaign_id, kinds in moves.items()}
    return {campaign_id: kinds for campaign_id, kinds in moves.items() if kinds}


def ledger_moves(moves: dict[int, dict[str, int]], description: str | None = None,
                 campaigns: dict[int, Any] | None = None) -> list[credits.Move]:
    """The wallet movements of campaigns' credit moves: one per tenant and kind. `campaigns`, when
    the caller has them: each campaign's `id`, `public_id`, `tenant_id` and `account_id` by id."""
    moves = _nonzero({campaign_id: {kind: n for kind, n in kinds.items() if kind in CREDIT_COLUMNS}
                      for campaign_id, kinds in moves.items()})
    if not moves:
        return []
    ids = sorted(moves)
    if campaigns is None:
        campaigns = {c.id: c for c in Campaign.select(Campaign.id, Campaign.public_id, Campaign.tenant,
                                                      Campaign.account).where(Campaign.id.in_(ids))}
    per_tenant: dict[int, dict[str, list[int]]] = {}
    for campaign_id in sorted(moves):
        for kind in moves[campaign_id]:
            per_tenant.setdefault(campaigns[campaign_id].tenant_id, {}).setdefault(kind, []).append(campaign_id)
    entries: list[credits.Move] = []
    for tenant_id in sorted(per_tenant):
        for kind in CREDIT_KINDS:
            ids = per_tenant[tenant_id].get(kind)
            if not ids:
                continue
            single = campaigns[ids[0]] if len(ids) == 1 else None
            options: dict[str, Any] = {
                "campaign_id": single.id if single else None,
                "messaging_account_id": single.account_id if single else None,
                "reference": single.public_id if single else ",".join(campaigns[c].public_id for c in ids)[:255]}
            if kind in ("release", "refund") and description:
                options["description"] = description[:1000]
            entries.append(credits.Move(tenant_id, kind, sum(moves[c][kind] for c in ids), options))
    return entries


def add_to_counters(moves: dict[int, dict[str, int]]) -> None:
    """Add to the campaigns' counters (`{campaign id: {kind of COUNTER_COLUMNS: n}}`): their rows
    locked in ascending campaign id, then one UPDATE for all of them (hand-written: it runs in
    every batch a campaign sends)."""
    moves = _nonzero(moves)
    if not moves:
        return
    ids = sorted(moves)
    table = CampaignCounters._meta.table_name
    if is_postgres():
        run_sql(f'SELECT campaign_id FROM "{table}" WHERE campaign_id IN ({placeholders(len(ids))}) '
                "ORDER BY campaign_id FOR UPDATE", ids).fetchall()
    changes, params = [], []
    for kind, column in COUNTER_COLUMNS.items():
        deltas = [(campaign_id, moves[campaign_id][kind]) for campaign_id in ids if moves[campaign_id].get(kind)]
        if deltas:
            name = f'"{column.column_name}"'
            changes.append(f"{name} = {name} + CASE campaign_id{' WHEN ? THEN ?' * len(deltas)} ELSE 0 END")
            params += [value for pair in deltas for value in pair]
    run_sql(f'UPDATE "{table}" SET {", ".join(changes)} WHERE campaign_id IN ({placeholders(len(ids))})',
            params + ids)


# Creation.


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


_NOT_DIGITS = re.compile(r"[^0-9]+")


def digits(value: str) -> str:
    """A phone number as the platform wants it: ASCII digits only."""
    return _NOT_DIGITS.sub("", value)


def sendable_account(tenant_id: int, public_id: str) -> MessagingAccount:
    """The tenant's number, ready and active: 404, then 422 `account_not_ready` / `account_inactive`."""
    account = get_account(tenant_id, public_id)
    if not account.ready:
        raise Invalid(f"the number {public_id} has not finished onboarding", code="account_not_ready")
    if account.status != "active":
        raise Invalid(f"the number {public_id} is paused", code="account_inactive",
                      details={"reason": account.paused_reason} if account.paused_reason else None)
    return account


def approved_template(account: MessagingAccount, name: str, language: str | None) -> Template:
    query = Template.select().where((Template.account == account.id) & (Template.name == name)
                                    & (Template.status == "approved") & Template.active)
    if language is not None:
        query = query.where(Template.language == language)
    found = list(query.order_by(Template.language))
    if len(found) > 1:
        raise Invalid(f"the template {name} is approved in several languages; say which with `language`",
                      details={"errors": {"language": [
                          "required: one of " + ", ".join(t.language for t in found)]}})
    if not found:
        where = f" in {language}" if language else ""
        unsendable = _unsendable_template(account, name, language)
        if unsendable is not None:
            raise unsendable
        raise Invalid(f"the template {name} is not approved{where} for this number", code="template_not_approved",
                      details={"template_name": name, "language": language})
    template = found[0]
    if (template.quality_score or "").upper() == LOW_QUALITY:
        raise _template_refusal(template, f"the template {name} ({template.language}) is rated RED by the "
                                          "platform for its quality; edit it or wait until its rating recovers")
    return template


# The platform's quality rating at which a template is refused here: the platform pauses a RED
# template that keeps being sent, which would fail the campaign halfway (and lower the number's
# own quality rating meanwhile).
LOW_QUALITY = "RED"


def _unsendable_template(account: MessagingAccount, name: str, language: str | None) -> Invalid | None:
    """Why a template known here but not approved cannot be sent: paused for quality, say."""
    query = Template.select().where((Template.account == account.id) & (Template.name == name) & Template.active)
    if language is not None:
        query = query.where(Template.language == language)
    template = query.order_by(Template.language).first()
    if template is None:
        return None
    if template.status == "paused":
        return _template_refusal(template, f"the template {name} ({template.language}) is paused by the platform "
                                           "for its quality; it can be sent again once the platform unpauses it")
    return _template_refusal(template, f"the template {name} ({template.language}) is {template.status}, "
                                       "not approved, on this number")


def _template_refusal(template: Template, message: str) -> Invalid:
    return Invalid(message, code="template_not_approved", details={
        "template_name": template.name, "language": template.language, "status": template.status,
        "quality_score": template.quality_score,
        "reason": template.rejected_reason or template.status_detail})


def scheduled_start(send_at: dt.datetime | None, now: dt.datetime) -> dt.datetime | None:
    """When a campaign asked to start at `send_at` starts (naive UTC), or a 422 naming `send_at`."""
    if send_at is None:
        return None
    at = to_utc_naive(send_at)
    if at < now - SEND_AT_TOLERANCE:
        problem = f"must not be in the past (it is now {isoformat(now)})"
    elif at > now + MAX_SCHEDULE_AHEAD:
        problem = f"must be at most {MAX_SCHEDULE_AHEAD.days} days ahead (until {isoformat(now + MAX_SCHEDULE_AHEAD)})"
    else:
        return at
    raise Invalid("The given data was invalid.", details={"errors": {"send_at": [problem]}})


def _header(template: Template, data: CampaignInput) -> tuple[str | None, str | None]:
    wanted = None if data.header_type in (None, "none") else data.header_type
    expected = template.header_type if template.header_type in MEDIA_HEADERS else None
    if expected is None:
        if wanted is not None or data.header_url is not None:
            raise Invalid("the template has no media header",
                          details={"errors": {"header_type" if wanted else "header_url": [
                              "the template has no media header"]}})
        return None, None
    if wanted is not None and wanted != expected:
        raise Invalid(f"the template's header is {expected}, not {wanted}",
                      details={"errors": {"header_type": [f"the template's header is {expected}"]}})
    if data.header_url is None:
        raise Invalid(f"the template has an {expected} header: header_url is required",
                      details={"errors": {"header_url": [f"required: the template has an {expected} header"]}})
    return expected, data.header_url


def template_buttons(template: Template) -> list[dict[str, Any]]:
    """The template's buttons in order (their index is their position), from its components as
    the platform lists them: `{"type": "URL", "text", "url"}`, `{"type": "QUICK_REPLY", "text"}`..."""
    for component in template.components or []:
        if isinstance(component, dict) and str(component.get("type", "")).upper() == "BUTTONS":
            return [button for button in component.get("buttons") or [] if isinstance(button, dict)]
    return []


def _dynamic_url(button: dict[str, Any]) -> bool:
    return str(button.get("type", "")).upper() == "URL" and str(button.get("url", "")).endswith(DYNAMIC_SUFFIX)


def button_mismatch(declared: list[dict[str, Any]], given: list[ButtonInput]) -> str | None:
    """Why these button parameters do not fit the template's buttons, or None when they do.

    Every URL button whose URL ends in `{{1}}` needs its suffix; a quick-reply button may take a
    payload; any other button (a fixed URL, a phone number) takes nothing. The platform refuses
    a send that breaks these (132000, 132018): it is refused here, before anything is reserved.
    """
    for button in given:
        if button.index >= len(declared):
            return f"the template has {len(declared)} buttons: there is none at index {button.index}"
        kind = str(declared[button.index].get("type", "")).upper()
        if button.type == "url" and not _dynamic_url(declared[button.index]):
            return f"the button at index {button.index} ({kind}) takes no URL suffix"
        if button.type == "quick_reply" and kind != "QUICK_REPLY":
            return f"the button at index {button.index} ({kind}) takes no quick-reply payload"
        if button.type == "url":
            url = str(declared[button.index]["url"])[:-len(DYNAMIC_SUFFIX)] + (button.text or "")
            if len(url) > MAX_BUTTON_URL:
                return f"the button at index {button.index}: its URL would be longer than {MAX_BUTTON_URL} characters"
    given_indexes = {button.index for button in given}
    missing = [index for index, button in enumerate(declared) if _dynamic_url(button) and index not in given_indexes]
    if missing:
        return f"the URL button at index {missing[0]} needs its suffix: {{index: {missing[0]}, type: url, text}}"
    return None


def _recipient_rows(data: CampaignInput, variable_count: int, account_id: int,
                    declared_buttons: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Normalize, deduplicate and resolve the variables and buttons of every recipient.

    A recipient's `vars` replace `body_placeholders`; a null in `vars` takes the default at the
    same position. Every recipient must end with exactly the template's variable count, and
    button parameters that fit the template's buttons (`button_mismatch`).
    """
    declared_buttons = declared_buttons or []
    defaults = data.body_placeholders or []
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    stored = 0
    bad_numbers: dict[str, list[str]] = {}
    # Keyed (and deduplicated) by the user: a business-scoped id known to belong to a phone number
    # is that number (looked up together, not one query per recipient).
    keys = platform_users.user_keys(account_id, [item.user_id for item in data.recipients if item.user_id])
    for index, item in enumerate(data.recipients):
        wa_id = keys[item.user_id] if item.user_id else digits(item.wa_id or "")
        if not wa_id:
            bad_numbers[f"recipients.{index}.wa_id"] = ["must contain digits"]
            continue
        if data.dedupe:
            if wa_id in seen:
                continue
            seen.add(wa_id)
        given = item.vars if item.vars is not None else defaults
        values = [value if value is not None else (defaults[i] if i < len(defaults) else None)
                  for i, value in enumerate(given)]
        if len(values) != variable_count or any(value is None for value in values):
            raise Invalid(
                f"recipient {index} has {sum(v is not None for v in values)} of the template's "
                f"{variable_count} variables",
                code="variable_count_mismatch",
                details={"recipient_index": index, "wa_id": wa_id, "expected": variable_count,
                         "given": sum(value is not None for value in values)})
        mismatch = button_mismatch(declared_buttons, item.buttons or [])
        if mismatch:
            raise Invalid("The given data was invalid.", details={
                "recipient_index": index, "errors": {f"recipients.{index}.buttons": [mismatch]}})
        buttons = [button.stored() for button in sorted(item.buttons, key=lambda b: b.index)] \
            if item.buttons else None
        # Counted as stored, defaults included: they are copied to every recipient that takes them.
        stored += sum(len(value.encode()) for value in values)
        if item.payload is not None:
            stored += len(orjson.dumps(item.payload))
        if buttons is not None:
            stored += len(orjson.dumps(buttons))
        if stored > MAX_CAMPAIGN_STORED_BYTES:
            raise Invalid("The given data was invalid.", details={"errors": {"recipients": [
                f"the recipients' variables and payloads (defaults included) may store at most "
                f"{MAX_CAMPAIGN_STORED_BYTES} bytes; recipient {index} goes past it"]}})
        rows.append({"wa_id": wa_id, "external_contact_id": item.external_contact_id, "vars": values,
                     "payload": item.payload, "buttons": buttons})
    if bad_numbers:
        raise Invalid("The given data was invalid.", details={"errors": bad_numbers})
    return rows


def create_campaign(tenant_id: int, spec: dict | CampaignInput, *, source: str = "api") -> Campaign:
    """Validate and create a queued campaign; the caller wakes the sending engine once its
    transaction has committed (`models.sending.work_arrived`; this may run inside the caller's
    transaction).

    Raises NotFound (`account_not_found`) or Invalid (`account_not_ready`, `account_inactive`,
    `template_not_approved`, `variable_count_mismatch`, `insufficient_credits`, `wallet_paused`,
    `validation_failed`).
    """
    data = validate_spec(spec)
    send_at = scheduled_start(data.send_at, utcnow())
    account = sendable_account(tenant_id, data.account_id)
    template = approved_template(account, data.template_name, data.language)
    header_type, header_url = _header(template, data)
    rows = _recipient_rows(data, template.variable_count or 0, account.id, template_buttons(template))
    if (template.category or "").upper() == "MARKETING":
        opted_out = platform_users.marketing_opted_out(account.id, [row["wa_id"] for row in rows])
        for row in rows:
            if row["wa_id"] in opted_out:
                row["skipped"] = MARKETING_OPT_OUT
    total = len(rows)
    to_send = sum(1 for row in rows if not row.get("skipped"))
    now = utcnow()
    with atomic():
        campaign = Campaign.create(
            public_id=new_id("cmp_"), tenant=tenant_id, account=account.id, source=source[:16],
            external_reference=data.external_reference, template_name=template.name,
            template_language=template.language, header_type=header_type, header_url=header_url,
            body_placeholders=data.body_placeholders, status="queued", total_recipients=total, created_at=now,
            send_at=send_at)
        CampaignCounters.create(campaign=campaign.id, reserved=to_send, pending=to_send, skipped=total - to_send)
        if to_send:
            credits.reserve(tenant_id, to_send, campaign_id=campaign.id, messaging_account_id=account.id,
                            reference=campaign.public_id)
        insert_recipients(campaign.id, rows, now)
        emit_many(tenant_id, "campaign.created", [campaign_event(campaign, account.public_id)])
        if not to_send:
            finish_after_commit([campaign.id])  # every recipient skipped: nothing to dispatch
    return campaign


SKIP_REASONS = {MARKETING_OPT_OUT: "the user asked this number for no marketing messages"}


def insert_recipients(campaign_id: int, rows: list[dict[str, Any]], now: dt.datetime) -> None:
    """The campaign's recipients, `pending`, in a few multi-row INSERTs (5000 in ~0.1 s)."""
    table = CampaignRecipient._meta.table_name
    columns = ("public_id", "campaign_id", "wa_id", "external_contact_id", "vars", "payload", "buttons", "status",
               "attempts", "throttled", "retries", "created_at", "error_code", "last_error", "position")
    ids = public_ids("rcp_", len(rows))
    for start in range(0, len(rows), INSERT_CHUNK):
        chunk = rows[start:start + INSERT_CHUNK]
        params: list = []
        for position, (public_id, row) in enumerate(zip(ids[start:], chunk, strict=False), start=start + 1):
            params += [public_id, campaign_id, row["wa_id"], row["external_contact_id"],
                       orjson.dumps(row["vars"]).decode(),
                       orjson.dumps(row["payload"]).decode() if row["payload"] is not None else None,
                       orjson.dumps(row["buttons"]).decode() if row.get("buttons") else None,
                       "skipped" if row.get("skipped") else "pending", 0, 0, 0, now,
                       row.get("skipped"), SKIP_REASONS.get(row.get("skipped")), position]
        run_sql(f'INSERT INTO "{table}" ({", ".join(columns)}) VALUES {placeholders(len(chunk), len(columns))}',
                params)


# Reads.


def get_campaign(tenant_id: int, public_id: str) -> Campaign:
    campaign = Campaign.get_or_none((Campaign.public_id == public_id) & (Campaign.tenant == tenant_id))
    if campaign is None:
        raise NotFound(f"no campaign {public_id}", code="campaign_not_found")
    return campaign


def find_campaign(public_id: str) -> Campaign:
    """Any tenant's campaign: for administrators (svcctl) only."""
    campaign = Campaign.get_or_none(Campaign.public_id == public_id)
    if campaign is None:
        raise NotFound(f"no campaign {public_id}", code="campaign_not_found")
    return campaign


def scheduled_until(until: dt.datetime) -> list[tuple[int, str, dt.datetime]]:
    """Scheduled campaigns still `queued` whose `send_at` comes by `until` (naive UTC), soonest
    first: (id, public id, send_at)."""
    return list(Campaign.select(Campaign.id, Campaign.public_id, Campaign.send_at)
                .where((Campaign.status == "queued") & Campaign.send_at.is_null(False) & (Campaign.send_at <= until))
                .order_by(Campaign.send_at).tuples())


def campaigns_of(tenant_id: int, status: str | None = None, source: str | None = "api"):
    """A tenant's campaigns, newest first (a query, for pagination)."""
    query = Campaign.select().where(Campaign.tenant == tenant_id)
    if source is not None:
        query = query.where(Campaign.source == source)
    if status is not None:
        query = query.where(Campaign.status == status)
    return query.order_by(Campaign.id.desc())


def recipients_page(campaign: Campaign, status: str | None, page: int, per_page: int) -> \
        tuple[list[CampaignRecipient], int]:
    """One page of the campaign's recipients in the order they were listed, and their number.

    Unfiltered, page N is the positions ((N-1)*per_page, N*per_page]: an index seek on
    (campaign, position), and the total is the campaign's own count, so neither the page number
    nor the campaign's size changes the cost. Filtered by status, the page's ids come from the
    (campaign, status, id) index alone and only those rows are read.
    """
    first = (page - 1) * per_page
    if status is None:
        total = campaign.total_recipients
        if first >= total:
            return [], total
        rows = (CampaignRecipient.select()
                .where((CampaignRecipient.campaign == campaign.id)
                       & CampaignRecipient.position.between(first + 1, first + per_page))
                .order_by(CampaignRecipient.position))
        return list(rows), total
    matching = CampaignRecipient.select(CampaignRecipient.id).where(
        (CampaignRecipient.campaign == campaign.id) & (CampaignRecipient.status == status))
    total = matching.count()
    if first >= total:
        return [], total
    ids = [row[0] for row in matching.order_by(CampaignRecipient.id).limit(per_page).offset(first).tuples()]
    return list(CampaignRecipient.select().where(CampaignRecipient.id.in_(ids)).order_by(CampaignRecipient.id)), total


# GET /campaigns/{id}/recipients: the campaign found by one statement built once, and its page
# by another, each row made the contract's dict straight from the driver's row.
_RECIPIENT_COLUMNS = (CampaignRecipient.public_id, CampaignRecipient.wa_id, CampaignRecipient.external_contact_id,
                      CampaignRecipient.status, CampaignRecipient.attempts, CampaignRecipient.last_error,
                      CampaignRecipient.message_id, CampaignRecipient.sent_at, CampaignRecipient.created_at,
                      CampaignRecipient.wam_id, CampaignRecipient.error_code, CampaignRecipient.delivered_at,
                      CampaignRecipient.read_at, CampaignRecipient.payload, CampaignRecipient.buttons)
# Example arguments of the statements built once: values no constant of theirs takes.
_TENANT, _STATUS, _LIMIT, _OFFSET = -7_000_000_001, "\0status", -7_000_000_002, -7_000_000_003
_PUBLIC_ID, _CAMPAIGN, _FIRST, _LAST = "\0public_id", -7_000_000_004, -7_000_000_005, -7_000_000_006
_CAMPAIGN_SIZE = Prepared(lambda public_id, tenant_id: Campaign.select(Campaign.id, Campaign.total_recipients)
                          .where((Campaign.public_id == public_id) & (Campaign.tenant == tenant_id)).limit(1)
                          .tuples(), _PUBLIC_ID, _TENANT)
_RECIPIENTS_AT = Prepared(lambda campaign_id, first, last: CampaignRecipient.select(*_RECIPIENT_COLUMNS)
                          .where((CampaignRecipient.campaign == campaign_id)
                                 & CampaignRecipient.position.between(first, last))
                          .order_by(CampaignRecipient.position).tuples(), _CAMPAIGN, _FIRST, _LAST)
_RECIPIENTS_COUNT_IN = Prepared(lambda campaign_id, status: CampaignRecipient.select(fn.COUNT(CampaignRecipient.id))
                                .where((CampaignRecipient.campaign == campaign_id)
                                       & (CampaignRecipient.status == status)).tuples(), _CAMPAIGN, _STATUS)
# The page's ids from the (campaign, status, id) index alone, and only their rows read.
_MATCHING = CampaignRecipient.alias("matching")
_RECIPIENTS_IN = Prepared(lambda campaign_id, status, limit, offset: CampaignRecipient.select(*_RECIPIENT_COLUMNS)
                          .where(CampaignRecipient.id.in_(
                              _MATCHING.select(_MATCHING.id)
                              .where((_MATCHING.campaign == campaign_id) & (_MATCHING.status == status))
                              .order_by(_MATCHING.id).limit(limit).offset(offset)))
                          .order_by(CampaignRecipient.id).tuples(), _CAMPAIGN, _STATUS, _LIMIT, _OFFSET)


def campaign_size(tenant_id: int, public_id: str) -> tuple[int, int]:
    """The tenant's campaign's id and number of recipients; 404 `campaign_not_found` as
    `get_campaign`."""
    row = _CAMPAIGN_SIZE.driver_row(public_id, tenant_id)
    if row is None:
        raise NotFound(f"no campaign {public_id}", code="campaign_not_found")
    return row


def recipients_at(campaign_id: int, first: int, last: int) -> list[dict]:
    """The campaign's recipients at positions `first` to `last` (as `recipients_page` reads an
    unfiltered page), each as `CampaignRecipient.as_dict`."""
    return [listed_recipient(row) for row in _RECIPIENTS_AT.driver_rows(campaign_id, first, last)]


def recipients_in(campaign_id: int, status: str) -> tuple[Prepared, Prepared, tuple]:
    """The two statements of a page of the campaign's recipients in `status`, in the order they
    were listed (as `recipients_page` reads a filtered page), and their arguments (the page's
    LIMIT and OFFSET follow them in the rows' statement); `listed_recipient` makes a row the
    contract's dict."""
    return _RECIPIENTS_COUNT_IN, _RECIPIENTS_IN, (campaign_id, status)


_JSON = CampaignRecipient.payload.python_value  # a driver's JSON text as the model reads it


def listed_recipient(row: tuple) -> dict:
    """`CampaignRecipient.as_dict` of a row of `_RECIPIENT_COLUMNS`."""
    (public_id, wa_id, external_contact_id, status, attempts, last_error, message_id, sent_at, created_at, wam_id,
     error_code, delivered_at, read_at, payload, buttons) = row
    return {
        "id": public_id,
        "wa_id": wa_id,
        "external_contact_id": external_contact_id,
        "status": status,
        "attempts": attempts,
        "last_error": last_error,
        "message_id": message_id,
        "sent_at": stored_isoformat(sent_at),
        "created_at": stored_isoformat(created_at),
        "wam_id": wam_id,
        "error_code": error_code,
        "delivered_at": stored_isoformat(delivered_at),
        "read_at": stored_isoformat(read_at),
        "payload": _JSON(payload),
        "buttons": _JSON(buttons),
    }


def campaign_dicts(campaigns: list[Campaign]) -> list[dict]:
    """The contract's Campaign for each, counters included, in two queries whatever the number."""
    counters = counters_of(c.id for c in campaigns)
    account_ids = {c.account_id for c in campaigns}
    accounts = dict(MessagingAccount.select(MessagingAccount.id, MessagingAccount.public_id)
                    .where(MessagingAccount.id.in_(list(account_ids))).tuples()) if account_ids else {}
    return [_as_dict(c, accounts.get(c.account_id), counters[c.id]) for c in campaigns]


def campaign_dict(campaign: Campaign) -> dict:
    return campaign_dicts([campaign])[0]


# GET /campaigns/{id}, the read a client polls while its campaign runs: its SQL written once
# (peewee builds a query's text anew on every call, which cost more than the statement) and its row
# read as a tuple: the campaign, its number's public id and its counters, in the columns of a row
# of the list (`listed_campaign`).
_CAMPAIGN_READ = (
    'SELECT c."public_id", c."external_reference", a."public_id", c."template_name", '
    'c."template_language", c."status", c."total_recipients", m."reserved", m."consumed", m."released", '
    'm."refunded", ' + "".join(f'm."{name}", ' for name in COUNTERS) +
    'c."hold_reason", c."source", c."created_at", c."send_at", c."started_at", c."finished_at" '
    'FROM "campaign" AS c JOIN "messaging_account" AS a ON a."id" = c."account_id" '
    'JOIN "campaign_counters" AS m ON m."campaign_id" = c."id" '
    'WHERE c."public_id" = ? AND c."tenant_id" = ?')
_FIRST_COUNTER = 11  # where the counters per status start in such a row
_AFTER_COUNTERS = _FIRST_COUNTER + len(COUNTERS)


def read_campaign(tenant_id: int, public_id: str) -> dict:
    """The contract's Campaign of the tenant's campaign `public_id` (what `campaign_dict` gives
    for it, in one statement); 404 `campaign_not_found` when the tenant has none by that id."""
    row = fetch_one(_CAMPAIGN_READ, (public_id, tenant_id))
    if row is None:
        raise NotFound(f"no campaign {public_id}", code="campaign_not_found")
    return listed_campaign(row)


def listed_campaign(row: tuple) -> dict:
    """The contract's Campaign from a statement's columns as the driver gives them (a row of
    `campaign_list`'s statement, or of `read_campaign`'s): from its public id to its refunded
    credits, then its counters per status, then from its hold reason to its finish time."""
    (public_id, external_reference, account_public_id, template_name, template_language, status, total, reserved,
     consumed, released, refunded) = row[:_FIRST_COUNTER]
    hold_reason, source, created_at, send_at, started_at, finished_at = row[_AFTER_COUNTERS:]
    return {
        "id": public_id,
        "external_reference": external_reference,
        "account_id": account_public_id,
        "template_name": template_name,
        "template_language": template_language,
        "status": status,
        "total_recipients": total,
        "reserved_credits": reserved,
        "consumed_credits": consumed,
        "released_credits": released,
        "refunded_credits": refunded,
        **dict(zip(COUNTERS, row[_FIRST_COUNTER:_AFTER_COUNTERS], strict=True)),
        "hold_reason": hold_reason if status == "pending" else None,
        "source": source,
        "created_at": stored_isoformat(created_at),
        "send_at": stored_isoformat(send_at),
        "started_at": stored_isoformat(started_at),
        "finished_at": stored_isoformat(finished_at),
    }


# GET /campaigns, a page of the list: its count and its rows are statements built once
# (models/store/prepared.py), each row the campaign joined with its number's public id and its
# counters; made into the contract's dict straight from the driver's row.


def _listed(tenant_id: int, status: str | None) -> Any:
    condition = (Campaign.tenant == tenant_id) & (Campaign.source == "api")
    return condition if status is None else condition & (Campaign.status == status)


def _listed_rows(tenant_id: int, status: str | None, limit: int, offset: int) -> Any:
    counters = [getattr(CampaignCounters, name) for name in COUNTERS]
    return (Campaign.select(Campaign.public_id, Campaign.external_reference, MessagingAccount.public_id,
                            Campaign.template_name, Campaign.template_language, Campaign.status,
                            Campaign.total_recipients, CampaignCounters.reserved, CampaignCounters.consumed,
                            CampaignCounters.released, CampaignCounters.refunded, *counters, Campaign.hold_reason,
                            Campaign.source, Campaign.created_at, Campaign.send_at, Campaign.started_at,
                            Campaign.finished_at)
            .join(MessagingAccount, on=MessagingAccount.id == Campaign.account)
            .switch(Campaign).join(CampaignCounters, on=CampaignCounters.campaign == Campaign.id)
            .where(_listed(tenant_id, status)).order_by(Campaign.id.desc()).limit(limit).offset(offset).tuples())


_LIST_COUNT = Prepared(lambda tenant_id: Campaign.select(fn.COUNT(Campaign.id)).where(_listed(tenant_id, None))
                       .tuples(), _TENANT)
_LIST_ROWS = Prepared(lambda tenant_id, limit, offset: _listed_rows(tenant_id, None, limit, offset),
                      _TENANT, _LIMIT, _OFFSET)
_LIST_COUNT_IN = Prepared(lambda tenant_id, status: Campaign.select(fn.COUNT(Campaign.id))
                          .where(_listed(tenant_id, status)).tuples(), _TENANT, _STATUS)
_LIST_ROWS_IN = Prepared(lambda tenant_id, status, limit, offset: _listed_rows(tenant_id, status, limit, offset),
                         _TENANT, _STATUS, _LIMIT, _OFFSET)


def campaign_list(tenant_id: int, status: str | None) -> tuple[Prepared, Prepared, tuple]:
    """GET /campaigns' two statements and their arguments (the page's LIMIT and OFFSET follow them
    in the rows' statement): the tenant's API campaigns, in `status` if given, newest first, as
    `campaigns_of` finds them. `listed_campaign` makes a row the contract's dict."""
    if status is None:
        return _LIST_COUNT, _LIST_ROWS, (tenant_id,)
    return _LIST_COUNT_IN, _LIST_ROWS_IN, (tenant_id, status)


def _as_dict(campaign: Campaign, account_public_id: str | None, counters: CampaignCounters) -> dict:
    return {
        "id": campaign.public_id,
        "external_reference": campaign.external_reference,
        "account_id": account_public_id,
        "template_name": campaign.template_name,
        "template_language": campaign.template_language,
        "status": campaign.status,
        "total_recipients": campaign.total_recipients,
        "reserved_credits": counters.reserved,
        "consumed_credits": counters.consumed,
        "released_credits": counters.released,
        "refunded_credits": counters.refunded,
        **{name: getattr(counters, name) for name in COUNTERS},
        "hold_reason": campaign.hold_reason if campaign.status == "pending" else None,
        "source": campaign.source,
        "created_at": isoformat(campaign.created_at),
        "send_at": isoformat(campaign.send_at),
        "started_at": isoformat(campaign.started_at),
        "finished_at": isoformat(campaign.finished_at),
    }


# Cancel.


def cancel_campaign(tenant_id: int, public_id: str) -> Campaign:
    """Cancel a campaign that is still `queued` (the dispatcher has not claimed anything).

    The dispatcher moves a campaign to `processing` in the same transaction as its first claim,
    and both changes are conditional UPDATEs of the campaign row: whichever commits first wins,
    so a cancelled campaign is never sent and a started one is never cancelled.
    """
    campaign = get_campaign(tenant_id, public_id)
    now = utcnow()
    with atomic():
        changed = (Campaign.update(status="cancelled", finished_at=now, hold_reason=None)
                   .where((Campaign.id == campaign.id) & (Campaign.status == "queued")).execute())
        if changed != 1:
            current = Campaign.get_by_id(campaign.id)
            raise Conflict(f"the campaign is {current.status}; only a queued campaign can be cancelled",
                           code="campaign_not_cancellable", details={"status": current.status})
        cancelled = (CampaignRecipient.update(status="cancelled")
                     .where((CampaignRecipient.campaign == campaign.id) & (CampaignRecipient.status == "pending"))
                     .execute())
        campaign = Campaign.get_by_id(campaign.id)
        leftover = campaign_credits(campaign).leftover
        if leftover != cancelled:
            # Something was claimed although the campaign was queued: a broken invariant, not a race.
            raise Conflict("the campaign has messages in flight", code="campaign_not_cancellable")
        release_withdrawn({campaign.id: cancelled}, "pending", "cancelled", "campaign cancelled")
    return Campaign.get_by_id(campaign.id)


# Finishing.


def unfinished(campaign_ids: Iterable[int]) -> set[int]:
    """Those of the campaigns that still have recipients waiting or in flight, by their counters."""
    ids = list(campaign_ids)
    if not ids:
        return set()
    # Hand-written: every sent batch asks this of its campaigns.
    return {campaign_id for (campaign_id,) in run_sql(
        f'SELECT campaign_id FROM "{CampaignCounters._meta.table_name}" '
        f'WHERE campaign_id IN ({placeholders(len(ids))}) AND "pending" + "queued" > 0', ids)}


def lock_still_active(campaign_ids: Iterable[int]) -> set[int]:
    """Those of the campaigns still active, their rows held against a change of state until
    commit (PostgreSQL's `FOR SHARE`, ascending id: the lock order's first place, so call it
    before locking any recipient row). A writer giving recipients back to `pending` asks this
    first: a campaign failed by another batch meanwhile then gets none back, and one failing
    after waits for the give-back and fails those recipients with the rest."""
    ids = sorted(set(campaign_ids))
    if not ids:
        return set()
    lock = " FOR SHARE" if is_postgres() else ""
    return {campaign_id for campaign_id, status in run_sql(
        f'SELECT id, status FROM "{Campaign._meta.table_name}" WHERE id IN ({placeholders(len(ids))}) '
        f"ORDER BY id{lock}", ids).fetchall() if status in ACTIVE_STATUSES}


def finish_if_done(campaign_ids: Iterable[int]) -> list[Campaign]:
    """Complete every active campaign with nothing left to send; returns those completed.

    1. Find those without pending or queued recipients.
    2. Move each to `completed` with a conditional UPDATE (only one caller wins), release any
       credit still reserved (none, when every recipient was accounted for), and write
       `campaign.completed`, all in one transaction.
    """
    ids = set(campaign_ids)
    done = ids - unfinished(ids)
    finished: list[Campaign] = []
    for campaign_id in sorted(done):
        with atomic():
            changed = (Campaign.update(status="completed", finished_at=utcnow(), hold_reason=None)
                       .where((Campaign.id == campaign_id) & Campaign.status.in_(ACTIVE_STATUSES)).execute())
            if changed != 1:
                continue
            campaign = Campaign.get_by_id(campaign_id)
            _close(campaign)
            finished.append(campaign)
    return finished


def finish_after_commit(campaign_ids: Iterable[int]) -> None:
    """`finish_if_done` once the current transaction commits, in a transaction of its own: it
    locks campaign rows, which come first in the lock order, so never after recipient rows."""
    ids = set(campaign_ids)
    if ids:
        after_commit(lambda: finish_if_done(ids))


def _close(campaign: Campaign) -> None:
    leftover = campaign_credits(campaign).leftover
    if leftover > 0:
        move_credits(campaign, release=leftover, description="campaign finished")
    account_public_id = MessagingAccount.get_by_id(campaign.account_id).public_id
    emit_many(campaign.tenant_id, "campaign.completed", [campaign_event(campaign, account_public_id)])


def fail_campaign(campaign_id: int, code: str, message: str) -> bool:
    """Stop a campaign that cannot go on (number disconnected, token revoked).

    Its waiting recipients fail with `code` and their credits are released; recipients in flight
    are settled by their batch. `campaign.completed` reports the `failed` status.
    """
    now = utcnow()
    with atomic():
        changed = (Campaign.update(status="failed", finished_at=now, hold_reason=None)
                   .where((Campaign.id == campaign_id) & Campaign.status.in_(ACTIVE_STATUSES)).execute())
        if changed != 1:
            return False
        campaign = Campaign.get_by_id(campaign_id)
        account_public_id = MessagingAccount.get_by_id(campaign.account_id).public_id
        failed = list(CampaignRecipient.update(status="failed", error_code=code, last_error=message[:1000],
                                               failed_at=now, claim_token=None)
                      .where((CampaignRecipient.campaign == campaign_id) & (CampaignRecipient.status == "pending"))
                      .returning(CampaignRecipient).execute())
        if failed:
            release_withdrawn({campaign_id: len(failed)}, "pending", "failed", message[:1000])
            error = {"code": code, "message": message}
            emit_many(campaign.tenant_id, "message.failed",
                      [message_event(campaign.public_id, account_public_id, r, "failed", now, error) for r in failed])
        emit_many(campaign.tenant_id, "campaign.completed", [campaign_event(campaign, account_public_id)])
    return True
