"""A WhatsApp user as the platform names them: what parses the platform's webhooks
(messaging/webhooks.py) makes them, and what keeps the users a number has seen
(models/numbers/platform_users.py) stores them. The latter imports only this module, so that the
processes that load it without reading webhooks (an ERP import, through the campaigns its
reminders belong to) do not load the webhook parser."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PlatformUser:
    """A WhatsApp user as the platform names them: a business-scoped user id (`user_id`), the
    phone number (`wa_id`) only when the user shares it, and a username when they chose one."""

    user_id: str | None = None
    wa_id: str | None = None
    parent_user_id: str | None = None
    username: str | None = None
    profile_name: str | None = None

    @property
    def key(self) -> str | None:
        """How the service keys the user: the phone number when known (the contract's `wa_id`),
        else the business-scoped id."""
        return self.wa_id or self.user_id
