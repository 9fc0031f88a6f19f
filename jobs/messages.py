"""Single messages on the queue: a created message wakes the sending core (jobs/sending.py),
which paces, sends and records it as it does campaign recipients; the customer's last message
is marked read, with a typing indicator, meanwhile."""

from __future__ import annotations

from jobs.queue import task
from jobs.sending import dispatch
from models.sending.messages import mark_conversation_read


def enqueue_send(message_id: int) -> None:
    """Start sending a committed message (call after the creating transaction commits)."""
    mark_read(message_id)
    dispatch()


@task()
def mark_read(message_id: int) -> bool:
    return mark_conversation_read(message_id)
