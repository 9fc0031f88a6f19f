"""The simulator's two kinds of error: Graph's envelope on the Graph API, a plain one on `/_sim/`."""

from __future__ import annotations

import secrets
from typing import Any


class GraphError(Exception):
    """An error the simulator answers in the Graph envelope."""

    def __init__(
        self,
        http_status: int,
        code: int,
        message: str,
        details: str | None = None,
        subcode: int | None = None,
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.code = code
        self.message = message
        self.details = details
        self.subcode = subcode

    def envelope(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "message": self.message,
            "type": "OAuthException",
            "code": self.code,
        }
        if self.details is not None:
            error["error_data"] = {"messaging_product": "whatsapp", "details": self.details}
        if self.subcode is not None:
            error["error_subcode"] = self.subcode
        error["fbtrace_id"] = secrets.token_urlsafe(16)
        return {"error": error}


class ControlError(Exception):
    """A bad request to a `/_sim/` endpoint."""

    def __init__(self, http_status: int, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.message = message


def error_response(exc: GraphError | ControlError) -> tuple[int, Any]:
    if isinstance(exc, GraphError):
        return exc.http_status, exc.envelope()
    return exc.http_status, {"error": {"message": exc.message}}
