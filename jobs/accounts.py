"""Numbers' background work: finishing a connection, template syncs, re-reading a number."""

from __future__ import annotations

import datetime as dt
import logging

from jobs.queue import crontab, periodic_task, task
from messaging.errors import PlatformError
from models.clock import utcnow
from models.numbers import onboarding
from models.numbers.tables import MessagingAccount
from models.numbers.templates import sync_templates

log = logging.getLogger(__name__)


class FollowUpIncomplete(Exception):
    """Raised so huey retries a follow-up that the platform could not finish yet."""


def connected(account_id: int) -> None:
    """Call once the transaction that connected a number has committed."""
    try:
        after_connect(account_id)
    except Exception:
        # The number is connected; `finish_connections` picks the follow-up up if it was not queued.
        log.exception("could not queue the follow-up of account %s", account_id)


@task(retries=5, retry_delay=30)
def after_connect(account_id: int) -> dict:
    """Subscribe the app, run the one-time coexistence syncs and sync the templates.

    Every step is safe to repeat, so a retry redoes only what did not happen.
    """
    account = MessagingAccount.get_or_none(MessagingAccount.id == account_id)
    if account is None or not account.access_token:
        return {}
    done: dict = {}
    problems = []
    if not account.subscribed_to_webhooks:
        try:
            onboarding.subscribe_webhooks(account)
            done["subscribed"] = True
        except PlatformError as error:
            problems.append(f"subscribe: {error}")
    try:
        done["synced"] = onboarding.coexistence_sync(account)
    except PlatformError as error:
        problems.append(f"coexistence sync: {error}")
    try:
        done["templates"] = sync_templates(account).as_dict()
    except PlatformError as error:
        problems.append(f"templates: {error}")
    if problems:
        raise FollowUpIncomplete(f"account {account.public_id}: " + "; ".join(problems))
    return done


@task(retries=3, retry_delay=60)
def sync_account_templates(account_id: int) -> dict | None:
    account = MessagingAccount.get_or_none(MessagingAccount.id == account_id)
    if account is None or not account.access_token:
        return None
    return sync_templates(account).as_dict()


@task(retries=3, retry_delay=60)
def refresh_number(account_id: int) -> None:
    account = MessagingAccount.get_or_none(MessagingAccount.id == account_id)
    if account is not None and account.access_token:
        onboarding.refresh_number(account)


def ready_accounts():
    return MessagingAccount.select(MessagingAccount.id).where(MessagingAccount.access_token.is_null(False))


@periodic_task(crontab(minute="23"))
def sync_all_templates() -> int:
    """Hourly: templates change on the platform without always telling us (lost webhooks)."""
    ids = [row.id for row in ready_accounts()]
    for account_id in ids:
        sync_account_templates(account_id)
    return len(ids)


@periodic_task(crontab(minute="*/10"))
def finish_connections() -> int:
    """Follow-ups whose task was lost: unsubscribed numbers, and coexistence syncs still due."""
    due = utcnow() - onboarding.COEXISTENCE_SYNC_WINDOW
    query = ready_accounts().where(
        ~MessagingAccount.subscribed_to_webhooks
        | ((MessagingAccount.connection_mode == "coexistence") & (MessagingAccount.connected_at > due)
           & (MessagingAccount.contacts_synced_at.is_null() | MessagingAccount.history_synced_at.is_null())))
    # Leave a just-connected number to the task queued by its completion.
    ids = [row.id for row in query.where(MessagingAccount.connected_at < utcnow() - dt.timedelta(minutes=5))]
    for account_id in ids:
        after_connect(account_id)
    return len(ids)
