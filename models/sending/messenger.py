"""How one message goes out, and what the platform's answer means for it.

- `GraphMessenger`: hands a claimed job to the platform; returns the wamid or raises.
- The payloads: a campaign recipient's template message, a single message's text, media or
  interactive message; each carries its row's public id as callback data, so a status webhook
  can name a send whose answer was lost.
- The error policy, written once for campaign recipients and single messages (`verdict`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from messaging import payloads
from messaging.errors import PlatformError, PlatformUnavailableError, ThrottledError
from models.events.outbox import emit
from models.numbers import accounts
from models.numbers.graph import graph_client
from models.numbers.tables import MessagingAccount

if TYPE_CHECKING:
    from models.sending.work import Job

MAX_RETRIES = 5  # transient platform errors per message before it fails
MAX_PAIR_THROTTLES = 5  # 131056 waits: 4, 16, 64, 256, 1024 s

# The number cannot send any more: expired or revoked token (190), permissions (10, 200),
# account locked (131031), number deregistered (133010), access denied (131005).
DISCONNECTED_CODES = frozenset({10, 190, 200, 131005, 131031, 133010})
# The business account may send nothing until someone acts: restricted for a policy violation (368)
# or a payment problem (131042). The number is paused rather than the rest of the list burnt.
BLOCKING_CODES = frozenset({368, 131042})
# The template itself is refused: every recipient would fail the same way.
TEMPLATE_CODES = frozenset({132000, 132001, 132005, 132007, 132012, 132015, 132016})


# The Graph client and a number's token.


# Sending.


class Messenger(Protocol):
    def send(self, job: Job) -> str:
        """Hand one message to the platform; returns its wamid or raises PlatformError."""


class GraphMessenger:
    def __init__(self, client_factory: Callable[[], Any] = graph_client):
        self.client_factory = client_factory

    def send(self, job: Job) -> str:
        return self.client_factory().send_message(job.phone_id, job.token, job.payload)


def template_payload(campaign: Any, wa_id: str, variables: list[str] | None, callback: str,
                     buttons: list[dict] | None = None) -> dict:
    """A campaign recipient's template message (`campaign` is the campaign row); `buttons` are the
    recipient's button parameters, sent as `button` components by index."""
    header = {"type": campaign.header_type, "link": campaign.header_url} if campaign.header_type else None
    return payloads.template_message(wa_id, campaign.template_name, campaign.template_language, variables or (),
                                     header=header, callback_data=callback, buttons=buttons or ())


def message_payload(message: Any) -> dict:
    """A single message's Graph API body (`message` is the message row); raises ValueError or
    KeyError when its stored content cannot make one."""
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


# The error policy.


class SlotMissed(ThrottledError):
    """The engine held a send back itself: its turn came too long after its pacing slot."""


class Verdict(enum.Enum):
    ACCEPTED = "accepted"
    UNANSWERED = "unanswered"  # may have been accepted: only a status webhook can tell; never resent
    THROTTLED = "throttled"  # the number is over its pace: back to the queue, the number's bucket held
    PAIR_THROTTLED = "pair_throttled"  # too many messages to this user: only this one waits, 4^n s
    RETRY = "retry"  # a platform hiccup: back to the queue after 2^n s, a bounded number of times
    FAILED = "failed"  # refused for good: failed, its credit released
    DISCONNECTED = "disconnected"  # failed, and the number can send no more
    TEMPLATE_REFUSED = "template_refused"  # failed, and the template can send no more
    ACCOUNT_BLOCKED = "account_blocked"  # never sent: back to the queue, and the number paused
    SLOT_MISSED = "slot_missed"  # never sent (late for its slot): back to the queue, nothing held or counted


def verdict(job: Job) -> Verdict:
    """What the platform's answer to a sent job means for it."""
    error = job.error
    if error is None:
        return Verdict.ACCEPTED
    if isinstance(error, PlatformUnavailableError) and error.ambiguous:
        return Verdict.UNANSWERED
    if isinstance(error, SlotMissed):
        return Verdict.SLOT_MISSED
    if isinstance(error, ThrottledError):
        if not error.pair_rate_limited:
            return Verdict.THROTTLED
        return Verdict.PAIR_THROTTLED if job.throttled + 1 <= MAX_PAIR_THROTTLES else Verdict.FAILED
    if error.retryable:
        return Verdict.RETRY if job.retries + 1 <= MAX_RETRIES else Verdict.FAILED
    if error.code in BLOCKING_CODES:
        return Verdict.ACCOUNT_BLOCKED
    if error.code in DISCONNECTED_CODES or _object_gone(error):
        return Verdict.DISCONNECTED
    if error.code in TEMPLATE_CODES:
        return Verdict.TEMPLATE_REFUSED
    return Verdict.FAILED


def pause_blocked_numbers(blocked: dict[int, str]) -> None:
    """Pause each number the platform blocked (`account.paused` event with the reason); its
    campaigns are held until an administrator resumes it. Call inside the recording transaction."""
    for account_id, reason in sorted(blocked.items()):
        if accounts.pause_account(account_id, f"{PLATFORM_BLOCKED}: {reason}"):
            account = MessagingAccount.get_by_id(account_id)
            emit(account.tenant_id, "account.paused", {
                "account": {"id": account.public_id, "label": account.label,
                            "external_reference": account.external_reference,
                            "phone_number": account.phone_number, "status": account.status},
                "reason": account.paused_reason})


PLATFORM_BLOCKED = "platform_blocked"


def _object_gone(error: PlatformError) -> bool:
    # (#100) subcode 33: the phone number id does not exist (any more) for this token.
    return error.code == 100 and error.details.get("error_subcode") == 33


def error_code(error: PlatformError | None) -> str:
    if error is None:
        return "unknown"
    return str(error.code) if error.code is not None else type(error).__name__


def error_text(error: PlatformError | None) -> str:
    if error is None:
        return ""
    details = error.details.get("details") if isinstance(error.details, dict) else None
    text = f"{error.message}: {details}" if details else error.message
    return text[:1000]
