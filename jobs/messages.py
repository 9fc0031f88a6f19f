"""Single messages on the queue: a created message wakes the sending core (jobs/sending.py),
which paces, sends and records it as it does campaign recipients."""

from __future__ import annotations

from jobs.sending import dispatch


def enqueue_send(message_id: int) -> None:
    """Start sending a committed message (call after the creating transaction commits)."""
    dispatch()
