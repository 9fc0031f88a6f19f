"""The quick-reply buttons of the reminder templates the service declares: their words in each
language, and the payload each reminder gives each button, naming the action and the debt
(`cartera:promise:F-1001`), so a press says which debt it is about (replies.py applies it)."""

from __future__ import annotations

import unicodedata

ACTIONS = ("paid", "promise", "dispute")
# Each language's words for the three buttons, in ACTIONS order (the platform allows 25 characters).
QUICK_REPLIES = {
    "es": ("Ya pagué", "Pagaré en 7 días", "No reconozco"),
    "pt_BR": ("Já paguei", "Pagarei em 7 dias", "Não reconheço"),
    "en": ("I already paid", "I'll pay in 7 days", "I don't recognise this"),
}
PAYLOAD_PREFIX = "cartera"


def folded(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().casefold().strip()


# A button's words, in any language, folded (accents and case aside) -> its action.
ACTION_OF_TEXT = {folded(text): action for texts in QUICK_REPLIES.values()
                  for text, action in zip(texts, ACTIONS, strict=True)}


def quick_reply_buttons(language: str) -> list[dict]:
    """The three quick-reply buttons of a reminder template in `language` (the platform's shape)."""
    return [{"type": "QUICK_REPLY", "text": text} for text in QUICK_REPLIES.get(language, QUICK_REPLIES["en"])]


def press_payload(action: str, debt_external_id: str) -> str:
    return f"{PAYLOAD_PREFIX}:{action}:{debt_external_id}"


def parse_payload(payload: str | None) -> tuple[str, str] | None:
    """(action, debt external id) of a payload this service set, else None."""
    prefix, _, rest = (payload or "").partition(":")
    action, _, external_id = rest.partition(":")
    if prefix != PAYLOAD_PREFIX or action not in ACTIONS or not external_id:
        return None
    return action, external_id
