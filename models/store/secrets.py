"""Secrets at rest (platform tokens, webhook signing secrets, gateway credentials), encrypted
with SVC_SECRET_KEY.

SVC_SECRET_KEY may list several keys: the first encrypts, every one decrypts (MultiFernet), so
a new key can be put first while what is stored is re-encrypted (models/operations/rotation.py).

A column that holds ciphertexts is declared as `EncryptedText`, which is how rotation finds it.
"""

from __future__ import annotations

import functools

from cryptography.fernet import Fernet, MultiFernet
from peewee import TextField

from config import get_settings


class EncryptedText(TextField):
    """A column holding Fernet tokens (or, where documented, plain text beside them)."""


@functools.lru_cache(maxsize=4)
def _fernets(keys: tuple[str, ...]) -> tuple[MultiFernet, Fernet]:
    fernets = [Fernet(key.encode()) for key in keys]
    return MultiFernet(fernets), fernets[0]


def _keys() -> tuple[str, ...]:
    settings = get_settings()
    return settings.secret_keys or (settings.secret_key,)


def configured_keys() -> tuple[MultiFernet, Fernet]:
    """Every configured key (each one decrypts), and the first one (it encrypts)."""
    return _fernets(_keys())


def encrypt(plaintext: str) -> str:
    return configured_keys()[0].encrypt(plaintext.encode()).decode()


def decrypt(ciphertext: str) -> str:
    return configured_keys()[0].decrypt(ciphertext.encode()).decode()
