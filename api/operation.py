"""`@operation`: one declaration per responder that drives both the request pipeline and OpenAPI.

A request goes through, in order:
1. the body-size cap (413), before anything is read;
2. authentication and the IP allow-list (401), then the scope (403);
3. the rate limits (429), with RateLimit-* headers from here on;
4. the body, read once and bounded; the Idempotency-Key's lookup (replay or 409);
5. validation of the body against the declared schema (422);
6. the handler, whose first commit writes the key's record, and whose reply (or domain error) is
   rendered and, when replayable, stored.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import falcon
import orjson
import pydantic

from api import ratelimit
from api.auth import authenticate, require_scope
from api.errors import ApiError, render_error, validation_error
from config.settings import MAX_BODY_BYTES
from models.errors import DomainError
from models.store import secrets
from models.tenancy import idempotency

MAX_IDEMPOTENCY_KEY = 255
REPLAY_HEADER = "X-Service-Idempotent-Replay"
# Stored for replay: every answer below 500 except these, which say nothing about the operation.
NOT_REPLAYED = {401, 403, 413, 429}
# Methods whose request carries a body and may carry an Idempotency-Key.
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# A JSON `\u0000` escape (an odd run of backslashes before it): PostgreSQL text cannot hold NUL,
# so it is refused for every body rather than failing on some engines only.
_NUL_ESCAPE = re.compile(rb"(?:^|[^\\])(?:\\\\)*\\u0000")


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    # A body that is no JSON document (a CSV export): written as it is produced, with this type.
    stream: Iterable[bytes] | None = None
    media_type: str | None = None
    # A JSON body encoded once and answered as it is (a document that is the same on every request).
    encoded: bytes | None = None


def ok(data: Any, status: int = 200, **extra) -> Reply:
    return Reply(status, {"success": True, "data": data, **extra})


@dataclass
class Operation:
    summary: str
    scope: str | None
    body: type[pydantic.BaseModel] | None = None
    responses: dict[int, Any] = field(default_factory=dict)
    errors: tuple[int, ...] = ()
    rate_limit: int | None = None
    receivables: bool = False  # the area's rules: Idempotency-Key required, its own conflict code
    query: tuple[tuple[str, dict, str], ...] = ()
    tags: tuple[str, ...] = ()
    description: str | None = None
    # The response holds a secret shown once (a signing secret): its copy kept for idempotent
    # replay is encrypted at rest like the secret itself.
    secret_response: bool = False
    # The handler calls another service (the platform, the gateway) before its first commit: its
    # Idempotency-Key is claimed before it runs, so a concurrent duplicate never calls out too.
    calls_out_first: bool = False


def operation(summary: str, *, scope: str | None, body=None, responses=None, errors=(),
              rate_limit=None, receivables=False, query=(), tags=(), description=None, secret_response=False,
              calls_out_first=False):
    """Declare a responder. `scope=None` makes it public; `scope=""` needs a key but no scope.

    The handler returns a `Reply`; domain errors raised inside it are rendered in the envelope.
    """
    op = Operation(summary, scope, body, responses or {}, tuple(errors), rate_limit, receivables,
                   tuple(query), tuple(tags), description, secret_response, calls_out_first)

    def decorate(handler: Callable) -> Callable:
        @functools.wraps(handler)
        def responder(resource, req: falcon.Request, resp: falcon.Response, **params):
            _run(op, handler, resource, req, resp, params)

        responder.__operation__ = op  # type: ignore[attr-defined]
        return responder

    return decorate


def read_body(req: falcon.Request) -> bytes:
    """The request's body, at most MAX_BODY_BYTES of it (413 past that), sized or chunked."""
    if req.content_length is not None and req.content_length > MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", f"request bodies are limited to {MAX_BODY_BYTES} bytes")
    # Falcon's bounded stream counts on Content-Length and reads nothing without it; a chunked
    # body's end is known to the server's input stream instead.
    chunked = "chunked" in (req.get_header("Transfer-Encoding") or "").lower()
    raw = (req.stream if chunked else req.bounded_stream).read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", f"request bodies are limited to {MAX_BODY_BYTES} bytes")
    return raw


def _field_path(location: tuple) -> str:
    return ".".join(str(part) for part in location) or "body"


def validate(model: type[pydantic.BaseModel], raw: bytes) -> pydantic.BaseModel:
    if _NUL_ESCAPE.search(raw):
        raise validation_error({"body": ["strings may not contain NUL (\\u0000) characters"]})
    try:
        return model.model_validate_json(raw or b"null")
    except pydantic.ValidationError as error:
        errors: dict[str, list[str]] = {}
        for item in error.errors(include_url=False, include_context=False, include_input=False):
            if item["type"] == "json_invalid":
                errors.setdefault("body", []).append("the body is not valid JSON")
            elif item["type"] == "model_type" and not item["loc"]:
                errors.setdefault("body", []).append("the body must be a JSON object")
            else:
                errors.setdefault(_field_path(item["loc"]), []).append(item["msg"])
        raise validation_error(errors) from None


def _idempotency_key(req: falcon.Request, op: Operation) -> str | None:
    key = req.get_header("Idempotency-Key")
    if key is None or not key.strip():
        if op.receivables:
            raise ApiError(422, "idempotency_key_required",
                           "receivables writes require an Idempotency-Key header")
        if key is not None:  # sent, but blank: a client bug, not a request to skip deduplication
            raise validation_error({"Idempotency-Key": ["must not be blank"]})
        return None
    if len(key) > MAX_IDEMPOTENCY_KEY:
        raise validation_error({"Idempotency-Key": [f"at most {MAX_IDEMPOTENCY_KEY} characters"]})
    return key


def _render(resp: falcon.Response, reply: Reply) -> None:
    resp.status = falcon.code_to_http_status(reply.status)
    if reply.stream is not None:
        resp.content_type = reply.media_type
        resp.stream = reply.stream
    else:
        resp.content_type = falcon.MEDIA_JSON
        resp.data = reply.encoded if reply.encoded is not None else orjson.dumps(reply.body)
    for name, value in reply.headers.items():
        resp.set_header(name, value)


def _run(op: Operation, handler, resource, req, resp, params) -> None:
    req.context.key = None
    req.context.tenant_id = None
    if op.scope is not None:
        key = authenticate(req)
        if op.scope:
            require_scope(key, op.scope)
        req.context.key = key
        req.context.tenant_id = key.tenant_id
        ratelimit.check(ratelimit.request_limits(key, req.method, req.uri_template, op.rate_limit), resp)

    if req.method not in WRITE_METHODS:
        _answer_read(op, handler, resource, req, resp, params)
        return
    raw = read_body(req)
    use = None
    if req.context.tenant_id is not None:
        key_value = _idempotency_key(req, op)
        if key_value is not None:
            take_key = idempotency.claim if op.calls_out_first else idempotency.look_up
            claim = take_key(req.context.tenant_id, key_value, req.method, req.path, hashlib.sha256(raw).hexdigest())
            if claim.conflict:
                raise ApiError(409, _conflict_code(op), CONFLICT_MESSAGES[claim.conflict], {"reason": claim.conflict})
            if claim.replay is not None:
                stored = claim.replay
                resp.status = falcon.code_to_http_status(stored.status)
                resp.content_type = falcon.MEDIA_JSON
                resp.data = (secrets.decrypt(stored.body) if op.secret_response else stored.body).encode()
                for name, value in (stored.headers or {}).items():
                    resp.set_header(name, value)
                resp.set_header(REPLAY_HEADER, "true")
                return
            use = claim.use

    try:
        req.context.body = validate(op.body, raw) if op.body is not None else None
        # The operation's first commit also writes the key `applied` (models/tenancy/idempotency.py).
        with idempotency.applying(use) if use is not None else contextlib.nullcontext():
            reply = handler(resource, req, resp, **params)
    except (ApiError, DomainError) as error:
        if isinstance(error, idempotency.ClaimLost):
            error = ApiError(409, _conflict_code(op), error.message, error.details)
        api_error = error if isinstance(error, ApiError) else ApiError.from_domain(error)
        render_error(resp, api_error)
        if use is not None:
            _finish(op, use, api_error.status, resp.data, api_error.headers)
        return
    except BaseException:
        if use is not None:
            idempotency.abandon(use)
        raise
    _render(resp, reply)
    if use is not None:
        _finish(op, use, reply.status, resp.data, reply.headers)


def _answer_read(op: Operation, handler, resource, req, resp, params) -> None:
    """Steps 5 and 6 for a method that reads: it has no body to take and no Idempotency-Key to
    claim, so nothing is stored for replay and the write path's bookkeeping is skipped."""
    try:
        req.context.body = validate(op.body, b"") if op.body is not None else None
        reply = handler(resource, req, resp, **params)
    except (ApiError, DomainError) as error:
        render_error(resp, error if isinstance(error, ApiError) else ApiError.from_domain(error))
        return
    _render(resp, reply)


CONFLICT_MESSAGES = {
    "in_progress": "a request with this Idempotency-Key is still in progress",
    "mismatch": "this Idempotency-Key was used with a different request",
    "applied": "the request with this Idempotency-Key was applied, but the server stopped before answering it; "
               "read the resource to see the outcome (it is not applied twice)",
}


def _conflict_code(op: Operation) -> str:
    return "idempotency_key_conflict" if op.receivables else "idempotency_conflict"


def _finish(op: Operation, use: idempotency.KeyUse, status: int, body: bytes, headers: dict[str, str]) -> None:
    if status >= 500 or status in NOT_REPLAYED:
        idempotency.abandon(use)
    else:
        if op.secret_response:
            body = secrets.encrypt(body.decode()).encode()
        idempotency.complete(use, status, body, headers)
