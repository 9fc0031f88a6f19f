"""WhatsApp users as the platform knows them, per number.

The platform names a user by a business-scoped user id (`user_id`, e.g. `MX.1502576394655843`),
by phone number (`wa_id`) only while the user shares it, or by both. The service keys a user
(24-hour window, daily-limit count, pair pacing, dedupe, events' `from`/`to`) by one string, the
*user key*: the phone number whenever it is known, else the business-scoped id. Every webhook
that names both links them here, so a user who later hides their phone behind a username keeps
the same key, and a debtor's phone still finds the user who replies. When the platform links a
phone to a user known until then by id alone, what was kept under the id (the customer window,
the business-initiated send) moves to the phone in the same transaction (`accounts.move_user`).
"""

from __future__ import annotations

import datetime as dt

from messaging.payloads import USER_ID
from messaging.users import PlatformUser as WebhookUser
from models.clock import utcnow
from models.numbers import accounts
from models.numbers.tables import CUSTOMER_WINDOW, ContactWindow, PlatformUser
from models.store.db import execute


def is_user_id(value: str) -> bool:
    return bool(USER_ID.match(value))


def _by(account_id: int, column, value: str | None) -> PlatformUser | None:
    if not value:
        return None
    return PlatformUser.get_or_none((PlatformUser.account == account_id) & (column == value))


def _find(account_id: int, wa_id: str | None, user_id: str | None) -> PlatformUser | None:
    return _by(account_id, PlatformUser.user_id, user_id) or _by(account_id, PlatformUser.wa_id, wa_id)


def remember(account_id: int, user: WebhookUser, contact_name: str | None = None) -> str | None:
    """Record what the platform said about a user (linking id and phone when both are given);
    returns the user's key. Call inside the transaction that acts on the webhook."""
    if not (user.user_id or user.wa_id):
        return None
    by_id = _by(account_id, PlatformUser.user_id, user.user_id)
    by_phone = _by(account_id, PlatformUser.wa_id, user.wa_id)
    if by_id is None and by_phone is None:
        # Webhooks are processed in parallel: another batch may be adding the same user now.
        PlatformUser.insert(account=account_id, user_id=user.user_id, wa_id=user.wa_id,
                            updated_at=utcnow()).on_conflict_ignore().execute()
        by_id = _by(account_id, PlatformUser.user_id, user.user_id)
        by_phone = _by(account_id, PlatformUser.wa_id, user.wa_id)
    row = by_id or by_phone
    keys_before = {known.wa_id or known.user_id for known in (by_id, by_phone) if known is not None}
    if by_id is not None and by_phone is not None and by_id.id != by_phone.id:
        # Known apart until now (one by id, one by phone): one user from here on.
        row.contact_name = row.contact_name or by_phone.contact_name
        row.marketing_opt_out = row.marketing_opt_out or by_phone.marketing_opt_out
        by_phone.delete_instance()
    changes = {"user_id": user.user_id, "wa_id": user.wa_id, "parent_user_id": user.parent_user_id,
               "username": user.username, "profile_name": user.profile_name}
    for name, value in changes.items():
        if value:
            setattr(row, name, value)
    if contact_name is not None:
        row.contact_name = contact_name[:255]
    row.updated_at = utcnow()
    row.save()
    key = row.wa_id or row.user_id
    if keys_before - {key}:
        accounts.move_user(account_id, keys_before - {key}, key)
    return key


def remember_many(users: list[tuple[int, WebhookUser]]) -> None:
    """`remember` for each (number, user), in the order given (the lock order: ascending number,
    phone, id), with a read of every user's row first so that most of them cost no statement.

    A status batch names each of its recipients by phone and id, nearly always as they were named
    before: what the read finds already said is left as it is, without a write (or a lock). Users
    never seen by either key are inserted together, in the order given, with all they are named
    by (what `remember` would leave). Those another batch inserted meanwhile (its `delivered`
    while this one holds the `read`: the INSERT waits for it, then skips them) are read again
    and, named as that batch named them, left alone too. The rest -- a new link, a change of phone
    or username, two rows to merge, a key named by two users of the list -- go through `remember`
    one at a time, in the order given.
    """
    named = [(account_id, user) for account_id, user in users if user.user_id or user.wa_id]
    if not named:
        return
    shared = _keys_named_twice(named)
    later = {pair for pair in named if _keys(*pair) & shared} if shared else set()
    new, told = _sorted_out([pair for pair in named if pair not in later] if later else named)
    later |= told
    missed = _insert_new(new)
    if missed:
        still_new, told = _sorted_out(list(missed))
        later |= set(still_new) | told
    for account_id, user in named:
        if (account_id, user) in later:
            remember(account_id, user)


def _sorted_out(named: list[tuple[int, WebhookUser]]) -> tuple[list[tuple[int, WebhookUser]],
                                                              set[tuple[int, WebhookUser]]]:
    """The users no row knows (in the order given), and those a row knows that `remember` would
    change; the rest are known as named."""
    rows = _rows_of(named) if named else {}
    new: list[tuple[int, WebhookUser]] = []
    told: set[tuple[int, WebhookUser]] = set()
    for account_id, user in named:
        found = {rows[key] for key in _keys(account_id, user) if key in rows}
        if not found:
            new.append((account_id, user))
        elif len(found) > 1 or _tells_more(next(iter(found)), user):
            told.add((account_id, user))
    return new, told


# A row as `remember_many` reads it: id, user_id, wa_id, parent_user_id, username, profile_name.
_Row = tuple[int, str | None, str | None, str | None, str | None, str | None]
_TOLD = ((1, "user_id"), (2, "wa_id"), (3, "parent_user_id"), (4, "username"), (5, "profile_name"))


def _keys(account_id: int, user: WebhookUser) -> set[tuple[int, str, str]]:
    keys = set()
    if user.user_id:
        keys.add((account_id, "user_id", user.user_id))
    if user.wa_id:
        keys.add((account_id, "wa_id", user.wa_id))
    return keys


def _keys_named_twice(named: list[tuple[int, WebhookUser]]) -> set[tuple[int, str, str]]:
    seen: set[tuple[int, str, str]] = set()
    twice: set[tuple[int, str, str]] = set()
    for account_id, user in named:
        for key in _keys(account_id, user):
            (twice if key in seen else seen).add(key)
    return twice


def _rows_of(named: list[tuple[int, WebhookUser]]) -> dict[tuple[int, str, str], _Row]:
    """The stored rows of these users by each key, read in one statement per chunk (a row of one
    number named by a key of another is read too, and not used)."""
    accounts_named = sorted({account_id for account_id, _user in named})
    ids = sorted({user.user_id for _account_id, user in named if user.user_id})
    phones = sorted({user.wa_id for _account_id, user in named if user.wa_id})
    rows: dict[tuple[int, str, str], _Row] = {}
    for start in range(0, max(len(ids), len(phones)), LOOKUP_CHUNK):
        id_chunk, phone_chunk = ids[start:start + LOOKUP_CHUNK], phones[start:start + LOOKUP_CHUNK]
        # Hand-written: it runs for every status batch. A branch per key, so that each is a seek
        # on its (account, key) index rather than a walk of the number's users.
        columns = 'SELECT id, account_id, user_id, wa_id, parent_user_id, username, profile_name FROM "platform_user"'
        numbers = f"account_id IN ({_marks(len(accounts_named))})"
        cursor = execute(
            f"{columns} WHERE {numbers} AND user_id IN ({_marks(len(id_chunk))}) UNION ALL "
            f"{columns} WHERE {numbers} AND wa_id IN ({_marks(len(phone_chunk))})",
            [*accounts_named, *id_chunk, *accounts_named, *phone_chunk])
        for row_id, account_id, user_id, wa_id, parent_user_id, username, profile_name in cursor.fetchall():
            row = (row_id, user_id, wa_id, parent_user_id, username, profile_name)
            if user_id:
                rows[(account_id, "user_id", user_id)] = row
            if wa_id:
                rows[(account_id, "wa_id", wa_id)] = row
    return rows


def _marks(count: int) -> str:
    # An empty IN list is not SQL: NULL matches nothing.
    return ", ".join(["?"] * count) if count else "NULL"


def _tells_more(row: _Row, user: WebhookUser) -> bool:
    """Whether `remember` would change the row: a field the user is named by that it lacks."""
    return any((value := getattr(user, name)) and row[index] != value for index, name in _TOLD)


def _insert_new(new: list[tuple[int, WebhookUser]]) -> set[tuple[int, WebhookUser]]:
    """Insert users no row knows, in the order given; returns those another batch inserted first
    (left for `remember`)."""
    if not new:
        return set()
    now = utcnow()
    inserted: set[tuple[int, str | None, str | None]] = set()
    for start in range(0, len(new), LOOKUP_CHUNK):
        chunk = new[start:start + LOOKUP_CHUNK]
        params: list = []
        for account_id, user in chunk:
            params += [account_id, user.user_id, user.wa_id, user.parent_user_id or None, user.username or None,
                       user.profile_name or None, False, now]
        cursor = execute(
            'INSERT INTO "platform_user" (account_id, user_id, wa_id, parent_user_id, username, profile_name, '
            f"marketing_opt_out, updated_at) VALUES {', '.join(['(?, ?, ?, ?, ?, ?, ?, ?)'] * len(chunk))} "
            "ON CONFLICT DO NOTHING RETURNING account_id, user_id, wa_id", params)
        inserted |= {tuple(row) for row in cursor.fetchall()}
    return {(account_id, user) for account_id, user in new
            if (account_id, user.user_id, user.wa_id) not in inserted}


def forget_contact(account_id: int, user: WebhookUser) -> None:
    row = _find(account_id, user.wa_id, user.user_id)
    if row is not None and row.contact_name is not None:
        PlatformUser.update(contact_name=None, updated_at=utcnow()).where(PlatformUser.id == row.id).execute()


def contacts_of(account_id: int) -> int:
    """Business-app contacts imported for the number."""
    return PlatformUser.select().where((PlatformUser.account == account_id)
                                       & PlatformUser.contact_name.is_null(False)).count()


def user_key(account_id: int, value: str) -> str:
    """The key of a recipient given as a phone number (digits) or a business-scoped id."""
    return user_keys(account_id, [value])[value]


LOOKUP_CHUNK = 500  # ids per query: well under SQLite's parameter limit


def user_keys(account_id: int, values: list[str]) -> dict[str, str]:
    """`user_key` for many recipients: the business-scoped ids are looked up in one query per
    chunk, phone numbers are their own keys."""
    keys = {value: value for value in values}
    ids = sorted({value for value in values if is_user_id(value)})
    for start in range(0, len(ids), LOOKUP_CHUNK):
        query = PlatformUser.select(PlatformUser.user_id, PlatformUser.wa_id).where(
            (PlatformUser.account == account_id) & PlatformUser.user_id.in_(ids[start:start + LOOKUP_CHUNK])
            & PlatformUser.wa_id.is_null(False))
        keys.update({user_id: wa_id for user_id, wa_id in query.tuples()})
    return keys


def open_windows(account_id: int, keys: list[str], now: dt.datetime) -> set[str]:
    """Which of these user keys may be sent a free-form message: the user wrote within 24 hours.

    A key taken before the platform linked the user's phone (a business-scoped id; a message
    stored then still names it) finds the window that moved to the phone. One statement, so a
    link committed meanwhile is seen whole or not at all."""
    if not keys:
        return set()
    since = now - CUSTOMER_WINDOW
    query = ContactWindow.select(ContactWindow.wa_id).where(
        (ContactWindow.account == account_id) & ContactWindow.wa_id.in_(keys)
        & (ContactWindow.last_inbound_at > since))
    ids = [key for key in keys if is_user_id(key)]
    if ids:
        query = query.union_all(
            PlatformUser.select(PlatformUser.user_id)
            .join(ContactWindow, on=((ContactWindow.account == PlatformUser.account)
                                     & (ContactWindow.wa_id == PlatformUser.wa_id)))
            .where((PlatformUser.account == account_id) & PlatformUser.user_id.in_(ids)
                   & (ContactWindow.last_inbound_at > since)))
    return {key for (key,) in query.tuples()}


def set_marketing_opt_out(account_id: int, user: WebhookUser, opted_out: bool) -> None:
    remember(account_id, user)
    row = _find(account_id, user.wa_id, user.user_id)
    if row is not None and row.marketing_opt_out != opted_out:
        PlatformUser.update(marketing_opt_out=opted_out, updated_at=utcnow()).where(
            PlatformUser.id == row.id).execute()


def marketing_opted_out(account_id: int, keys: list[str]) -> set[str]:
    """Which of these user keys (phone numbers or ids) asked for no marketing messages."""
    if not keys:
        return set()
    query = PlatformUser.select(PlatformUser.wa_id, PlatformUser.user_id).where(
        (PlatformUser.account == account_id) & PlatformUser.marketing_opt_out
        & (PlatformUser.wa_id.in_(keys) | PlatformUser.user_id.in_(keys)))
    wanted = set(keys)
    return {value for row in query for value in (row.wa_id, row.user_id) if value in wanted}
