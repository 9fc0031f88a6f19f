"""The platform's users as the simulator makes them up.

Every phone number has a stable business-scoped user id (`user_id_for`); a send may name the user
by `to` (phone) or `recipient` (business-scoped id); webhooks carry `user_id` and a `contacts`
entry (statuses too), `wa_id` only for users who share their phone, and a username for users whose
key ends in 7. A username user without a phone is named by `user_id` alone.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from typing import Any

from messaging.simulator.errors import ControlError

BSUID = re.compile(r"^[A-Z]{2}\.(?:ENT\.)?[A-Za-z0-9]{1,128}$")


def digits(value: str) -> str:
    return "".join(ch for ch in value if ch.isdigit())


def user_id_for(wa_id: str) -> str:
    """The simulated business-scoped user id of a phone number: stable, and ending in the
    number's last four digits so the behaviours by suffix hold for it too."""
    digest = hashlib.sha256(f"bsuid:{wa_id}".encode()).hexdigest()
    return f"US.{int(digest[:12], 16):015d}{wa_id[-4:]}"


def username_for(key: str) -> str | None:
    """About one simulated user in ten (key ending in 7) has a username."""
    key_digits = digits(key)
    return f"@user{key_digits[-6:]}" if key_digits.endswith("7") else None


def contact_entry(wa_id: str | None, user_id: str, name: str | None = None) -> dict[str, Any]:
    """A `contacts` entry as the platform sends it: `wa_id` only when the user shares it."""
    profile: dict[str, Any] = {"name": name or "Sim Customer"}
    username = username_for(user_id if wa_id is None else wa_id)
    if username:
        profile["username"] = username
    contact: dict[str, Any] = {"profile": profile, "user_id": user_id}
    if wa_id:
        contact["wa_id"] = wa_id
    return contact


def user_ids(wa_id: str | None, user_id: str | None) -> tuple[str | None, str]:
    """A simulated user named to a control endpoint by phone number, business-scoped id or both."""
    if wa_id is None and user_id is None:
        raise ControlError(400, "from (a phone number) or user_id is required")
    if user_id is not None and not BSUID.match(user_id):
        raise ControlError(400, f"user_id {user_id!r} is not a business-scoped user id (CC.digits)")
    wa_id = digits(wa_id) if wa_id else None
    return wa_id, user_id or user_id_for(wa_id or "")


def new_wamid(to: str) -> str:
    """A message id in a chat with `to` (a phone, or a business-scoped id's digits)."""
    raw = f"{to[-12:]}{secrets.token_hex(10).upper()}".encode()
    return "wamid.HBgL" + base64.b64encode(raw).decode().rstrip("=")


def business_app_contacts(phone_number_id: str) -> list[tuple[str, str]]:
    """The simulated business app's contacts of a number: (phone, name), stable per number."""
    base = phone_number_id[-6:]
    return [(f"52155{base}{i}1", f"App Contact {i}") for i in range(1, 4)]
