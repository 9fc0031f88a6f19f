"""Public ids: a resource prefix and 24 random base62 characters (about 143 bits)."""

import secrets
import string

_ALPHABET = string.ascii_letters + string.digits


def new_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(24))
