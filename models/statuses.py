"""Applying the platform's message status updates to campaign recipients and single messages."""

from __future__ import annotations


def apply_status_updates(updates: list) -> None:
    """Move recipients and messages forward by the platform's status updates (see models/campaigns)."""
    raise NotImplementedError
