"""Messaging numbers (accounts), their approved templates, and the 24-hour customer windows."""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

from peewee import fn

from messaging.payloads import USER_ID
from models.clock import stored_isoformat, utcnow
from models.errors import Invalid, NotFound
from models.numbers.tables import (
    COEXISTENCE_MPS,
    CUSTOMER_WINDOW,
    BusinessInitiated,
    ContactWindow,
    MessagingAccount,
    Template,
)
from models.store.db import bound_datetime, execute, lock_in_order, placeholders
from models.store.prepared import Prepared

DEFAULT_MPS = 80
MAX_MPS = 1000


def record_business_sends(account_id: int, wa_ids: list[str], at: dt.datetime | None = None) -> None:
    """Note that the platform accepted messages from this number to these users (call per batch)."""
    record_business_sends_many({(account_id, wa_id) for wa_id in wa_ids}, at or utcnow())


BUSINESS_CHUNK = 400  # rows per upsert: three parameters each, well under SQLite's limit


def record_business_sends_many(pairs: set[tuple[int, str]], at: dt.datetime) -> None:
    """`record_business_sends` for many (number, user) pairs: one upsert per chunk, in ascending
    (number, user) order, the lock order of docs/reliability.md. Hand-written SQL: this runs in
    every batch of sends and of status updates."""
    table = BusinessInitiated._meta.table_name
    rows = sorted(_with_linked_phones(pairs))
    for start in range(0, len(rows), BUSINESS_CHUNK):
        chunk = rows[start:start + BUSINESS_CHUNK]
        params: list = []
        for account_id, wa_id in chunk:
            params += [account_id, wa_id, at]
        values = ", ".join(["(?, ?, ?)"] * len(chunk))
        execute(f'INSERT INTO "{table}" (account_id, wa_id, last_sent_at) VALUES {values} '
                "ON CONFLICT (account_id, wa_id) DO UPDATE SET last_sent_at = excluded.last_sent_at", params)


def _with_linked_phones(pairs: set[tuple[int, str]]) -> set[tuple[int, str]]:
    """The pairs with each business-scoped id whose user's phone the platform has linked replaced
    by that phone: a message stored under the id before the link and sent after counts the user
    the link made one (`move_user`). Phone numbers, nearly every key, cost no query. The links are
    `platform_user` rows, read with hand-written SQL: this runs in every batch of sends."""
    ids: dict[int, list[str]] = {}
    for account_id, key in pairs:
        if USER_ID.match(key):
            ids.setdefault(account_id, []).append(key)
    if not ids:
        return pairs
    phones: dict[tuple[int, str], str] = {}
    for account_id, keys in ids.items():
        for start in range(0, len(keys), BUSINESS_CHUNK):
            chunk = keys[start:start + BUSINESS_CHUNK]
            cursor = execute('SELECT user_id, wa_id FROM "platform_user" WHERE account_id = ? AND wa_id IS NOT NULL '
                             f"AND user_id IN ({', '.join(['?'] * len(chunk))})", [account_id, *chunk])
            phones.update({(account_id, user_id): wa_id for user_id, wa_id in cursor.fetchall()})
    return {(account_id, phones.get((account_id, key), key)) for account_id, key in pairs}


def messages_sent_today(account_id: int, now: dt.datetime | None = None) -> int:
    """Unique users messaged in the moving 24 hours: what the daily limit (messaging tier) caps."""
    since = (now or utcnow()) - CUSTOMER_WINDOW
    return BusinessInitiated.select().where(
        (BusinessInitiated.account == account_id) & (BusinessInitiated.last_sent_at > since)).count()


def recently_messaged(account_id: int, wa_ids: list[str], now: dt.datetime | None = None) -> set[str]:
    """Which of these users already count against today's limit (sending to them again is free)."""
    since = (now or utcnow()) - CUSTOMER_WINDOW
    query = BusinessInitiated.select(BusinessInitiated.wa_id).where(
        (BusinessInitiated.account == account_id) & (BusinessInitiated.last_sent_at > since)
        & BusinessInitiated.wa_id.in_(wa_ids))
    return {row.wa_id for row in query}


_ACCOUNT = Prepared(lambda public_id, tenant_id: MessagingAccount.select()
                    .where((MessagingAccount.public_id == public_id) & (MessagingAccount.tenant == tenant_id)).limit(1),
                    "\0public_id", -7_000_000_001)


def get_account(tenant_id: int, public_id: str) -> MessagingAccount:
    """The tenant's account; a foreign or unknown id is the same 404 (the filter is in the query)."""
    account = _ACCOUNT.first(public_id, tenant_id)
    if account is None:
        raise NotFound(f"no account {public_id}", code="account_not_found")
    return account


# GET /accounts, /accounts/{id} and /accounts/{id}/templates: statements built once, each number
# read with its unique users messaged in the moving 24 hours (`messages_sent_today`) as a
# subquery, each row made the contract's dict (`MessagingAccount.as_dict`, `Template.as_dict`)
# straight from the driver's row.
_SENDS = BusinessInitiated.alias("sends")
_APPROVED = Template.alias("approved")
# Example arguments: values no constant of the statements takes.
_PUBLIC_ID, _TENANT, _SINCE = "\0public_id", -7_000_000_001, dt.datetime(1, 1, 1, 0, 0, 7)
_ACCOUNT_ID, _LIMIT, _OFFSET = -7_000_000_002, -7_000_000_003, -7_000_000_004


def _sent_since(since: dt.datetime):
    return _SENDS.select(fn.COUNT(_SENDS.id)).where((_SENDS.account == MessagingAccount.id)
                                                   & (_SENDS.last_sent_at > since))


def _account_columns(since: dt.datetime) -> tuple:
    return (MessagingAccount.public_id, MessagingAccount.label, MessagingAccount.external_reference,
            MessagingAccount.phone_number, MessagingAccount.name, MessagingAccount.status,
            MessagingAccount.connection_mode, MessagingAccount.business_account_id, MessagingAccount.phone_id,
            MessagingAccount.subscribed_to_webhooks, MessagingAccount.quality_rating, MessagingAccount.daily_limit,
            _sent_since(since), MessagingAccount.created_at, MessagingAccount.connected_at)


_ACCOUNT_READ = Prepared(lambda public_id, tenant_id, since: MessagingAccount.select(*_account_columns(since))
                         .where((MessagingAccount.public_id == public_id) & (MessagingAccount.tenant == tenant_id))
                         .limit(1).tuples(), _PUBLIC_ID, _TENANT, _SINCE)
_ACCOUNTS_COUNT = Prepared(lambda tenant_id: MessagingAccount.select(fn.COUNT(MessagingAccount.id))
                           .where(MessagingAccount.tenant == tenant_id).tuples(), _TENANT)
_ACCOUNTS_ROWS = Prepared(lambda tenant_id, since, limit, offset: MessagingAccount.select(*_account_columns(since))
                          .where(MessagingAccount.tenant == tenant_id).order_by(MessagingAccount.id)
                          .limit(limit).offset(offset).tuples(), _TENANT, _SINCE, _LIMIT, _OFFSET)


def sent_since_now(now: dt.datetime | None = None) -> dt.datetime | str:
    """Where the moving 24 hours of `messages_sent_today` start, as the driver binds it: the
    argument of the statements below that count them."""
    return bound_datetime((now or utcnow()) - CUSTOMER_WINDOW)


def read_account(tenant_id: int, public_id: str) -> dict:
    """`get_account(...).as_dict(messages_sent_today=...)` in one statement; the same 404."""
    row = _ACCOUNT_READ.driver_row(public_id, tenant_id, sent_since_now())
    if row is None:
        raise NotFound(f"no account {public_id}", code="account_not_found")
    return listed_account(row)


def account_list(tenant_id: int) -> tuple[Prepared, Prepared, tuple]:
    """GET /accounts' two statements and their arguments, the tenant's numbers in the order
    `accounts_of` gives: the count takes the tenant; the rows take it, `sent_since_now()`, then
    the page's LIMIT and OFFSET. `listed_account` makes a row the contract's dict."""
    return _ACCOUNTS_COUNT, _ACCOUNTS_ROWS, (tenant_id,)


_BOOLEAN = MessagingAccount.subscribed_to_webhooks.python_value  # SQLite's 0 and 1 as the model reads them


def listed_account(row: tuple) -> dict:
    """`MessagingAccount.as_dict(messages_sent_today=...)` of a row of `_account_columns`."""
    (public_id, label, external_reference, phone_number, name, status, connection_mode, business_account_id,
     phone_id, subscribed, quality_rating, daily_limit, sent_today, created_at, connected_at) = row
    return {
        "id": public_id,
        "label": label,
        "external_reference": external_reference,
        "phone_number": phone_number,
        "name": name,
        "status": status,
        "connection_mode": connection_mode,
        "business_account_id": business_account_id,
        "phone_id": phone_id,
        "subscribed_to_webhooks": _BOOLEAN(subscribed),
        "quality_rating": quality_rating,
        "daily_limit": daily_limit,
        "messages_sent_today": sent_today,
        "created_at": stored_isoformat(created_at),
        "connected_at": stored_isoformat(connected_at),
    }


_TEMPLATES_OF = Prepared(lambda public_id, tenant_id: MessagingAccount.select(
    MessagingAccount.id, _APPROVED.select(fn.COUNT(_APPROVED.id)).where(
        (_APPROVED.account == MessagingAccount.id) & (_APPROVED.status == "approved") & _APPROVED.active))
    .where((MessagingAccount.public_id == public_id) & (MessagingAccount.tenant == tenant_id)).limit(1).tuples(),
    _PUBLIC_ID, _TENANT)
_TEMPLATES_ROWS = Prepared(lambda account_id, limit, offset: Template.select(
    Template.platform_id, Template.name, Template.language, Template.status, Template.category, Template.quality_score,
    Template.body_text, Template.header_type, Template.variable_count, Template.variables, Template.components,
    Template.updated_at)
    .where((Template.account == account_id) & (Template.status == "approved") & Template.active)
    .order_by(Template.name, Template.language).limit(limit).offset(offset).tuples(), _ACCOUNT_ID, _LIMIT, _OFFSET)


def templates_of(tenant_id: int, public_id: str) -> tuple[int, Prepared, tuple]:
    """GET /accounts/{id}/templates: the number's approved templates (`approved_templates`)
    counted, the statement of their rows and its arguments (the page's LIMIT and OFFSET follow
    them); the same 404 as `get_account`. `listed_template` makes a row the contract's dict."""
    row = _TEMPLATES_OF.driver_row(public_id, tenant_id)
    if row is None:
        raise NotFound(f"no account {public_id}", code="account_not_found")
    account_id, total = row
    return total, _TEMPLATES_ROWS, (account_id,)


_JSON = Template.variables.python_value  # a driver's JSON text as the model reads it


def listed_template(row: tuple) -> dict:
    """`Template.as_dict` of a row of `_TEMPLATES_ROWS`."""
    (platform_id, name, language, status, category, quality_score, body_text, header_type, variable_count, variables,
     components, updated_at) = row
    return {
        "id": platform_id,
        "name": name,
        "display_name": name.replace("_", " ").capitalize(),
        "language": language,
        "status": status,
        "category": category,
        "quality_score": quality_score,
        "body_text": body_text,
        "header_type": header_type,
        "variable_count": variable_count,
        "variables": _JSON(variables) or [],
        "components": _JSON(components) or [],
        "updated_at": stored_isoformat(updated_at),
    }


def open_window(account_id: int, wa_id: str, at: dt.datetime, wamid: str | None = None) -> None:
    (ContactWindow.insert(account=account_id, wa_id=wa_id, last_inbound_at=at, last_inbound_wamid=wamid)
     .on_conflict(conflict_target=[ContactWindow.account, ContactWindow.wa_id],
                  update={ContactWindow.last_inbound_at: at, ContactWindow.last_inbound_wamid: wamid},
                  where=(ContactWindow.last_inbound_at < at))
     .execute())


def move_user(account_id: int, old_keys: set[str], new_key: str) -> None:
    """A user the number knew by other keys (a business-scoped id, before the platform linked the
    phone) is known by `new_key` from now on: their customer window and business-initiated send
    move to it, the later of each kept, so a send by either key sees one user.

    Call in the transaction that linked the user, after its `platform_user` rows (docs/reliability.md,
    the lock order): the business-initiated rows are locked in ascending (number, user) first."""
    keys = sorted(old_keys | {new_key})
    windows = list(ContactWindow.select().where(
        (ContactWindow.account == account_id) & ContactWindow.wa_id.in_(keys)).order_by(ContactWindow.wa_id))
    moved_windows = [window for window in windows if window.wa_id != new_key]
    if moved_windows:
        latest = max(windows, key=lambda window: window.last_inbound_at)
        ContactWindow.delete().where(ContactWindow.id.in_([window.id for window in moved_windows])).execute()
        open_window(account_id, new_key, latest.last_inbound_at, latest.last_inbound_wamid)
    sends = list(lock_in_order(BusinessInitiated.select().where(
        (BusinessInitiated.account == account_id) & BusinessInitiated.wa_id.in_(keys))
        .order_by(BusinessInitiated.wa_id)))
    moved_sends = [send for send in sends if send.wa_id != new_key]
    if moved_sends:
        latest_send = max(send.last_sent_at for send in sends)
        BusinessInitiated.delete().where(BusinessInitiated.id.in_([send.id for send in moved_sends])).execute()
        (BusinessInitiated.insert(account=account_id, wa_id=new_key, last_sent_at=latest_send)
         .on_conflict(conflict_target=[BusinessInitiated.account, BusinessInitiated.wa_id],
                      update={BusinessInitiated.last_sent_at: latest_send})
         .execute())


def window_open(account_id: int, wa_id: str, now: dt.datetime | None = None) -> bool:
    now = now or utcnow()
    window = ContactWindow.get_or_none((ContactWindow.account == account_id) & (ContactWindow.wa_id == wa_id))
    return window is not None and window.last_inbound_at > now - CUSTOMER_WINDOW


# Administration and platform-driven changes (numbers and templates area).

# The platform's messaging-limit tiers: unique users a number may start conversations with per
# moving 24 hours. TIER_UNLIMITED is the only tier without a cap (None).
TIER_LIMITS: dict[str, int | None] = {
    "TIER_50": 50,
    "TIER_250": 250,
    "TIER_1K": 1000,
    "TIER_2K": 2000,
    "TIER_10K": 10000,
    "TIER_100K": 100000,
    "TIER_UNLIMITED": None,
}
DEFAULT_DAILY_LIMIT = 250
ADMIN_PAUSE = "administrator"


def daily_limit_for_tier(tier: str | None, current: int | None = DEFAULT_DAILY_LIMIT) -> int | None:
    """The daily limit of a messaging tier; an unknown or missing tier keeps `current`.

    Keeping the current value matters: None means unlimited, so guessing None for a tier we do
    not recognise would lift the cap.
    """
    if tier is None:
        return current
    return TIER_LIMITS.get(tier.strip().upper(), current)


def find_account(public_id: str) -> MessagingAccount:
    """Any tenant's account by its public id: for administrators (svcctl) only."""
    account = MessagingAccount.get_or_none(MessagingAccount.public_id == public_id)
    if account is None:
        raise NotFound(f"no account {public_id}", code="account_not_found")
    return account


def accounts_of(tenant_id: int):
    return MessagingAccount.select().where(MessagingAccount.tenant == tenant_id).order_by(MessagingAccount.id)


def messages_sent_today_by_account(account_ids: list[int], now: dt.datetime | None = None) -> dict[int, int]:
    """`messages_sent_today` for many accounts in one query (accounts without sends are absent)."""
    if not account_ids:
        return {}
    since = (now or utcnow()) - CUSTOMER_WINDOW
    query = (BusinessInitiated.select(BusinessInitiated.account, fn.COUNT(BusinessInitiated.id).alias("sent"))
             .where(BusinessInitiated.account.in_(account_ids) & (BusinessInitiated.last_sent_at > since))
             .group_by(BusinessInitiated.account))
    return {row.account_id: row.sent for row in query}


def approved_templates(account_id: int):
    """What a company may send with: approved by the platform and still present there."""
    return (Template.select()
            .where((Template.account == account_id) & (Template.status == "approved") & Template.active)
            .order_by(Template.name, Template.language))


def pause_account(account_id: int, reason: str) -> bool:
    """Pause a number; True when it was active. The reason is kept for `resume_account`."""
    return (MessagingAccount.update(status="paused", paused_reason=reason[:255])
            .where((MessagingAccount.id == account_id) & (MessagingAccount.status == "active"))
            .execute()) == 1


def resume_account(account_id: int, paused_for: str | None = None) -> bool:
    """Resume a paused number; with `paused_for`, only when it was paused for that reason.

    The platform lifting a flag must not resume a number an administrator paused (and the other
    way round), hence the reason prefix check.
    """
    condition = (MessagingAccount.id == account_id) & (MessagingAccount.status == "paused")
    if paused_for is not None:
        condition &= MessagingAccount.paused_reason.startswith(paused_for)
    return (MessagingAccount.update(status="active", paused_reason=None).where(condition).execute()) == 1


def set_sending_limits(account: MessagingAccount, mps: int | None = None, daily_limit: int | None = None,
                       unlimited: bool = False) -> MessagingAccount:
    """An administrator's pacing (`mps`) and daily-limit override.

    Coexistence numbers are capped at 20 messages/s by the platform itself; pacing one faster
    would only buy throttling errors (130429), so a higher value is refused rather than stored.
    """
    if mps is not None:
        if not 1 <= mps <= MAX_MPS:
            raise Invalid(f"mps must be between 1 and {MAX_MPS}")
        if account.connection_mode == "coexistence" and mps > COEXISTENCE_MPS:
            raise Invalid(f"coexistence numbers are capped at {COEXISTENCE_MPS} messages/s by the platform; "
                          f"{mps} is not possible for {account.public_id}")
        account.mps = mps
    if daily_limit is not None and unlimited:
        raise Invalid("give either a daily limit or unlimited, not both")
    if daily_limit is not None:
        if daily_limit < 1:
            raise Invalid("the daily limit must be at least 1")
        account.daily_limit = daily_limit
    elif unlimited:
        account.daily_limit = None
    account.save()
    return account


class NumberState(NamedTuple):
    """What the sending core's plan reads of a number."""

    id: int
    tenant_id: int
    public_id: str
    mps: int | None
    status: str
    daily_limit: int | None
    ready: bool  # `MessagingAccount.ready`: onboarding finished, the number can send


def number_states(account_ids: list[int]) -> dict[int, NumberState]:
    """These numbers' states by id, in one hand-written statement: every engine plans again
    whenever work arrives, and peewee's model rows cost more than the statement there."""
    if not account_ids:
        return {}
    rows = execute('SELECT id, tenant_id, public_id, mps, status, daily_limit, connected_at IS NOT NULL '
                   "AND COALESCE(phone_id, '') <> '' AND COALESCE(access_token, '') <> '' "
                   f'FROM "messaging_account" WHERE id IN ({placeholders(len(account_ids))})', account_ids).fetchall()
    return {row[0]: NumberState(*row[:6], bool(row[6])) for row in rows}
