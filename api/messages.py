"""POST /messages (single messages inside the 24-hour window) and GET /messages/{message_id}."""

from __future__ import annotations

import functools
import re
import threading
import time

from api.errors import ApiError
from api.operation import Reply, operation
from api.schemas import DataOnly, Output
from config import get_settings
from jobs.messages import enqueue_send
from models.sending import messages
from models.sending.messages import MessageInput
from models.sending.tables import Message as MessageRow

MAX_WAIT = 10.0  # seconds a client may ask to wait for the outcome (Prefer: wait=N)
# A waiting request holds one of the worker's request threads: at most this share of them may
# wait at once, so waiting clients cannot take the threads every other request needs. Past it,
# the answer is the usual 202 at once (a preference the server may decline, RFC 7240).
WAITING_SHARE = 4  # one thread in four
POLL_EVERY = 0.05
_WAIT_PREFERENCE = re.compile(r"(?:^|[,;])\s*wait\s*=\s*\"?(\d+(?:\.\d+)?)\"?\s*(?=$|[,;])", re.I)


class MessageError(Output):
    code: str | None
    message: str | None


class Message(Output):
    id: str
    wam_id: str | None
    account_id: str | None
    to: str
    type: str
    status: str
    external_reference: str | None
    credits_reserved: int
    created_at: str | None
    sent_at: str | None
    error: MessageError | None


def preferred_wait(header: str | None) -> float:
    """Seconds from `Prefer: wait=N` (RFC 7240), at most 10; an unusable value is ignored."""
    if not header:
        return 0.0
    match = _WAIT_PREFERENCE.search(header)
    return min(MAX_WAIT, float(match.group(1))) if match else 0.0


@functools.cache
def _waiting_places() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(max(1, get_settings().web_threads // WAITING_SHARE))


def _outcome(message_id: int, seconds: float) -> MessageRow:
    """The message once its send has an outcome, or as it is after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        message = MessageRow.get_by_id(message_id)
        if message.status != "queued" or time.monotonic() >= deadline:
            return message
        time.sleep(min(POLL_EVERY, max(0.0, deadline - time.monotonic())))


class MessagesResource:
    @operation("Send a single message inside the 24-hour customer window", scope="messages:write",
               body=MessageInput, responses={202: DataOnly[Message], 201: DataOnly[Message]},
               errors=(401, 403, 404, 409, 422, 429, 502), tags=("messages",),
               description="Asynchronous: 202 with status `queued`. With `Prefer: wait=N` (N up to 10 s) the "
                           "answer waits for the send: 201 with status `sent` and `wam_id`, or 502 "
                           "`messaging_send_failed` when the platform rejected it (the credit is released), "
                           "or the usual 202 when N seconds pass first. 422 codes: `outside_24h_window`, "
                           "`account_not_ready`, `account_inactive`, `daily_limit_reached`, "
                           "`insufficient_credits`, `wallet_paused`, `invalid_recipient`, `validation_failed`.")
    def on_post(self, req, resp) -> Reply:
        wait = preferred_wait(req.get_header("Prefer"))
        message = messages.create_message(req.context.tenant_id, req.context.body)
        account_public_id = req.context.body.account_id
        queued = message.as_dict(account_public_id)
        enqueue_send(message.id)
        places = _waiting_places()
        if not wait or not places.acquire(blocking=False):
            return Reply(202, {"data": queued})
        applied = {"Preference-Applied": f"wait={wait:g}"}
        try:
            message = _outcome(message.id, wait)
        finally:
            places.release()
        if message.status == "failed":
            data = message.as_dict(account_public_id)
            raise ApiError(502, "messaging_send_failed", f"the platform rejected the message: {message.last_error}",
                           {"message": data, "error": data["error"]}, headers=applied)
        if message.status == "queued":
            return Reply(202, {"data": queued}, applied)
        return Reply(201, {"data": message.as_dict(account_public_id)}, applied)


class MessageResource:
    @operation("Read a single message", scope="messages:write", responses={200: DataOnly[Message]},
               errors=(401, 403, 404, 429), tags=("messages",))
    def on_get(self, req, resp, message_id: str) -> Reply:
        return Reply(200, {"data": messages.read_message(req.context.tenant_id, message_id)})


ROUTES = [("/messages", MessagesResource()), ("/messages/{message_id}", MessageResource())]
