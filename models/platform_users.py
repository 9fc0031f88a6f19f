"""WhatsApp users as the platform knows them, per number.

The platform names a user by a business-scoped user id (`user_id`, e.g. `MX.1502576394655843`),
by phone number (`wa_id`) only while the user shares it, or by both. The service keys a user
(24-hour window, daily-limit count, pair pacing, dedupe, events' `from`/`to`) by one string, the
*user key*: the phone number whenever it is known, else the business-scoped id. Every webhook
that names both links them here, so a user who later hides their phone behind a username keeps
the same key, and a debtor's phone still finds the user who replies.
"""

from __future__ import annotations

from peewee import BooleanField, CharField, DateTimeField, ForeignKeyField

from messaging.payloads import USER_ID
from messaging.webhooks import PlatformUser as WebhookUser
from models.accounts import MessagingAccount
from models.base import BaseModel
from models.clock import utcnow


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
    return row.wa_id or row.user_id


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
    if not is_user_id(value):
        return value
    row = _find(account_id, None, value)
    return row.wa_id if row is not None and row.wa_id else value


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
