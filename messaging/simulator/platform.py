"""The simulated platform as each of its behaviours is handed it: what it knows (`state`), how it
is set (`settings`, which `POST /_sim/config` changes while it runs) and how it talks back
(`webhooks`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from typing import Any

from messaging.simulator.errors import ControlError
from messaging.simulator.state import PlatformState
from messaging.simulator.webhook_sender import WebhookSender

DEFAULT_MPS = 20.0


@dataclass
class Settings:
    webhook_url: str | None = None
    app_secret: str | None = None
    default_mps: float = DEFAULT_MPS  # the cap of a number signed up without one
    delivered_delay: float = 0.05  # seconds from an accepted send to its `delivered` status
    read_delay: float = 0.1
    duplicate_rate: float = 0.02  # the chance that a webhook POST is sent twice
    shuffle: bool = False  # webhooks out of order
    review_delay: float = 0.5  # seconds from a template's submission to its review (template_review)

    def configure(self, **options: Any) -> None:
        unknown = set(options) - {setting.name for setting in fields(self)}
        if unknown:
            raise ControlError(400, f"unknown option(s): {', '.join(sorted(unknown))}")
        for name, value in options.items():
            setattr(self, name, value)

    def public(self, waba_id: str) -> dict[str, Any]:
        return {
            "waba_id": waba_id,
            "webhook_url": self.webhook_url,
            # Whether webhooks are signed, never the secret: this endpoint answers anyone.
            "app_secret_set": bool(self.app_secret),
            "default_mps": self.default_mps,
            "delivered_delay": self.delivered_delay,
            "read_delay": self.read_delay,
            "duplicate_rate": self.duplicate_rate,
            "shuffle": self.shuffle,
            "review_delay": self.review_delay,
        }


@dataclass
class Platform:
    state: PlatformState
    settings: Settings
    webhooks: WebhookSender
    stopping: threading.Event  # set while the simulator stops: a send hanging in an outage gives up

    def config(self) -> dict[str, Any]:
        return self.settings.public(self.state.waba_id)
