"""Coexistence onboarding: `oba_` attempts, and completing one into an active number.

An attempt is created by `POST /accounts/coexistence-link`, lives one hour, and ends exactly once:
`completed` (the number is active, `account.connected` written), `failed` (with an error code),
`cancelled` or `expired`. Every later visit or completion gets the same outcome again, so a
double submit or a refreshed page never connects a number twice.

States: pending -> completing -> completed | failed; pending -> cancelled | expired.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass

import requests

from config import get_settings
from messaging.errors import (
    PermanentPlatformError,
    PlatformError,
    PlatformUnavailableError,
    ThrottledError,
    without_url_secrets,
)
from models.clock import utcnow
from models.errors import NotFound
from models.events.outbox import emit
from models.ids import new_id
from models.numbers import accounts
from models.numbers.graph import account_token, graph_client
from models.numbers.tables import (
    ATTEMPT_EXPIRED,
    ATTEMPT_IN_PROGRESS,
    CODE_EXCHANGE_FAILED,
    COEXISTENCE_MPS,
    MAX_PLATFORM_ID,
    NUMBER_CONNECTED_ELSEWHERE,
    NUMBER_UNAVAILABLE,
    PLATFORM_UNAVAILABLE,
    SIGNUP_CANCELLED,
    SIGNUP_FAILED,
    TERMINAL,
    MessagingAccount,
    OnboardingAttempt,
    Tenant,
)
from models.store.db import atomic
from models.store.secrets import encrypt

log = logging.getLogger(__name__)

ATTEMPT_TTL = dt.timedelta(hours=1)
# A `completing` claim older than this belongs to a process that died mid-way; its code is spent.
ABANDONED_AFTER = dt.timedelta(minutes=2)
# How long a second completion waits for the first one to finish before giving up.
CONCURRENT_WAIT = 15.0


def create_attempt(tenant_id: int, redirect_url: str, label: str | None = None,
                   external_reference: str | None = None) -> OnboardingAttempt:
    now = utcnow()
    return OnboardingAttempt.create(public_id=new_id("oba_"), tenant=tenant_id, redirect_url=redirect_url,
                                    label=label, external_reference=external_reference, created_at=now,
                                    expires_at=now + ATTEMPT_TTL)


def onboarding_url(attempt: OnboardingAttempt) -> str:
    return f"{get_settings().public_url}/onboarding/{attempt.public_id}"


def get_attempt(public_id: str) -> OnboardingAttempt:
    """An attempt by its id: the id itself is the credential of the (unauthenticated) page."""
    attempt = OnboardingAttempt.get_or_none(OnboardingAttempt.public_id == public_id)
    if attempt is None:
        raise NotFound("this connection link does not exist", code="attempt_not_found")
    return attempt


def settle(attempt: OnboardingAttempt) -> OnboardingAttempt:
    """Mark a pending attempt past its hour as expired; returns the attempt as it now is."""
    if attempt.expired:
        _finish(attempt.id, "pending", "expired", ATTEMPT_EXPIRED, None)
        attempt = OnboardingAttempt.get_by_id(attempt.id)
    return attempt


@dataclass
class Outcome:
    attempt: OnboardingAttempt
    # Set only for the one call that connected the number: the caller starts its follow-up work.
    connected: MessagingAccount | None = None

    @property
    def redirect(self) -> str:
        return self.attempt.redirect()


def current(public_id: str) -> OnboardingAttempt:
    """The attempt as a visitor should see it: expiry applied, a running completion waited for."""
    attempt = settle(get_attempt(public_id))
    if attempt.status == "completing":
        attempt = _wait_for_end(attempt.id)
    return attempt


def cancel(public_id: str, error: str = SIGNUP_CANCELLED, detail: str | None = None) -> Outcome:
    """The user left the platform's flow (cancelled, or it reported an error)."""
    attempt = settle(get_attempt(public_id))
    status = "cancelled" if error == SIGNUP_CANCELLED else "failed"
    if _finish(attempt.id, "pending", status, error, detail):
        return Outcome(OnboardingAttempt.get_by_id(attempt.id))
    return Outcome(_wait_for_end(attempt.id))


def complete(public_id: str, code: str, waba_id: str, phone_number_id: str) -> Outcome:
    """Turn the platform's signup result into an active number, at most once per attempt.

    1. Claim the attempt (pending -> completing, conditional UPDATE); an attempt that has ended
       returns its outcome unchanged, one being completed elsewhere is waited for.
    2. Exchange the code for the business token and read the number from the platform.
    3. In one transaction: create the account, or update the tenant's account for the same
       phone number; store the token encrypted; activate it; complete the attempt; write
       `account.connected`.
    Subscribing the app, the one-time coexistence syncs and the template sync follow in the
    worker (`jobs.accounts.after_connect`), so this request only waits for two platform calls.
    """
    attempt = settle(get_attempt(public_id))
    now = utcnow()
    claimed = (OnboardingAttempt.update(status="completing", claimed_at=now)
               .where((OnboardingAttempt.id == attempt.id) & (OnboardingAttempt.status == "pending")
                      & (OnboardingAttempt.expires_at > now))
               .execute())
    if claimed != 1:
        return Outcome(_wait_for_end(attempt.id))

    def fail(error: str, detail: str | None) -> Outcome:
        _finish(attempt.id, "completing", "failed", error, detail)
        return Outcome(OnboardingAttempt.get_by_id(attempt.id))

    ids = {"waba_id": waba_id, "phone_number_id": phone_number_id, "code": code}
    missing = [name for name, value in ids.items() if not value]
    if missing:
        return fail(SIGNUP_FAILED, f"the signup did not return {', '.join(missing)}")
    if len(waba_id) > MAX_PLATFORM_ID or len(phone_number_id) > MAX_PLATFORM_ID or len(code) > 4096:
        return fail(SIGNUP_FAILED, "the signup returned malformed identifiers")

    step = "exchange"
    try:
        client = graph_client()
        token = client.exchange_code(code)
        step = "number"
        number = client.get_phone_number(phone_number_id, token)
        # The browser reports the business account; only the token says which one it really is:
        # the number must be one of that account's, as the token sees it.
        step = "business"
        in_business = phone_number_id in client.phone_number_ids(waba_id, token)
    except PermanentPlatformError as error:
        code = {"exchange": CODE_EXCHANGE_FAILED, "number": NUMBER_UNAVAILABLE}.get(step, SIGNUP_FAILED)
        return fail(code, str(error))
    except PlatformError as error:
        return fail(PLATFORM_UNAVAILABLE, str(error))
    except Exception as error:
        # A misconfiguration (no app id or secret, ...): end the attempt rather than leave it
        # claimed, and leave the cause in the log (its text only: a traceback would quote the
        # code exchange's URL, app secret included, from wherever it was raised).
        cause = without_url_secrets(f"{type(error).__name__}: {error}")[:1000]
        log.error("onboarding %s failed at the %s step: %s", attempt.public_id, step, cause)
        return fail(PLATFORM_UNAVAILABLE, cause)

    if not in_business:
        return fail(SIGNUP_FAILED, f"phone number {phone_number_id} is not in business account {waba_id}")

    with atomic():
        # Locks the tenant's row on PostgreSQL (SQLite's BEGIN IMMEDIATE already serializes): two
        # attempts for the same number completing together must not create two accounts.
        Tenant.update(status=Tenant.status).where(Tenant.id == attempt.tenant_id).execute()
        taken = MessagingAccount.get_or_none((MessagingAccount.phone_id == phone_number_id)
                                             & (MessagingAccount.tenant != attempt.tenant_id))
        if taken is not None:
            return fail(NUMBER_CONNECTED_ELSEWHERE, f"phone number {phone_number_id} belongs to another company")
        account = _connect(attempt, waba_id, phone_number_id, number, token)
        OnboardingAttempt.update(status="completed", account=account.id, waba_id=waba_id,
                                 phone_number_id=phone_number_id, finished_at=utcnow()).where(
            OnboardingAttempt.id == attempt.id).execute()
        emit(attempt.tenant_id, "account.connected", {"account": connected_payload(account)})
    return Outcome(OnboardingAttempt.get_by_id(attempt.id), connected=account)


def connected_payload(account: MessagingAccount) -> dict:
    return {
        "id": account.public_id,
        "label": account.label,
        "external_reference": account.external_reference,
        "phone_number": account.phone_number,
        "connection_mode": account.connection_mode,
        "status": account.status,
    }


def _connect(attempt: OnboardingAttempt, waba_id: str, phone_number_id: str, number: dict,
             token: str) -> MessagingAccount:
    """Create or update the tenant's account for this phone number (one account per number)."""
    account = MessagingAccount.get_or_none((MessagingAccount.tenant == attempt.tenant_id)
                                           & (MessagingAccount.phone_id == phone_number_id))
    if account is None:
        account = MessagingAccount(public_id=new_id("wacc_"), tenant=attempt.tenant_id,
                                   daily_limit=accounts.DEFAULT_DAILY_LIMIT)
    # A reconnect keeps the sync stamps untouched: the coexistence syncs may only ever run once.
    now = utcnow()
    digits = "".join(ch for ch in str(number.get("display_phone_number") or "") if ch.isdigit())
    if attempt.label is not None:
        account.label = attempt.label
    if attempt.external_reference is not None:
        account.external_reference = attempt.external_reference
    account.phone_number = f"+{digits}" if digits else account.phone_number
    account.name = _text(number.get("verified_name"), 255) or account.name
    account.status = "active"
    account.paused_reason = None
    account.connection_mode = "coexistence"
    account.business_account_id = waba_id
    account.phone_id = phone_number_id
    account.access_token = encrypt(token)
    account.quality_rating = _text(number.get("quality_rating"), 16) or account.quality_rating
    account.daily_limit = accounts.daily_limit_for_tier(_text(number.get("messaging_limit_tier"), 32),
                                                        account.daily_limit)
    # The platform fixes a coexistence number's throughput at 20 messages/s.
    account.mps = COEXISTENCE_MPS
    account.connected_at = now
    account.save()
    return account


def _text(value, length: int) -> str | None:
    return None if value is None else str(value)[:length]


def _finish(attempt_id: int, from_status: str, status: str, error: str | None, detail: str | None) -> bool:
    # The detail is the platform's or the browser's text: stored without any URL's secret parts.
    detail = None if detail is None else without_url_secrets(detail)
    return (OnboardingAttempt.update(status=status, error=error, error_detail=detail, finished_at=utcnow())
            .where((OnboardingAttempt.id == attempt_id) & (OnboardingAttempt.status == from_status))
            .execute()) == 1


def _wait_for_end(attempt_id: int) -> OnboardingAttempt:
    """The attempt once it has ended; a completion still running elsewhere is waited for."""
    deadline = time.monotonic() + CONCURRENT_WAIT
    while True:
        attempt = settle(OnboardingAttempt.get_by_id(attempt_id))
        if attempt.status in TERMINAL:
            return attempt
        if attempt.status == "completing" and attempt.claimed_at < utcnow() - ABANDONED_AFTER:
            # Its process died after claiming: the code may be spent, the user has to start again.
            _finish(attempt_id, "completing", "failed", PLATFORM_UNAVAILABLE, "the completion was interrupted")
            continue
        if time.monotonic() >= deadline:
            attempt.error = ATTEMPT_IN_PROGRESS
            attempt.status = "failed"  # shown to the user only; the row is left to its owner
            return attempt
        time.sleep(0.2)


def simulator_signup() -> dict:
    """Run the simulator's embedded signup (`POST /_sim/signup`): a new number and its code.

    Only in simulator mode; a real platform's signup happens in the user's browser.
    """
    settings = get_settings()
    if not settings.simulator_mode:
        raise NotFound("the simulated signup exists only in simulator mode", code="not_found")
    response = requests.post(f"{settings.graph_url}/_sim/signup", json={}, timeout=(3.05, 10))
    response.raise_for_status()
    return response.json()


# After connecting: the work the worker does once the number is active (jobs.accounts.after_connect).

COEXISTENCE_SYNC_WINDOW = dt.timedelta(hours=24)


def subscribe_webhooks(account: MessagingAccount) -> None:
    """Subscribe our app to the number's business account, so its webhooks reach us."""
    graph_client().subscribe_app(account.business_account_id, account_token(account))
    MessagingAccount.update(subscribed_to_webhooks=True).where(MessagingAccount.id == account.id).execute()


def coexistence_sync(account: MessagingAccount) -> list[str]:
    """Ask the platform for the business app's contacts, then its chat history: each at most once
    in the number's life, and only within 24 hours of connecting (the platform refuses after).

    Each sync is stamped before it is requested (conditional UPDATE on a null stamp), so two
    workers cannot both request it. The stamp is removed again only when the request provably
    never reached the platform (refused connection, throttled); then a retry may send it.
    Returns the syncs requested by this call.
    """
    if account.connection_mode != "coexistence" or account.connected_at is None:
        return []
    if utcnow() - account.connected_at > COEXISTENCE_SYNC_WINDOW:
        log.warning("account %s: coexistence sync window has passed; not requested", account.public_id)
        return []
    client = graph_client()
    token = account_token(account)
    requested = []
    for name, stamp, call in (("contacts", MessagingAccount.contacts_synced_at, client.sync_contacts),
                              ("history", MessagingAccount.history_synced_at, client.sync_history)):
        claimed = (MessagingAccount.update({stamp: utcnow()})
                   .where((MessagingAccount.id == account.id) & stamp.is_null()).execute())
        if claimed != 1:
            continue
        try:
            call(account.phone_id, token)
        except (ThrottledError, PlatformUnavailableError) as error:
            if isinstance(error, ThrottledError) or not error.ambiguous:
                MessagingAccount.update({stamp: None}).where(MessagingAccount.id == account.id).execute()
            raise
        except PermanentPlatformError as error:
            # Refused (typically: already requested once). Asking again would be refused too.
            log.warning("account %s: %s sync refused by the platform: %s", account.public_id, name, error)
            continue
        requested.append(name)
    return requested


def refresh_number(account: MessagingAccount) -> MessagingAccount:
    """Re-read the number's name, quality rating and messaging tier from the platform."""
    number = graph_client().get_phone_number(account.phone_id, account_token(account))
    changes = {
        MessagingAccount.name: _text(number.get("verified_name"), 255) or account.name,
        MessagingAccount.quality_rating: _text(number.get("quality_rating"), 16) or account.quality_rating,
        MessagingAccount.daily_limit: accounts.daily_limit_for_tier(
            _text(number.get("messaging_limit_tier"), 32), account.daily_limit),
    }
    MessagingAccount.update(changes).where(MessagingAccount.id == account.id).execute()
    return MessagingAccount.get_by_id(account.id)
