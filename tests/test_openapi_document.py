"""The OpenAPI document the app serves: valid OpenAPI 3.1, and a `webhooks` section that describes
every event the service posts, with its body and the headers that sign it.

Live checks (a generated client driving the service, real deliveries against these schemas) are
in tests/test_openapi_client.py.
"""

from __future__ import annotations

import re

import pytest
from openapi_spec_validator.validation.validators import OpenAPIV31SpecValidator

from models.events import outbox as events
from models.events.tables import ALL_EVENTS, CORE_EVENTS, ENVELOPED_EVENTS, PAYMENT_EVENT, PING_EVENT
from models.events.types import EVENT_TYPES, Enveloped, WebhookPing, event_name
from tests.openapi_fixtures import event_errors, webhook_post

pytestmark = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)

SIGNATURE_HEADERS = ["X-Service-Event-Id", "X-Service-Event", "X-Service-Timestamp", "X-Service-Signature"]


@pytest.fixture
def document(client) -> dict:
    response = client.simulate_get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json


def test_openapi_spec_validator_finds_no_error(document):
    errors = [f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
              for error in OpenAPIV31SpecValidator(document).iter_errors()]
    assert errors == []


def test_every_operation_documents_a_success_answer_with_its_body(document):
    for path, methods in document["paths"].items():
        for method, entry in methods.items():
            successes = {status: answer for status, answer in entry["responses"].items() if status.startswith("2")}
            assert successes, f"{method} {path}"
            # JSON, but for an export named by its file type (`.csv`), which answers in that type.
            expected = "text/csv" if path.endswith(".csv") else "application/json"
            assert all(expected in answer.get("content", {}) for answer in successes.values()), \
                f"{method} {path}"


def test_every_posted_event_is_a_webhook_with_its_body_and_signature_headers(document):
    posted = {*ALL_EVENTS, PING_EVENT}
    assert set(document["webhooks"]) == posted
    for name in posted:
        post = webhook_post(document, name)
        assert post["security"] == [] and post["summary"]
        assert [header["name"] for header in post["parameters"]] == SIGNATURE_HEADERS
        assert all(header["in"] == "header" and header["required"] for header in post["parameters"])
        assert post["parameters"][1]["schema"]["const"] == name
        schema_name = post["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        assert schema_name == "".join(part.capitalize() for part in re.split(r"[._]", name))  # as docs/api.md says
        schema = document["components"]["schemas"][schema_name]
        assert schema["properties"]["event"]["const"] == name
        assert schema["additionalProperties"] is False
        assert set(post["responses"]) == {"2XX", "default"}


def test_the_event_names_and_the_event_models_agree(document):
    """The outbox and the subscription list read the names of models/events/tables.py, the document
    reads the models of models/events/types.py: the same events, in the same order, each enveloped
    where its model is."""
    assert tuple(event_name(body) for body in EVENT_TYPES) == ALL_EVENTS
    assert {event_name(body) for body in EVENT_TYPES if issubclass(body, Enveloped)} == ENVELOPED_EVENTS
    assert event_name(WebhookPing) == PING_EVENT and PING_EVENT not in ALL_EVENTS
    endpoint_input = document["components"]["schemas"]["EndpointInput"]
    assert endpoint_input["properties"]["events"]["items"]["enum"] == list(CORE_EVENTS)
    assert PAYMENT_EVENT in ALL_EVENTS and PAYMENT_EVENT not in CORE_EVENTS
    with pytest.raises(ValueError, match="unknown event"):
        events.emit(1, "debt.not_an_event", {})
    # The batch writers write flat bodies: an enveloped event, or none at all, is refused.
    for name in (PAYMENT_EVENT, "message.not_an_event"):
        with pytest.raises(ValueError, match="not core events"):
            events.emit_many(1, name, [{}])


def test_a_body_that_strays_from_its_event_schema_is_caught(document):
    """The schemas are closed and typed: the checks the live tests run on real deliveries can fail."""
    sent = {"event": "message.sent", "account_id": "wacc_1", "campaign_id": None, "recipient": "573001112233",
            "external_contact_id": None, "wam_id": "wamid.1", "status": "sent", "timestamp": "2026-01-01T10:00:00Z",
            "message_id": "msg_1"}
    assert event_errors(document, "message.sent", sent) == []
    assert event_errors(document, "message.sent", {**sent, "surprise": 1}) != []
    assert event_errors(document, "message.sent", {**sent, "status": "read"}) != []
    assert event_errors(document, "message.sent", {**sent, "timestamp": "yesterday"}) != []
    assert event_errors(document, "message.sent", {**sent, "message_id": None}) != []
    without_account = {key: value for key, value in sent.items() if key != "account_id"}
    assert event_errors(document, "message.sent", without_account) != []
    assert event_errors(document, "message.failed", {**sent, "event": "message.failed", "status": "failed"}) != []
