"""What each update in a platform webhook batch does, other than a message status.

- an inbound message opens the user's 24-hour window and is reported (`message.inbound.created`)
  with the campaign message it answers and the open debts of its sender's phone; a debtor's
  quick reply to a reminder, or free text, is applied to their debts (models/receivables/replies.py);
- a business-app echo is reported (`message.echo.created`);
- every user a batch names is remembered first, in one order (`remember_users_in_order`);
- history and business-app contacts, marketing preferences, template status, quality and
  category, and account updates change the numbers' state (a template's, with its event).

Statuses are applied by models/sending/statuses.py; the batch they come in, by models/inbox/batches.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from peewee import Case
from prometheus_client import Counter

from messaging.webhooks import (
    AccountUpdate,
    EchoMessage,
    HistoryThread,
    InboundMessage,
    PhoneQualityUpdate,
    PlatformUser,
    StatusUpdate,
    SyncedContact,
    TemplateCategoryUpdate,
    TemplateQualityUpdate,
    TemplateStatusUpdate,
    UserPreference,
)
from models.clock import isoformat, to_utc_naive
from models.events.outbox import emit
from models.numbers import accounts, platform_users
from models.numbers.tables import MessagingAccount, ProcessedMessage
from models.numbers.template_review import apply_template_category, apply_template_quality, apply_template_status
from models.receivables import replies
from models.receivables.debts import open_debts_of_phone
from models.sending.tables import Campaign, CampaignRecipient
from models.store.db import execute, lock_rows, placeholders

log = logging.getLogger(__name__)
REDELIVERIES = Counter("svc_platform_redeliveries_total",
                       "Inbound messages and echoes the platform delivered again, recognised and skipped", ["kind"])


# What a user sends that opens the 24-hour customer service window; reactions, edits (of any
# kind), revokes, system and unsupported messages do not.
WINDOW_OPENING_TYPES = frozenset({"text", "image", "video", "audio", "document", "sticker", "location",
                                  "contacts", "interactive", "button", "order"})

QUALITY_FLAGGED = "quality_flagged"
ACCOUNT_RESTRICTED = "account_restricted"
ACCOUNT_DISABLED = "account_disabled"


@dataclass
class BatchOutcome:
    """What a processed batch asks of the worker once committed."""

    claimed: bool = False
    events: int = 0
    statuses_applied: bool = False
    # Status updates handed on: their events (message.delivered, ...) are written by statuses.py.
    statuses: int = 0
    resync_templates: set[int] = field(default_factory=set)
    refresh_numbers: set[int] = field(default_factory=set)
    # Single messages queued in the batch's transaction (answers to debtors' quick replies): the
    # sending core takes them once it has committed.
    answers: list[int] = field(default_factory=list)


def apply_update(update: Any, outcome: BatchOutcome) -> None:
    if isinstance(update, InboundMessage):
        _apply_inbound(update, outcome)
    elif isinstance(update, EchoMessage):
        _apply_echo(update, outcome)
    elif isinstance(update, TemplateStatusUpdate):
        outcome.resync_templates |= apply_template_status(update)
    elif isinstance(update, TemplateQualityUpdate):
        outcome.resync_templates |= apply_template_quality(update)
    elif isinstance(update, TemplateCategoryUpdate):
        outcome.resync_templates |= apply_template_category(update)
    elif isinstance(update, PhoneQualityUpdate):
        _apply_quality(update, outcome)
    elif isinstance(update, AccountUpdate):
        _apply_account_update(update)
    elif isinstance(update, HistoryThread):
        _apply_history(update)
    elif isinstance(update, SyncedContact):
        _apply_synced_contact(update)
    elif isinstance(update, UserPreference):
        _apply_user_preference(update)


def _account_for_number(phone_number_id: str) -> MessagingAccount | None:
    account = MessagingAccount.get_or_none(MessagingAccount.phone_id == phone_number_id)
    if account is None:
        log.info("platform webhook for unknown phone number %s ignored", phone_number_id)
    return account


def _accounts_for_numbers(phone_number_ids: set[str]) -> dict[str, int]:
    """The account id of each of these platform numbers we know (one statement: every status
    batch asks)."""
    numbers = sorted(phone_number_ids)
    found = dict(execute(f'SELECT phone_id, id FROM "messaging_account" WHERE phone_id IN '
                         f'({placeholders(len(numbers))})', numbers).fetchall()) if numbers else {}
    for phone_number_id in numbers:
        if phone_number_id not in found:
            log.info("platform webhook for unknown phone number %s ignored", phone_number_id)
    return found


def _first_time(wamid: str, kind: str) -> bool:
    """Record the wamid; False when it was recorded before (a redelivery)."""
    inserted = (ProcessedMessage.insert(wamid=wamid[:255], kind=kind)
                .on_conflict_ignore().as_rowcount().execute())
    if inserted != 1:
        REDELIVERIES.labels(kind).inc()
    return inserted == 1


def _apply_inbound(message: InboundMessage, outcome: BatchOutcome) -> None:
    account = _account_for_number(message.phone_number_id)
    if account is None or not _first_time(message.wamid, "inbound"):
        return
    at = to_utc_naive(message.timestamp)
    sender = message.sender
    key = platform_users.remember(account.id, sender)
    if message.type in WINDOW_OPENING_TYPES and message.edited_wamid is None:
        accounts.open_window(account.id, key, at, message.wamid)
    data = {
        "account_id": account.public_id,
        # The contract's `from`: the phone number, or the business-scoped id of a user who hides it.
        "from": key,
        "type": message.type,
        "body": message.body,
        "wam_id": message.wamid,
        "timestamp": isoformat(at),
    }
    data.update(_identity(sender))
    if message.payload is not None:
        data["payload"] = message.payload
    if message.edited_wamid is not None:
        data["edited_wam_id"] = message.edited_wamid
    if message.media is not None:
        # The media id is fetched through the Graph API with the number's token; nothing is downloaded here.
        data["media"] = {name: value for name, value in (("id", message.media.id),
                                                         ("mime_type", message.media.mime_type),
                                                         ("filename", message.media.filename)) if value}
    if message.context_wamid is not None:
        # A press of a campaign message's quick-reply button (or a reply quoting it) names the
        # campaign and recipient it answers, so the payload is matched back without guessing.
        data["context_wam_id"] = message.context_wamid
        data.update(_campaign_message(account, message.context_wamid))
    # The receivables replica: a debtor is known by phone, and a user who hides theirs is still
    # that phone's user once the platform linked the two.
    if key and key.isdigit() and (debts := open_debts_of_phone(account.tenant_id, key)):
        data["debt_external_ids"] = debts
        # A reminder's quick reply is recorded and answered; free text is attached to the debts.
        answer = None if message.edited_wamid is not None else replies.apply_reply(
            account, key, message.wamid, message.type, message.body, message.payload, at)
        if answer is not None:
            outcome.answers.append(answer)
    emit(account.tenant_id, "message.inbound.created", data)
    outcome.events += 1


def _apply_echo(message: EchoMessage, outcome: BatchOutcome) -> None:
    account = _account_for_number(message.phone_number_id)
    if account is None or not _first_time(message.wamid, "echo"):
        return
    emit(account.tenant_id, "message.echo.created", {
        "account_id": account.public_id,
        "direction": "outgoing_from_business_app",
        "to": platform_users.remember(account.id, message.recipient),
        "type": message.type,
        "body": message.body,
        "wam_id": message.wamid,
        "timestamp": isoformat(to_utc_naive(message.timestamp)),
        **_identity(message.recipient),
    })
    outcome.events += 1


def _campaign_message(account: MessagingAccount, wamid: str) -> dict[str, str | None]:
    """The campaign and recipient of one of this number's campaign messages, by its wamid."""
    found = (CampaignRecipient
             .select(CampaignRecipient.public_id, CampaignRecipient.external_contact_id, Campaign.public_id)
             .join(Campaign, on=(CampaignRecipient.campaign == Campaign.id))
             .where((CampaignRecipient.wam_id == wamid[:255]) & (Campaign.account == account.id))
             .tuples().first())
    if found is None:
        return {}
    recipient_id, external_contact_id, campaign_id = found
    return {"campaign_id": campaign_id, "recipient_id": recipient_id, "external_contact_id": external_contact_id}


def _identity(user: PlatformUser) -> dict[str, str]:
    """The user's platform identity beside the contract fields, where the platform gave it."""
    fields = {"user_id": user.user_id, "username": user.username}
    return {name: value for name, value in fields.items() if value}


def remember_users_in_order(updates: list[Any]) -> None:
    """Record every user the batch names before acting on any of them.

    Concurrent batches name the same users in any order: they are taken in one order (number,
    phone, id; the lock order of docs/reliability.md), so two batches inserting or updating the
    same `platform_user` rows wait for each other instead of deadlocking. What acts on a user
    afterwards finds its row already held by this transaction. A status links its recipient only
    when it names both phone and id; a contact the business app removed is left to its update.
    A batch of statuses alone (nearly every batch) has nothing act on its users afterwards: its
    users are recorded by `platform_users.remember_many`, which writes only what is new."""
    users: dict[tuple[str, str, str], PlatformUser] = {}
    for update in updates:
        if isinstance(update, StatusUpdate):
            user = update.recipient if update.recipient.wa_id and update.recipient.user_id else None
        elif isinstance(update, InboundMessage):
            user = update.sender
        elif isinstance(update, EchoMessage):
            user = update.recipient
        elif isinstance(update, (HistoryThread, UserPreference)):
            user = update.user
        elif isinstance(update, SyncedContact) and update.action != "remove":
            user = PlatformUser(user_id=update.user_id, wa_id=update.wa_id)
        else:
            user = None
        if user is not None and (user.wa_id or user.user_id):
            users.setdefault((update.phone_number_id, user.wa_id or "", user.user_id or ""), user)
    if not users:
        return
    account_ids = _accounts_for_numbers({phone_number_id for phone_number_id, _wa_id, _user_id in users})
    named = [(account_ids[phone_number_id], user) for (phone_number_id, _wa_id, _user_id), user
             in sorted(users.items(), key=lambda item: item[0]) if phone_number_id in account_ids]
    if all(isinstance(update, StatusUpdate) for update in updates):
        # Nothing acts on a status's recipient in this transaction: a user named as the row
        # already says is left unlocked, and the rest are written together where they can be.
        platform_users.remember_many(named)
        return
    for account_id, user in named:
        platform_users.remember(account_id, user)


def _apply_history(thread: HistoryThread) -> None:
    """A chat the business app had before onboarding: only the user's last message counts, so a
    customer who wrote within 24 hours can be answered at once. Nothing is emitted or sent."""
    account = _account_for_number(thread.phone_number_id)
    if account is None:
        return
    key = platform_users.remember(account.id, thread.user)
    if key is None:
        return
    if thread.last_inbound_at is not None:
        accounts.open_window(account.id, key, to_utc_naive(thread.last_inbound_at))
    changes: dict[Any, Any] = {}
    # The platform sends history in phases and may send a chunk again: each chat counts once.
    if _first_time(f"history:{account.id}:{key}", "history"):
        changes[MessagingAccount.history_threads] = MessagingAccount.history_threads + 1
    if thread.progress is not None and thread.progress > (account.history_progress or 0):
        # Compared again in the statement: batches of one sync run side by side, and one that read
        # 0 before another wrote 100 must not write its 50 over it.
        progress = MessagingAccount.history_progress
        changes[progress] = Case(None, [(progress.is_null() | (progress < thread.progress), thread.progress)],
                                 progress)
    if changes:
        MessagingAccount.update(changes).where(MessagingAccount.id == account.id).execute()


def _apply_synced_contact(contact: SyncedContact) -> None:
    """A business-app contact: its name and ids are kept (a removal keeps the user, without the name)."""
    account = _account_for_number(contact.phone_number_id)
    if account is None:
        return
    user = PlatformUser(user_id=contact.user_id, wa_id=contact.wa_id)
    if contact.action == "remove":
        platform_users.forget_contact(account.id, user)
    else:
        platform_users.remember(account.id, user, contact_name=contact.full_name or "")
    # Counted under the account row's lock (after the user's, the lock order): batches of one sync
    # run side by side, and a count taken before another batch's contact committed must not be
    # written after that batch's larger one.
    lock_rows(MessagingAccount, [account.id])
    MessagingAccount.update(contacts_imported=platform_users.contacts_of(account.id)).where(
        MessagingAccount.id == account.id).execute()


def _apply_user_preference(preference: UserPreference) -> None:
    account = _account_for_number(preference.phone_number_id)
    if account is None or preference.category != "marketing_messages":
        return
    platform_users.set_marketing_opt_out(account.id, preference.user, preference.value == "stop")


def _apply_quality(update: PhoneQualityUpdate, outcome: BatchOutcome) -> None:
    """FLAGGED pauses the number (quality RED); UNFLAGGED resumes it if that was the reason;
    a tier change moves the daily limit."""
    phone = "+" + "".join(ch for ch in update.display_phone_number or "" if ch.isdigit())
    query = MessagingAccount.select().where((MessagingAccount.business_account_id == update.waba_id)
                                            & (MessagingAccount.phone_number == phone))
    event = update.event.upper()
    for account in query:
        changes: dict[Any, Any] = {}
        if update.current_limit:
            limit = accounts.daily_limit_for_tier(update.current_limit, account.daily_limit)
            if limit != account.daily_limit:
                changes[MessagingAccount.daily_limit] = limit
        if event == "FLAGGED":
            changes[MessagingAccount.quality_rating] = "RED"
        if changes:
            MessagingAccount.update(changes).where(MessagingAccount.id == account.id).execute()
        if event == "FLAGGED":
            accounts.pause_account(account.id, f"{QUALITY_FLAGGED}: the platform flagged the number's quality (RED)")
        elif event == "UNFLAGGED":
            accounts.resume_account(account.id, paused_for=QUALITY_FLAGGED)
            # The event does not say which rating the number is back to; the worker asks.
            outcome.refresh_numbers.add(account.id)


def _apply_account_update(update: AccountUpdate) -> None:
    """Restrictions and bans pause the business account's numbers; lifting them resumes the
    numbers paused for that reason (never those an administrator paused)."""
    event = update.event.upper()
    numbers = MessagingAccount.select(MessagingAccount.id).where(
        MessagingAccount.business_account_id == update.waba_id)
    phone = update.raw.get("phone_number")
    if phone:
        numbers = numbers.where(MessagingAccount.phone_number == "+" + "".join(
            ch for ch in str(phone) if ch.isdigit()))
    account_ids = [row.id for row in numbers]
    if event == "ACCOUNT_RESTRICTION":
        restrictions = update.restriction_info or []
        if restrictions:
            kinds = ", ".join(sorted({str(item.get("restriction_type", "restricted")) for item in restrictions}))
            for account_id in account_ids:
                accounts.pause_account(account_id, f"{ACCOUNT_RESTRICTED}: {kinds}")
        else:
            for account_id in account_ids:
                accounts.resume_account(account_id, paused_for=ACCOUNT_RESTRICTED)
    elif event == "DISABLED_UPDATE":
        state = str((update.ban_info or {}).get("waba_ban_state", "")).upper()
        if state in {"DISABLE", "SCHEDULE_FOR_DISABLE"}:
            for account_id in account_ids:
                accounts.pause_account(account_id, f"{ACCOUNT_DISABLED}: {state.lower()}")
        elif state == "REINSTATE":
            for account_id in account_ids:
                accounts.resume_account(account_id, paused_for=ACCOUNT_DISABLED)
    else:
        log.info("platform account_update %s for %s: nothing to do", event, update.waba_id)

