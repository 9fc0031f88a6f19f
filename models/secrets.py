"""Secrets at rest (platform tokens, webhook signing secrets), encrypted with SVC_SECRET_KEY."""

from __future__ import annotations

import functools

from cryptography.fernet import Fernet

from config import get_settings


@functools.lru_cache(maxsize=4)
def _fernet(key: str) -> Fernet:
    return Fernet(key.encode())


def encrypt(plaintext: str) -> str:
    return _fernet(get_settings().secret_key).encrypt(plaintext.encode()).decode()


def decrypt(ciphertext: str) -> str:
    return _fernet(get_settings().secret_key).decrypt(ciphertext.encode()).decode()
