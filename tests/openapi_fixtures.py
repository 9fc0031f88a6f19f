"""Checking what the service posts against its own API document's `webhooks` section.

`event_errors(document, name, body)` validates an event's body with a JSON Schema validator (the
document's dialect, 2020-12, formats checked) against the schema the document gives the event;
`assert_documented_event(body)` does it against the document the service builds in process.
"""

from __future__ import annotations

import functools
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from api.openapi import build_document


def webhook_post(document: dict, name: str) -> dict[str, Any]:
    """The `post` operation the document's `webhooks` section gives event `name`."""
    assert name in document["webhooks"], f"{name} is not in the document's webhooks"
    return document["webhooks"][name]["post"]


def event_errors(document: dict, name: str, body: Any) -> list[str]:
    """What in `body` the document's schema for event `name` does not allow (nothing: it matches)."""
    schema = webhook_post(document, name)["requestBody"]["content"]["application/json"]["schema"]
    # The schema's references point into the document's components.
    validator = Draft202012Validator({**schema, "components": document["components"]}, format_checker=FormatChecker())
    return [f"{'.'.join(map(str, error.absolute_path)) or 'body'}: {error.message}"
            for error in validator.iter_errors(body)]


@functools.cache
def built_document() -> dict:
    return build_document()


def assert_documented_event(body: dict) -> None:
    errors = event_errors(built_document(), body["event"], body)
    assert not errors, f"{body['event']} does not match the API document: {errors}\n{body}"
