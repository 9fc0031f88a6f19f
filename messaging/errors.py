"""Typed errors for calls to the messaging platform (Graph API).

The split that matters to callers is retryable / permanent:

- `RetryablePlatformError`: the same request may succeed later (throttling, platform
  hiccups, HTTP 5xx, timeouts, connection errors). `ThrottledError` is the throttling
  subset, where the caller should slow down rather than just try again.
- `PermanentPlatformError`: retrying the same request will fail again (bad recipient,
  invalid parameter, expired token, closed 24 h window, ...).

The platform answers most errors, throttling included, with HTTP 400 and tells them apart
by `error.code`, so the code decides first and the HTTP status only fills in when the body
carries no usable code.
"""

from __future__ import annotations

import json
import re
from typing import Any

import requests
from urllib3.exceptions import NewConnectionError

# Throughput per number (130429), pair rate (131056), spam rate (131048), the business account
# in maintenance mode (131057), and the application / business-account API call limits (4, 80007).
THROTTLE_CODES = frozenset({4, 80007, 130429, 131048, 131056, 131057})
# 2 "API Service" (temporary downtime or overload), 131000 "Something went wrong" and
# 131016 "Service unavailable". Not 1 "API Unknown": the platform also uses it for
# errors that never pass, such as a wrong client secret.
TRANSIENT_CODES = frozenset({2, 131000, 131016})
RETRYABLE_CODES = THROTTLE_CODES | TRANSIENT_CODES

PAIR_RATE_LIMIT_CODE = 131056


class PlatformError(Exception):
    """An error reported by (or while reaching) the messaging platform."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        http_status: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status
        # The rest of the Graph envelope: type, error_subcode, error_data, fbtrace_id.
        self.details: dict[str, Any] = details or {}

    def __str__(self) -> str:
        parts = [self.message]
        if self.code is not None:
            parts.append(f"code={self.code}")
        if self.http_status is not None:
            parts.append(f"http={self.http_status}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(message={self.message!r}, code={self.code!r}, "
            f"http_status={self.http_status!r})"
        )


class RetryablePlatformError(PlatformError):
    retryable = True


class PermanentPlatformError(PlatformError):
    retryable = False


class ThrottledError(RetryablePlatformError):
    """The platform asks the caller to slow down.

    `pair_rate_limited` is true for 131056: too many messages from this number to the
    same recipient; the other recipients of the number are not affected.
    """

    @property
    def pair_rate_limited(self) -> bool:
        return self.code == PAIR_RATE_LIMIT_CODE


class PlatformUnavailableError(RetryablePlatformError):
    """No usable answer came back: timeout, refused or dropped connection.

    `ambiguous` is true when the request may have reached the platform (read timeout,
    connection dropped after sending): a send may have been accepted even though the
    caller never saw the message id, so a retry can duplicate it.
    """

    def __init__(self, message: str, *, ambiguous: bool) -> None:
        super().__init__(message)
        self.ambiguous = ambiguous


def error_from_response(http_status: int | None, body: Any) -> PlatformError:
    """Build the typed error for a failed Graph API response.

    `body` may be the decoded JSON, raw bytes / text, or None. The Graph envelope is
    `{"error": {"message", "type", "code", "error_subcode", "error_data": {"details"},
    "fbtrace_id"}}`.
    """
    envelope = _error_envelope(body)
    code = _as_int(envelope.get("code"))
    message = str(envelope.get("message") or _default_message(http_status))
    details: dict[str, Any] = {k: v for k, v in envelope.items() if k not in ("code", "message")}
    error_data = envelope.get("error_data")
    if isinstance(error_data, dict) and "details" in error_data:
        details["details"] = error_data["details"]

    kwargs: dict[str, Any] = {"code": code, "http_status": http_status, "details": details}
    if code in THROTTLE_CODES or (code is None and http_status == 429):
        return ThrottledError(message, **kwargs)
    if code in TRANSIENT_CODES or (http_status is not None and http_status >= 500):
        return RetryablePlatformError(message, **kwargs)
    return PermanentPlatformError(message, **kwargs)


def error_from_exception(exc: requests.RequestException) -> PlatformUnavailableError:
    """Wrap a transport failure from `requests` as a retryable platform error.

    The transport's own text quotes the request's URL, whose query may carry the app secret and
    a signup code (the code exchange): the message keeps the URL without it, and the original
    exception is not chained, so no traceback prints it either. Raise it `from None`.
    """
    kind = "timeout" if isinstance(exc, requests.Timeout) else "connection error"
    return PlatformUnavailableError(f"platform {kind}: {without_url_secrets(str(exc))}",
                                    ambiguous=not _never_sent(exc))


# A URL's secret parts: the user information before the host, and the query (and fragment),
# whether the URL is whole or a path as urllib3 quotes it ("... with url: /v21.0/x?secret=...").
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"<>]*@")
_QUERY = re.compile(r"(?<=[^\s?'\"(<])[?#][^\s'\"()<>]+")


def without_url_secrets(text: str) -> str:
    """`text` with every URL's query, fragment and user information cut out: error text that is
    stored or logged never carries a secret sent in a URL."""
    return _QUERY.sub("?…", _USERINFO.sub(r"\1…@", text))


def _never_sent(exc: requests.RequestException) -> bool:
    """Only a failed connect proves the request never left this machine."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if isinstance(exc, requests.ConnectionError) and not isinstance(exc, requests.Timeout):
        # requests wraps urllib3's NewConnectionError (refused, DNS) in a MaxRetryError.
        reason = getattr(exc.args[0], "reason", None) if exc.args else None
        return isinstance(reason, NewConnectionError)
    return False


def _error_envelope(body: Any) -> dict[str, Any]:
    if isinstance(body, (bytes, bytearray, str)):
        try:
            body = json.loads(body)
        except ValueError:
            return {}
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"]
    return {}


def _as_int(value: Any) -> int | None:
    # Some intermediaries send the code as a string ("131056").
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _default_message(http_status: int | None) -> str:
    return f"platform answered HTTP {http_status}" if http_status else "platform error"
