"""The contract's error envelope, and turning every failure into it.

`{success: false, error: {message, code, details}}`; a 429 also carries a top-level `message`
as section 7 shows. Nothing ever answers with a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

import falcon
import orjson

from config.logs import loggable_path
from models.errors import DomainError
from models.store.db import storage_unavailable

log = logging.getLogger("api")

HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "missing_scope",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    411: "length_required",
    413: "payload_too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    422: "validation_failed",
    429: "rate_limited",
    431: "headers_too_large",
    500: "internal_error",
    503: "service_unavailable",
}


class ApiError(Exception):
    """An error answered with the envelope; raised anywhere in a request."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers or {}

    @classmethod
    def from_domain(cls, error: DomainError) -> ApiError:
        return cls(error.status, error.code, error.message, error.details)


def envelope(status: int, code: str, message: str, details: dict[str, Any] | None = None) -> dict:
    body: dict[str, Any] = {
        "success": False,
        "error": {"message": message, "code": code, "details": details or {}},
    }
    if status == 429:
        body["message"] = message
    return body


def render_error(resp: falcon.Response, error: ApiError) -> None:
    resp.status = falcon.code_to_http_status(error.status)
    resp.content_type = falcon.MEDIA_JSON
    resp.data = orjson.dumps(envelope(error.status, error.code, error.message, error.details))
    for name, value in error.headers.items():
        resp.set_header(name, value)


def serialize_falcon_error(req: falcon.Request, resp: falcon.Response, exception: falcon.HTTPError) -> None:
    """Falcon's own errors (unknown route, wrong method, bad headers) in our envelope."""
    status = int(exception.status_code)
    message = exception.description or exception.title or "request failed"
    if status == 404:
        message = f"no route {req.method} {req.path}"
    elif status == 405:
        message = f"{req.method} is not allowed on {req.path}"
    render_error(resp, ApiError(status, HTTP_CODES.get(status, "error"), message))
    for name, value in (exception.headers or {}).items():
        resp.set_header(name, value)


def handle_unexpected(req: falcon.Request, resp: falcon.Response, exception: Exception, params) -> None:
    if isinstance(exception, ApiError):
        render_error(resp, exception)
        return
    if isinstance(exception, DomainError):
        render_error(resp, ApiError.from_domain(exception))
        return
    if storage_unavailable(exception):
        # A retryable condition, not a bug: 503 with Retry-After rather than 500.
        log.warning("storage unavailable on %s %s: %s", req.method, loggable_path(req.path), exception)
        render_error(resp, ApiError(503, "service_unavailable", "the service's storage is unavailable; retry shortly",
                                    headers={"Retry-After": "5"}))
        return
    log.exception("unhandled error on %s %s", req.method, loggable_path(req.path))
    render_error(resp, ApiError(500, "internal_error", "internal error; the request was not completed"))


def validation_error(errors: dict[str, list[str]], message: str = "The given data was invalid.") -> ApiError:
    return ApiError(422, "validation_failed", message, {"errors": errors})
