"""Graph API client for the messaging platform (WhatsApp Cloud API subset).

One `GraphClient` per process: it holds one keep-alive connection pool for the platform's origin
(`messaging.transport`: proxy and verified TLS settings worked out once), safe to share between
threads. Each phone number has its own access token, so the token is an argument of every call
rather than client state. Every call is bounded by `timeout` and never retried here: the caller
decides, using the typed errors of `messaging.errors`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson
import requests
from prometheus_client import Counter, Histogram

from messaging import payloads
from messaging.errors import (
    PermanentPlatformError,
    PlatformError,
    PlatformUnavailableError,
    error_from_exception,
    error_from_response,
)
from messaging.transport import Transport

PHONE_NUMBER_FIELDS = (
    "display_phone_number,verified_name,quality_rating,messaging_limit_tier,"
    "status,platform_type,code_verification_status"
)
TEMPLATE_FIELDS = "id,name,language,status,category,quality_score,components"
USER_AGENT = f"messaging-graph-client requests/{requests.__version__}"

_PLACEHOLDER = re.compile(r"\{\{\s*(\d+)\s*\}\}")

# The Graph API version spoken by default: each version is served about two years (v21.0 ends on
# 2027-01-21). SVC_GRAPH_VERSION overrides it.
GRAPH_VERSION = "v26.0"

# Every Graph call, by what it was for (the last path segment: "messages" is a send), its outcome,
# the typed error's class and the platform's code (130429: the number's throughput throttle).
_OPERATIONS = frozenset({"messages", "message_templates", "access_token", "subscribed_apps", "smb_app_data"})
GRAPH_REQUESTS = Counter("svc_graph_requests_total", "Graph API calls by operation, outcome, error class and code",
                         ["operation", "outcome", "error_class", "code"])
NUMBER_SENDS = Counter("svc_number_sends_total", "Messages the platform accepted, by sending phone number id",
                       ["number"])
GRAPH_SECONDS = Histogram("svc_graph_request_duration_seconds", "Time a Graph API call took", ["operation"],
                          buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))


def _operation_of(path: str) -> str:
    last = path.rsplit("/", 1)[-1]
    return last if last in _OPERATIONS else "phone_number"


# The metric children of the calls that succeed, looked up once per operation, not per call.
_SUCCEEDED: dict[str, Any] = {}
_SECONDS: dict[str, Any] = {}
_NUMBER_SENDS: dict[str, Any] = {}


def _succeeded(operation: str):
    child = _SUCCEEDED.get(operation)
    if child is None:
        child = _SUCCEEDED[operation] = GRAPH_REQUESTS.labels(operation, "ok", "none", "none")
    return child


def _number_sends(phone_number_id: str):
    child = _NUMBER_SENDS.get(phone_number_id)
    if child is None:
        if len(_NUMBER_SENDS) >= 4096:
            _NUMBER_SENDS.clear()
        child = _NUMBER_SENDS[phone_number_id] = NUMBER_SENDS.labels(phone_number_id)
    return child


def _seconds(operation: str):
    child = _SECONDS.get(operation)
    if child is None:
        child = _SECONDS[operation] = GRAPH_SECONDS.labels(operation)
    return child


class GraphClient:
    def __init__(
        self,
        base_url: str,
        version: str = GRAPH_VERSION,
        app_id: str | None = None,
        app_secret: str | None = None,
        timeout: tuple[float, float] = (3.05, 10),
        pool_size: int = 64,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.version = version
        self.app_id = app_id
        self.app_secret = app_secret
        self.timeout = timeout
        parts = urlsplit(self.base_url)
        # One pool, as large as the most calls the client makes at once (the sending engine's
        # threads): every call finds a kept-alive connection and none is opened only to be dropped.
        self.transport = Transport(f"{parts.scheme}://{parts.netloc}", timeout=timeout, pool_size=pool_size)
        self._paths: dict[str, str] = {}  # Graph path -> the request's path and query, as requests quotes it

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> GraphClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send_message(self, phone_number_id: str, token: str, payload: Mapping[str, Any]) -> str:
        """Send one message; return its wamid once the platform accepted it."""
        body = self._request("POST", f"{phone_number_id}/messages", token, payload=payload)
        try:
            wamid = str(body["messages"][0]["id"])
        except (KeyError, IndexError, TypeError):
            # Accepted (HTTP 200) yet no id: retrying could send it twice.
            raise PermanentPlatformError(
                "platform accepted the message but returned no message id",
                details={"body": body},
            ) from None
        _number_sends(phone_number_id).inc()
        return wamid

    def mark_read(self, phone_number_id: str, token: str, message_wamid: str, typing: bool = False) -> None:
        """Mark an inbound message read, with a typing indicator when `typing` (up to 25 s or the reply)."""
        self._request("POST", f"{phone_number_id}/messages", token, payload=payloads.mark_read(message_wamid, typing))

    def list_templates(self, waba_id: str, token: str, limit: int = 100) -> Iterator[dict[str, Any]]:
        """Yield every template of the business account, following the cursor pages."""
        params: dict[str, Any] = {"limit": limit, "fields": TEMPLATE_FIELDS}
        while True:
            page = self._request("GET", f"{waba_id}/message_templates", token, params=params)
            yield from page.get("data") or []
            paging = page.get("paging") or {}
            after = (paging.get("cursors") or {}).get("after")
            # The last page may still carry cursors; only `next` says there is more.
            if not paging.get("next") or not after:
                return
            params = {**params, "after": after}

    def create_template(self, waba_id: str, token: str, template: Mapping[str, Any]) -> dict[str, Any]:
        """Submit a template for review: `{id, status, category}` as the platform answers."""
        return self._request("POST", f"{waba_id}/message_templates", token, payload=template)

    def delete_template(self, waba_id: str, token: str, name: str) -> None:
        """Delete every language of the template `name` from the business account."""
        self._request("DELETE", f"{waba_id}/message_templates", token, params={"name": name})

    def exchange_code(self, code: str) -> str:
        """Trade an embedded-signup code for the business's access token."""
        if not self.app_id or not self.app_secret:
            raise ValueError("exchange_code needs app_id and app_secret")
        params = {"client_id": self.app_id, "client_secret": self.app_secret, "code": code}
        body = self._request("GET", "oauth/access_token", None, params=params)
        token = body.get("access_token")
        if not token:
            raise PermanentPlatformError("token exchange returned no access_token", details=body)
        return str(token)

    def subscribe_app(self, waba_id: str, token: str) -> None:
        """Subscribe this app to the business account's webhooks."""
        self._request("POST", f"{waba_id}/subscribed_apps", token)

    def get_phone_number(self, phone_number_id: str, token: str) -> dict[str, Any]:
        return self._request(
            "GET", phone_number_id, token, params={"fields": PHONE_NUMBER_FIELDS}
        )

    def phone_number_ids(self, waba_id: str, token: str) -> set[str]:
        """The ids of the business account's numbers, as the token may see them (an error when the
        token has no access to that business account)."""
        body = self._request("GET", f"{waba_id}/phone_numbers", token, params={"fields": "id", "limit": 100})
        return {str(item["id"]) for item in body.get("data") or [] if isinstance(item, dict) and "id" in item}

    def sync_contacts(self, phone_number_id: str, token: str) -> str | None:
        """Coexistence: ask for the business app's contacts (allowed once per number)."""
        return self._smb_app_data(phone_number_id, token, "smb_app_state_sync")

    def sync_history(self, phone_number_id: str, token: str) -> str | None:
        """Coexistence: ask for the business app's chat history (allowed once per number)."""
        return self._smb_app_data(phone_number_id, token, "history")

    def _smb_app_data(self, phone_number_id: str, token: str, sync_type: str) -> str | None:
        body = self._request(
            "POST",
            f"{phone_number_id}/smb_app_data",
            token,
            payload={"messaging_product": "whatsapp", "sync_type": sync_type},
        )
        request_id = body.get("request_id")
        return str(request_id) if request_id is not None else None

    def _request(self, method: str, path: str, token: str | None, **options: Any) -> dict[str, Any]:
        operation = _operation_of(path)
        started = time.perf_counter()
        try:
            body = self._call(method, path, token, **options)
        except PlatformError as error:
            GRAPH_REQUESTS.labels(operation, "error", type(error).__name__,
                                  str(error.code) if error.code is not None else "none").inc()
            raise
        finally:
            _seconds(operation).observe(time.perf_counter() - started)
        _succeeded(operation).inc()
        return body

    def _path_url(self, path: str, params: Mapping[str, Any] | None) -> str:
        """The request line's path and query, quoted as `requests` quotes them; kept per path
        without a query (a send's path is the same for every message of a number)."""
        if params is None:
            known = self._paths.get(path)
            if known is not None:
                return known
        request = requests.PreparedRequest()
        request.prepare_url(f"{self.base_url}/{self.version}/{path}", params)
        path_url = request.path_url
        if params is None:
            if len(self._paths) >= 4096:  # a path per number: a few thousand at most
                self._paths.clear()
            self._paths[path] = path_url
        return path_url

    def _call(
        self,
        method: str,
        path: str,
        token: str | None,
        *,
        params: Mapping[str, Any] | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if payload is not None:
            headers["Content-Type"] = "application/json"
            data = orjson.dumps(payload)
        if method != "GET":
            headers["Content-Length"] = str(len(data) if data is not None else 0)
        try:
            status, content = self.transport.request(method, self._path_url(path, params), headers, data)
        except requests.RequestException as exc:
            raise error_from_exception(exc) from None
        try:
            body = json.loads(content) if content else None
        except ValueError:
            body = None
        if status >= 400 or (isinstance(body, dict) and "error" in body):
            raise error_from_response(status, body if body is not None else content)
        if not isinstance(body, dict):
            # Possibly accepted: the answer is lost, exactly as after a read timeout.
            raise PlatformUnavailableError(
                f"platform answered HTTP {status} with a body that is not JSON",
                ambiguous=True,
            )
        return body


def template_variable_count(body_text: str | None) -> int:
    """Distinct positional placeholders (`{{1}}`, `{{2}}`, ...) in a template body."""
    return len(set(_PLACEHOLDER.findall(body_text or "")))


def template_from_graph(item: Mapping[str, Any]) -> dict[str, Any]:
    """Normalize a Graph template into the service's shape."""
    components = list(item.get("components") or [])
    body = _component(components, "BODY")
    header = _component(components, "HEADER")
    body_text = body.get("text") if body else None
    numbers = sorted({int(n) for n in _PLACEHOLDER.findall(body_text or "")})
    examples = _body_examples(body)
    quality = item.get("quality_score")
    if isinstance(quality, Mapping):
        quality = quality.get("score")
    return {
        "id": str(item["id"]) if item.get("id") is not None else None,
        "name": item.get("name"),
        "language": item.get("language"),
        "status": str(item.get("status") or "").lower() or None,
        "category": item.get("category"),
        "quality_score": quality,
        "body_text": body_text,
        "header_type": str(header["format"]).lower() if header and header.get("format") else None,
        "variable_count": len(numbers),
        "variables": [
            {"index": n, "example": examples[n - 1] if n - 1 < len(examples) else None}
            for n in numbers
        ],
        "components": components,
    }


def _component(components: list[Any], kind: str) -> dict[str, Any] | None:
    for component in components:
        if isinstance(component, Mapping) and str(component.get("type", "")).upper() == kind:
            return dict(component)
    return None


def _body_examples(body: Mapping[str, Any] | None) -> list[str]:
    # Graph shape: "example": {"body_text": [["Ana", "$10"]]}
    example = (body or {}).get("example") or {}
    rows = example.get("body_text") if isinstance(example, Mapping) else None
    if isinstance(rows, list) and rows and isinstance(rows[0], list):
        return [str(value) for value in rows[0]]
    return []
