"""A business account's phone numbers: what Graph says of them (`GET /{phone_number_id}`,
`GET /{waba_id}/phone_numbers`), and the cap, quality, tier and block `POST /_sim/numbers/{id}`
gives one, a quality or tier change notified as the platform does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from messaging.simulator.errors import ControlError
from messaging.simulator.platform import Platform
from messaging.simulator.records import QUALITY_RATINGS, TIERS, SimNumber
from messaging.simulator.state import PlatformState
from messaging.simulator.webhook_values import quality_update


def number_fields(state: PlatformState, number: SimNumber, query: Mapping[str, str]) -> dict[str, Any]:
    """`GET /{phone_number_id}`: every field, or the `fields` asked for."""
    with state.lock:
        fields = number.graph_fields()
    wanted = [name for name in query.get("fields", "").split(",") if name]
    if not wanted:
        return fields
    return {"id": number.id, **{name: fields[name] for name in wanted if name in fields}}


def account_numbers(state: PlatformState) -> dict[str, Any]:
    """`GET /{waba_id}/phone_numbers`."""
    with state.lock:
        return {"data": [number.graph_fields() for number in state.numbers.values()]}


def every_number(state: PlatformState) -> list[dict[str, Any]]:
    """Every number with its token and cap (the control endpoint leaves the tokens out)."""
    with state.lock:
        return [number.public() for number in state.numbers.values()]


def set_number(
    platform: Platform,
    phone_number_id: str,
    mps: float | None = None,
    quality_rating: str | None = None,
    messaging_limit_tier: str | None = None,
    blocked: int | None | bool = False,
) -> dict[str, Any]:
    """Change a number's cap, quality, tier or block (368, 131042, or None to lift it; False
    leaves it); quality and tier changes are notified."""
    if blocked not in (False, None, 368, 131042):
        raise ControlError(400, "blocked must be 368, 131042 or null")
    if quality_rating is not None and quality_rating not in QUALITY_RATINGS:
        raise ControlError(400, f"quality_rating must be one of {', '.join(QUALITY_RATINGS)}")
    if messaging_limit_tier is not None and messaging_limit_tier not in TIERS:
        raise ControlError(400, f"messaging_limit_tier must be one of {', '.join(TIERS)}")
    if mps is not None and not float(mps) > 0:
        raise ControlError(400, "mps must be positive")
    state = platform.state
    with state.lock:
        number = state.numbers.get(phone_number_id)
        if number is None:
            raise ControlError(404, f"unknown phone number {phone_number_id}")
        event = _quality_event(number, quality_rating, messaging_limit_tier)
        if mps is not None:
            number.bucket.set_rate(float(mps))
        number.quality_rating = quality_rating or number.quality_rating
        number.messaging_limit_tier = messaging_limit_tier or number.messaging_limit_tier
        if blocked is not False:
            number.blocked = blocked
        result = number.public()
        state.changed = True
    if event is not None:
        platform.webhooks.post_later(number.waba_id, "phone_number_quality_update", quality_update(number, event))
    return result


def _quality_event(number: SimNumber, quality_rating: str | None, tier: str | None) -> str | None:
    if tier is not None and tier != number.messaging_limit_tier:
        return "UPGRADE" if TIERS.index(tier) > TIERS.index(number.messaging_limit_tier) \
            else "DOWNGRADE"
    if quality_rating is not None and quality_rating != number.quality_rating:
        if quality_rating == "RED":
            return "FLAGGED"
        if number.quality_rating == "RED":
            return "UNFLAGGED"
    return None
