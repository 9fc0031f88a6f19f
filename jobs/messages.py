"""Sending single messages: claim, pace, send, record (see models/messages.py)."""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid

from jobs.campaigns import notify_events
from jobs.queue import huey, task
from messaging import payloads
from messaging.errors import PlatformError, PlatformUnavailableError, ThrottledError
from models import messages
from models.accounts import MessagingAccount
from models.clock import utcnow
from models.db import counters
from models.dispatch import (
    DISCONNECTED_CODES,
    MAX_RETRIES,
    STUCK_AFTER,
    UNCONFIRMED,
    account_token,
    bucket_key,
    graph_client,
)
from models.messages import Message

log = logging.getLogger(__name__)

PACING_WAIT = 2.0  # seconds a send waits in the task for its number's token before re-queueing
THROTTLE_RETRIES_IN_TASK = 2  # a throttled send tries again this many times before re-queueing
UNCLAIMED_AFTER = dt.timedelta(minutes=1)  # a queued message nobody claimed: its task was lost


def enqueue_send(message_id: int) -> None:
    send_message(message_id)


def payload_for(message: Message) -> dict:
    """The Graph API body of a stored message; its `msg_` id travels as callback data."""
    content, to, callback = message.content, message.to, message.public_id
    if message.type == "text":
        return payloads.text_message(to, content["body"], callback_data=callback)
    if message.type == "interactive":
        if content["kind"] == "buttons":
            return payloads.interactive_buttons(to, content["body"], content["buttons"], header=content.get("header"),
                                                footer=content.get("footer"), callback_data=callback)
        return payloads.interactive_list(to, content["body"], content["button"], content["sections"],
                                         header=content.get("header"), footer=content.get("footer"),
                                         callback_data=callback)
    return payloads.media_message(to, message.type, link=content.get("url"), media_id=content.get("media_id"),
                                  caption=content.get("caption"), filename=content.get("filename"),
                                  callback_data=callback)


def _paced(account: MessagingAccount) -> bool:
    """Take one send slot from the number's schedule, the one campaigns take from too, and wait for it."""
    rate = float(account.mps or 1)
    deadline = time.monotonic() + PACING_WAIT
    while True:
        granted, wait = counters().take_tokens({bucket_key(account.id): (rate, max(1.0, rate / 2), 1)})[
            bucket_key(account.id)]
        if granted:
            time.sleep(wait)  # `wait` is the time to the granted slot: never send before it
            return True
        if time.monotonic() + wait > deadline:
            return False
        time.sleep(max(0.01, wait))


@task()
def send_message(message_id: int) -> None:
    token = f"msg.{uuid.uuid4().hex}"
    message = messages.claim(message_id, token)
    if message is None:
        return  # sent, failed, or another worker has it
    try:
        _send(message, token)
    finally:
        notify_events()


def _send(message: Message, token: str) -> None:
    account = MessagingAccount.get_by_id(message.account_id)
    if not account.ready:
        messages.record_failed(message, token, "account_not_ready", "the number is no longer connected")
        return
    if account.status != "active":
        messages.record_failed(message, token, "account_inactive", "the number was paused before the send")
        return
    try:
        body = payload_for(message)
        secret = account_token(account)
    except (ValueError, KeyError) as error:
        messages.record_failed(message, token, "invalid_message", str(error))
        return
    for attempt in range(THROTTLE_RETRIES_IN_TASK + 1):
        if not _paced(account):
            _requeue(message, token, delay=1.0, failed_attempt=False)
            return
        try:
            wam_id = graph_client().send_message(account.phone_id, secret, body)
        except ThrottledError:
            if attempt < THROTTLE_RETRIES_IN_TASK:
                time.sleep(1.0 if attempt == 0 else 2.0)
                continue
            _requeue(message, token, delay=4.0, failed_attempt=False)
            return
        except PlatformUnavailableError as error:
            if error.ambiguous:
                # It may have been accepted: the status webhook (callback data) or the recovery
                # task settles it; sending again could deliver it twice.
                log.warning("no answer for %s: %s", message.public_id, error)
                return
            _retry_or_fail(message, token, error)
            return
        except PlatformError as error:
            if error.retryable:
                _retry_or_fail(message, token, error)
            else:
                code = "account_disconnected" if error.code in DISCONNECTED_CODES else str(error.code or "rejected")
                detail = error.details.get("details") if isinstance(error.details, dict) else None
                messages.record_failed(message, token, code, f"{error.message}: {detail}" if detail else error.message)
            return
        messages.record_sent(message, token, wam_id)
        return


def _retry_or_fail(message: Message, token: str, error: PlatformError) -> None:
    if message.attempts >= MAX_RETRIES:
        messages.record_failed(message, token, str(error.code or "platform_unavailable"), error.message)
    else:
        _requeue(message, token, delay=2.0 ** message.attempts, failed_attempt=True)


def _requeue(message: Message, token: str, delay: float, failed_attempt: bool) -> None:
    messages.unclaim(message, token, failed_attempt)
    if not huey.immediate:
        send_message.schedule((message.id,), delay=delay)


def recover_messages(now: dt.datetime | None = None) -> int:
    """Unanswered claims fail as unconfirmed (never resent); lost tasks are queued again."""
    now = now or utcnow()
    settled = 0
    stuck = Message.select().where((Message.status == "queued") & Message.claim_token.is_null(False)
                                   & (Message.claimed_at < now - STUCK_AFTER))
    for message in stuck:
        settled += messages.record_failed(
            message, message.claim_token, UNCONFIRMED,
            "the platform never confirmed this send; it was not retried, to avoid a duplicate")
    lost = Message.select(Message.id).where((Message.status == "queued") & Message.claim_token.is_null()
                                            & (Message.created_at < now - UNCLAIMED_AFTER))
    for row in lost:
        send_message(row.id)
    return settled
