"""Errors raised by domain operations, carrying the contract's stable code.

The API renders them in the error envelope with `status`; the CLI prints `message` on one line.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    status = 422
    code = "validation_failed"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.details = details or {}


class NotFound(DomainError):
    status = 404
    code = "not_found"


class Conflict(DomainError):
    status = 409
    code = "conflict"


class Invalid(DomainError):
    status = 422
    code = "validation_failed"


class InsufficientCredits(Invalid):
    code = "insufficient_credits"


class WalletPaused(Invalid):
    code = "wallet_paused"
