"""Embedded signup in coexistence mode, as the platform runs it for the service.

1. The business signs up (`POST /_sim/signup`: the service asks for it when the `connect`
   button of its onboarding page is pressed in simulator mode): a new number on the built-in
   business account, and a one-time code.
2. The service exchanges the code for the number's token (`GET /oauth/access_token`); a code
   works once. A business that reconnects gets a fresh code for its number (`new_code`).
3. The service subscribes its app to the account's webhooks (`/{waba_id}/subscribed_apps`).
4. It asks for the business app's contacts and chats (`POST /{phone_number_id}/smb_app_data`),
   each sync type once per number; they arrive as webhooks.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from messaging.simulator.errors import GraphError
from messaging.simulator.platform import Platform
from messaging.simulator.records import SimNumber, ThroughputWindow
from messaging.simulator.state import PlatformState
from messaging.simulator.webhook_values import business_app_sync

SYNC_TYPES = ("smb_app_state_sync", "history")


def signup(
    platform: Platform,
    display_phone_number: str | None = None,
    verified_name: str | None = None,
    mps: float | None = None,
) -> dict[str, str]:
    """Simulate embedded signup: a new coexistence number and a one-time code."""
    state = platform.state
    with state.lock:
        state.serial += 1
        serial = state.serial
        number = SimNumber(
            id=str(106540352242000 + serial),
            waba_id=state.waba_id,
            display_phone_number=display_phone_number or f"+1 555-010-{serial:04d}",
            verified_name=verified_name or f"Sim Business {serial}",
            token="EAAG" + secrets.token_hex(24),
            bucket=ThroughputWindow(float(mps) if mps is not None else platform.settings.default_mps),
        )
        code = _new_code()
        state.numbers[number.id] = number
        state.tokens[number.token] = number.id
        state.codes[code] = number.token
        state.changed = True
    return {
        "code": code,
        "waba_id": number.waba_id,
        "phone_number_id": number.id,
        "display_phone_number": number.display_phone_number,
    }


def new_code(state: PlatformState, phone_number_id: str) -> str:
    """A fresh one-time code for a number the simulator has (the business reconnects it)."""
    number = state.known_number(phone_number_id)
    code = _new_code()
    with state.lock:
        state.codes[code] = number.token
        state.changed = True
    return code


def exchange_code(platform: Platform, query: Mapping[str, str]) -> dict[str, Any]:
    """`GET /oauth/access_token?client_id&client_secret&code`: the number's token, once."""
    secret = query.get("client_secret")
    app_secret = platform.settings.app_secret
    if app_secret and secret and secret != app_secret:
        raise GraphError(400, 1, "Error validating client secret.", subcode=404)
    code = query.get("code", "")
    state = platform.state
    with state.lock:
        if code not in state.codes:
            raise GraphError(400, 100, "Invalid verification code format.", subcode=36007)
        token = state.codes[code]
        if token is None:
            raise GraphError(400, 100, "This authorization code has been used.", subcode=36009)
        state.codes[code] = None
        state.changed = True
    return {"access_token": token, "token_type": "bearer"}


def subscribed_apps(state: PlatformState, method: str) -> dict[str, Any]:
    """`POST /{waba_id}/subscribed_apps` subscribes the app; `GET` lists it once subscribed."""
    if method == "POST":
        with state.lock:
            state.subscribed = True
            state.changed = True
        return {"success": True}
    with state.lock:
        subscribed = state.subscribed
    app = {"whatsapp_business_api_data": {"id": "1000000000001", "name": "Simulator App"}}
    return {"data": [app] if subscribed else []}


def sync(platform: Platform, number: SimNumber, body: Any) -> dict[str, Any]:
    """`POST /{phone_number_id}/smb_app_data`: the business app's contacts or chats, posted as
    webhooks; each sync type runs once per number."""
    sync_type = body.get("sync_type") if isinstance(body, dict) else None
    if sync_type not in SYNC_TYPES:
        raise GraphError(400, 100, "(#100) Invalid parameter", details="sync_type is invalid")
    with platform.state.lock:
        if sync_type in number.synced:
            raise GraphError(
                400, 100, "(#100) Invalid parameter",
                details=f"{sync_type} was already requested for this phone number; "
                "it can run only once",
            )
        number.synced.add(sync_type)
        platform.state.changed = True
    for value in business_app_sync(number, sync_type):
        platform.webhooks.post_later(number.waba_id, sync_type, value)
    return {"messaging_product": "whatsapp", "request_id": secrets.token_hex(16)}


def _new_code() -> str:
    return "simcode-" + secrets.token_urlsafe(24)
