"""Campaigns on the queue: a created campaign wakes the sending core (jobs/sending.py)."""

from __future__ import annotations

from jobs.sending import dispatch


def enqueue_dispatch(campaign_id: int) -> None:
    """Start sending a committed campaign (call after the creating transaction commits)."""
    dispatch()
