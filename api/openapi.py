"""GET /openapi.json: the OpenAPI 3.1 document, built from the `@operation` declarations and,
for its `webhooks` section, from the event bodies of models/events/types.py.

The same pydantic models validate requests and describe them here, so the document cannot
drift from what the service accepts.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from api.errors import HTTP_CODES
from api.operation import Reply, operation
from api.schemas import ErrorEnvelope, Output
from models.events.types import EVENT_TYPES, EventBody, WebhookPing, event_name

METHODS = ("get", "post", "put", "patch", "delete")
ERROR_DESCRIPTIONS = {
    401: "Key missing, invalid, revoked, or not allowed from this address",
    403: "The key lacks the required scope",
    404: "Absent, or owned by another company",
    409: "Conflict (idempotency, or the resource's state)",
    413: "Body over 8 MiB",
    422: "Invalid payload or business rule",
    429: "Rate limited; honour Retry-After",
    502: "The messaging platform rejected the message",
    503: "A dependency is unavailable",
}
IDEMPOTENCY_HEADER = {
    "name": "Idempotency-Key",
    "in": "header",
    # A blank key counts as no key; an over-long one is a 422.
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"\S"},
    "description": "Deduplicates retries of a write for 48 hours.",
}
# Every event the service posts: those it records and retries, and the test event.
POSTED_EVENTS: tuple[type[EventBody], ...] = (*EVENT_TYPES, WebhookPing)
ACKNOWLEDGED = {
    "2XX": {"description": "Acknowledged. Answer within 10 seconds and do the work afterwards."},
    "default": {"description": "Anything else (another status, a redirect, a timeout, a refused connection, "
                               "a TLS error) is a failure: the delivery is retried (docs/webhooks.md, "
                               "Retries); a 429 or 503 with Retry-After pushes the next attempt."},
}


def _operations():
    from api.app import area_modules

    for module in area_modules():
        for path, resource in getattr(module, "ROUTES", []):
            for method in METHODS:
                responder = getattr(resource, f"on_{method}", None)
                op = getattr(responder, "__operation__", None)
                if op is not None:
                    yield path, method, op


def _schema_name(model: type[BaseModel]) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", model.__name__)


def _signature_headers(name: str) -> list[dict[str, Any]]:
    """The headers every delivery of the event carries (docs/webhooks.md, A delivery)."""
    def header(header_name: str, schema: dict, description: str) -> dict[str, Any]:
        return {"name": header_name, "in": "header", "required": True, "schema": schema, "description": description}

    return [
        header("X-Service-Event-Id", {"type": "string", "pattern": "^evt_"},
               "The event's `evt_` id: the same on every retry and replay of the event; deduplicate by it."),
        header("X-Service-Event", {"type": "string", "const": name}, "The event's name."),
        header("X-Service-Timestamp", {"type": "string", "pattern": "^[0-9]+$"},
               "Unix time in seconds when this attempt was sent (new on every attempt). Refuse a "
               "timestamp more than 300 seconds away from your clock."),
        header("X-Service-Signature", {"type": "string", "pattern": "^sha256=[0-9a-f]{64}$"},
               "`sha256=` + the hex HMAC-SHA256, keyed with the endpoint's signing secret, of "
               "`timestamp + \".\" + raw_body`. Compute it over the raw bytes of the body, before any JSON "
               "parsing, and compare in constant time."),
    ]


def _webhook(body: type[EventBody], schema_ref: dict) -> dict[str, Any]:
    name = event_name(body)
    summary, _, details = inspect.cleandoc(body.__doc__ or name).partition("\n\n")
    return {"post": {
        "summary": " ".join(summary.split()),
        **({"description": " ".join(details.split())} if details else {}),
        "operationId": "event_" + name.replace(".", "_"),
        "tags": ["events"],
        "security": [],
        "parameters": _signature_headers(name),
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema_ref}}},
        "responses": ACKNOWLEDGED,
    }}


def build_document() -> dict[str, Any]:
    operations = list(_operations())
    models: set[type[BaseModel]] = {ErrorEnvelope, *POSTED_EVENTS}
    for _path, _method, op in operations:
        if op.body is not None:
            models.add(op.body)
        models.update(model for model in op.responses.values() if isinstance(model, type))
    ordered = sorted(models, key=_schema_name)
    refs, definitions = models_json_schema(
        [(model, "validation" if model is not None else "serialization") for model in ordered],
        ref_template="#/components/schemas/{model}",
    )
    schemas = definitions.get("$defs", {})

    def ref(model) -> dict:
        return refs[(model, "validation")]

    paths: dict[str, dict] = {}
    for path, method, op in operations:
        full_path = "/api/v1" + path
        parameters = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string", "maxLength": 255}}
            for name in re.findall(r"{(\w+)}", path)
        ]
        parameters += [
            {"name": name, "in": "query", "required": False, "schema": schema, "description": description}
            for name, schema, description in op.query
        ]
        if method != "get" and op.scope is not None:
            header = dict(IDEMPOTENCY_HEADER, required=op.receivables)
            parameters.append(header)
        responses: dict[str, Any] = {}
        for status, model in op.responses.items():
            if isinstance(model, str):  # a media type other than JSON: a CSV export
                content = {model: {"schema": {"type": "string"}}}
            else:
                content = {"application/json": {"schema": ref(model)}} if model is not None else None
            responses[str(status)] = {"description": HTTP_CODES.get(status, "Success").replace("_", " ")
                                      if status >= 400 else "Success", **({"content": content} if content else {})}
        errors = set(op.errors)
        if op.scope is not None:
            errors.add(429)  # every keyed call is counted: its key's limits, and failed authentications
        if method != "get":
            errors.add(413)
            if op.scope is not None:
                errors.add(422)  # an Idempotency-Key over 255 characters, on any write
        for status in sorted(errors):
            responses.setdefault(str(status), {
                "description": ERROR_DESCRIPTIONS.get(status, HTTP_CODES.get(status, "error")),
                "content": {"application/json": {"schema": ref(ErrorEnvelope)}},
            })
        entry: dict[str, Any] = {
            "summary": op.summary,
            "operationId": f"{method}_{re.sub(r'[^a-z0-9]+', '_', path.lower()).strip('_')}",
            "tags": list(op.tags),
            "parameters": parameters,
            "responses": responses,
        }
        if op.description:
            entry["description"] = op.description
        if op.scope is None:
            entry["security"] = []
        elif op.scope:
            entry["x-required-scope"] = op.scope
        if op.body is not None:
            entry["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref(op.body)}}}
        paths.setdefault(full_path, {})[method] = entry

    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Messaging Campaign and Receivables Service API",
            "version": "1.1.0",
            "description": "Numbers, templates, campaigns, single messages, credits, signed webhooks and "
                           "receivables synchronization. Every endpoint but POST /access-requests takes "
                           "`Authorization: Bearer svc_live_{public_id}.{secret}`. The `webhooks` section "
                           "describes every event the service posts to a company's endpoints: its body "
                           "and the headers that sign it.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "webhooks": {event_name(body): _webhook(body, ref(body)) for body in POSTED_EVENTS},
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }


class OpenApiDocument(Output):
    openapi: str
    info: dict[str, Any]
    servers: list[dict[str, Any]]
    security: list[dict[str, Any]]
    paths: dict[str, Any]
    webhooks: dict[str, Any]
    components: dict[str, Any]


class OpenApiResource:
    _cached: bytes | None = None

    @operation("This OpenAPI document", scope=None, responses={200: OpenApiDocument}, tags=("meta",))
    def on_get(self, req, resp) -> Reply:
        # The document depends only on the code and the process's settings: encoded once per
        # process and answered as those bytes, not rebuilt and serialized again on every request.
        if OpenApiResource._cached is None:
            OpenApiResource._cached = orjson.dumps(build_document())
        return Reply(200, None, encoded=OpenApiResource._cached)


ROUTES = [("/openapi.json", OpenApiResource())]
