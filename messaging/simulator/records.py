"""The platform's records: a business account's numbers and its templates, in the shapes the
simulator keeps and serves them; and the built-in business account a new platform starts with."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from messaging.simulator.users import digits

DEFAULT_WABA_ID = "102290129340398"
TIERS = ("TIER_250", "TIER_2K", "TIER_10K", "TIER_100K", "TIER_UNLIMITED")
QUALITY_RATINGS = ("GREEN", "YELLOW", "RED", "UNKNOWN")


class ThroughputWindow:
    """A number's cap, held strictly: at most `rate` sends in any one-second window.

    A sliding log of the last second's acceptances; nothing is banked while the number is idle,
    so there is no burst beyond the cap. (Below one message a second: one per 1/rate seconds.)
    """

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.accepted: deque[float] = deque()

    @property
    def limit(self) -> int:
        return max(1, int(self.rate))

    def take(self) -> bool:
        now = time.monotonic()
        span = self.limit / self.rate  # one second for a whole-number rate
        while self.accepted and now - self.accepted[0] >= span:
            self.accepted.popleft()
        if len(self.accepted) >= self.limit:
            return False
        self.accepted.append(now)
        return True

    def set_rate(self, rate: float) -> None:
        self.rate = rate


@dataclass
class SimNumber:
    id: str
    waba_id: str
    display_phone_number: str
    verified_name: str
    token: str
    bucket: ThroughputWindow
    quality_rating: str = "GREEN"
    messaging_limit_tier: str = "TIER_250"
    synced: set[str] = field(default_factory=set)
    blocked: int | None = None  # 368 or 131042: the business account may send nothing

    def graph_fields(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "display_phone_number": self.display_phone_number,
            "verified_name": self.verified_name,
            "quality_rating": self.quality_rating,
            "messaging_limit_tier": self.messaging_limit_tier,
            "status": "CONNECTED",
            "platform_type": "CLOUD_API",
            "code_verification_status": "VERIFIED",
            "is_on_biz_app": True,
            "throughput": {"level": "STANDARD"},
        }

    def public(self) -> dict[str, Any]:
        return {
            **self.graph_fields(),
            "waba_id": self.waba_id,
            "token": self.token,
            "mps": self.bucket.rate,
        }

    def metadata(self) -> dict[str, str]:
        return {
            "display_phone_number": digits(self.display_phone_number),
            "phone_number_id": self.id,
        }

    def saved(self) -> dict[str, Any]:
        return {
            "id": self.id, "waba_id": self.waba_id, "display_phone_number": self.display_phone_number,
            "verified_name": self.verified_name, "token": self.token, "mps": self.bucket.rate,
            "quality_rating": self.quality_rating, "messaging_limit_tier": self.messaging_limit_tier,
            "synced": sorted(self.synced), "blocked": self.blocked,
        }

    @classmethod
    def restored(cls, saved: dict[str, Any]) -> SimNumber:
        fields = {name: saved[name] for name in ("id", "waba_id", "display_phone_number", "verified_name",
                                                 "token", "quality_rating", "messaging_limit_tier")}
        # A state file written before blocks were kept has no "blocked": the number was not blocked.
        return cls(**fields, bucket=ThroughputWindow(float(saved["mps"])), synced=set(saved["synced"]),
                   blocked=saved.get("blocked"))


def template_id(position: int) -> str:
    """The id of the account's `position`-th template (from 1)."""
    return str(1500000000000000 + position)


def template_record(
    template_id: str,
    name: str,
    language: str,
    status: str,
    category: str,
    components: list[dict[str, Any]],
) -> dict[str, Any]:
    """A template in the Graph shape."""
    return {
        "id": template_id,
        "name": name,
        "language": language,
        "status": status,
        "category": category,
        "parameter_format": "POSITIONAL",
        "quality_score": {"score": "GREEN" if status == "APPROVED" else "UNKNOWN", "date": int(time.time())},
        "components": components,
    }


def declared_buttons(template: dict[str, Any]) -> list[dict[str, Any]]:
    """The buttons a template declares, in order (their index is the one a send names)."""
    return next((c.get("buttons") or [] for c in template["components"] if c.get("type") == "BUTTONS"), [])


def builtin_templates() -> list[dict[str, Any]]:
    """The built-in business account's templates, in the Graph shape."""

    def body(text: str, *example: str) -> dict[str, Any]:
        component: dict[str, Any] = {"type": "BODY", "text": text}
        if example:
            component["example"] = {"body_text": [list(example)]}
        return component

    image_header = {
        "type": "HEADER",
        "format": "IMAGE",
        "example": {"header_handle": ["https://example.com/order.jpg"]},
    }
    rows = [
        ("hello_world", "en_US", "APPROVED", "UTILITY", [body("Hello World")]),
        (
            "payment_reminder",
            "es",
            "APPROVED",
            "UTILITY",
            [body("Hola {{1}}, tu saldo pendiente es {{2}}.", "Ana", "$150.00")],
        ),
        (
            "order_update",
            "en_US",
            "APPROVED",
            "MARKETING",
            [image_header, body("Your order {{1}} has shipped", "#1001")],
        ),
        ("promo_pending", "en_US", "PENDING", "MARKETING", [body("New deals {{1}}", "50% off")]),
    ]
    return [
        template_record(template_id(position), name, language, status, category, components)
        for position, (name, language, status, category, components) in enumerate(rows, start=1)
    ]
