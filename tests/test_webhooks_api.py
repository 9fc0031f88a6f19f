"""POST/GET /webhooks/endpoints and DELETE /webhooks/endpoints/{endpoint_id}: every answer in the
contract's envelope, tenancy by construction."""

from __future__ import annotations

import json

from falcon import testing

from api.app import create_app
from config import load_settings
from models.events import webhooks
from models.events.tables import CORE_EVENTS, WebhookEndpoint
from models.tenancy.keys import authenticate, revoke_key
from models.tenancy.tables import IdempotencyRecord
from tests.conftest import base_env
from tests.webhooks_fixtures import configure

PATH = "/api/v1/webhooks/endpoints"
URL = "https://hooks.example.com/service"


def create(client, persona, url=URL, events=("message.sent",), headers=None):
    return client.simulate_post(PATH, json={"url": url, "events": list(events)},
                                headers={**persona.headers, **(headers or {})})


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json
    assert body["success"] is False
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    return body


def test_it_creates_an_endpoint_and_shows_the_secret_once(client, alice):
    response = create(client, alice, events=["message.sent", "message.failed", "message.sent"])
    assert response.status_code == 201
    body = response.json
    assert body["success"] is True
    data = body["data"]
    assert data["id"].startswith("whend_")
    assert (data["url"], data["events"], data["status"]) == (URL, ["message.sent", "message.failed"], "active")
    secret = data["signing_secret"]
    assert secret.startswith("whsec_") and len(secret) >= 40
    assert data["signing_secret_preview"] == secret[:10] + "…"
    assert (data["failure_count"], data["last_success_at"], data["last_failure_at"]) == (0, None, None)

    stored = WebhookEndpoint.get(WebhookEndpoint.public_id == data["id"])
    assert secret not in stored.secret_ciphertext
    assert stored.signing_secret == secret

    listed = client.simulate_get(PATH, headers=alice.headers)
    assert listed.status_code == 200
    assert secret not in listed.text
    assert "signing_secret" not in listed.json["data"][0]

    every = create(client, alice, url=URL + "/all", events=CORE_EVENTS)
    assert every.status_code == 201 and every.json["data"]["events"] == list(CORE_EVENTS)


INVALID_BODIES = [
    ({"url": "http://hooks.example.com/x", "events": ["message.sent"]}, "url"),
    ({"url": "https://" + "a" * 995 + ".com", "events": ["message.sent"]}, "url"),
    ({"url": "hooks.example.com", "events": ["message.sent"]}, "url"),
    ({"url": "https://", "events": ["message.sent"]}, "url"),
    ({"url": 42, "events": ["message.sent"]}, "url"),
    ({"events": ["message.sent"]}, "url"),
    ({"url": URL, "events": []}, "events"),
    ({"url": URL}, "events"),
    ({"url": URL, "events": "message.sent"}, "events"),
    ({"url": URL, "events": ["message.bounced"]}, "events.0"),
    ({"url": URL, "events": ["debt.payment_received"]}, "events.0"),
    ({"url": URL, "events": ["message.sent"], "secret": "mine"}, "secret"),
    ({"url": "https://user:pw@hooks.example.com/x", "events": ["message.sent"]}, "url"),
    ({"url": "https://hooks.example.com:99999/x", "events": ["message.sent"]}, "url"),
]


def test_it_rejects_invalid_bodies(client, alice):
    for body, field in INVALID_BODIES:
        response = client.simulate_post(PATH, json=body, headers=alice.headers)
        errors = assert_error(response, 422, "validation_failed")["error"]["details"]["errors"]
        assert field in errors, (body, errors)
    assert WebhookEndpoint.select().count() == 0


def test_it_rejects_a_body_that_is_not_json(client, alice):
    response = client.simulate_post(PATH, body=b"{url:", headers={**alice.headers,
                                                                  "Content-Type": "application/json"})
    assert "body" in assert_error(response, 422, "validation_failed")["error"]["details"]["errors"]


PRIVATE_TARGETS = [
    "https://127.0.0.1/hook",
    "https://localhost:8443/hook",
    "https://10.1.2.3/hook",
    "https://192.168.0.10/hook",
    "https://169.254.169.254/latest/meta-data",
    "https://100.64.0.1/hook",
    "https://[::1]/hook",
    "https://[fd00::1]/hook",
    "https://[::ffff:10.0.0.1]/hook",
    "https://0.0.0.0/hook",
    "https://224.0.0.1/hook",
]


def test_it_refuses_private_targets_unless_allowed(client, alice, storage):
    configure(storage, webhook_allow_private=False)
    for url in PRIVATE_TARGETS:
        response = create(client, alice, url=url)
        errors = assert_error(response, 422, "validation_failed")["error"]["details"]["errors"]
        assert "non-public address" in errors["url"][0], url
    assert WebhookEndpoint.select().count() == 0
    # Public addresses pass (IP literals: no DNS needed here).
    assert create(client, alice, url="https://203.0.114.7/hook").status_code == 201
    assert create(client, alice, url="https://[2606:4700:4700::1111]/hook").status_code == 201
    configure(storage, webhook_allow_private=True)
    assert create(client, alice, url=PRIVATE_TARGETS[0]).status_code == 201


def test_the_same_active_url_twice_is_a_conflict(client, alice, charlie):
    first = create(client, alice).json["data"]
    body = assert_error(create(client, alice, events=["message.read"]), 409, "endpoint_exists")
    assert body["error"]["details"]["endpoint_id"] == first["id"]
    assert create(client, charlie).status_code == 201  # another company may use the same URL
    client.simulate_delete(f"{PATH}/{first['id']}", headers=alice.headers)
    assert create(client, alice).status_code == 201


def test_it_limits_the_active_endpoints_of_a_company(client, alice):
    for index in range(webhooks.MAX_ACTIVE_ENDPOINTS):
        webhooks.create_endpoint(alice.id, f"{URL}/{index}", ["message.sent"])
    assert_error(create(client, alice), 409, "endpoint_limit_reached")


def test_an_idempotency_key_replays_the_creation(client, alice):
    headers = {"Idempotency-Key": "create-hook-1"}
    first = create(client, alice, headers=headers)
    again = create(client, alice, headers=headers)
    assert again.status_code == 201
    assert again.headers["x-service-idempotent-replay"] == "true"
    assert again.json == first.json
    assert WebhookEndpoint.select().count() == 1
    # The copy kept for replay holds the signing secret: it is encrypted at rest like the secret.
    stored = IdempotencyRecord.get(IdempotencyRecord.key == "create-hook-1").body
    assert first.json["data"]["signing_secret"] not in stored and "whsec_" not in stored
    other = create(client, alice, url=URL + "/other", headers=headers)
    assert_error(other, 409, "idempotency_conflict")


def test_the_list_is_paginated_newest_first_and_only_the_companys(client, alice, charlie):
    ids = [create(client, alice, url=f"{URL}/{index}").json["data"]["id"] for index in range(3)]
    create(client, charlie, url=f"{URL}/charlie")
    page = client.simulate_get(PATH, params={"per_page": 2}, headers=alice.headers).json
    assert [item["id"] for item in page["data"]] == [ids[2], ids[1]]
    assert page["meta"]["total"] == 3 and page["meta"]["last_page"] == 2
    assert page["links"]["next"].endswith("page=2")
    second = client.simulate_get(PATH, params={"per_page": 2, "page": 2}, headers=alice.headers).json
    assert [item["id"] for item in second["data"]] == [ids[0]]
    item = second["data"][0]
    assert set(item) == {"id", "url", "events", "status", "signing_secret_preview", "last_success_at",
                         "last_failure_at", "failure_count", "created_at"}
    for params, field in (({"per_page": 101}, "per_page"), ({"page": 0}, "page"), ({"page": "x"}, "page")):
        response = client.simulate_get(PATH, params=params, headers=alice.headers)
        assert field in assert_error(response, 422, "validation_failed")["error"]["details"]["errors"]


def test_delete_deactivates_and_is_repeatable(client, alice):
    endpoint_id = create(client, alice).json["data"]["id"]
    response = client.simulate_delete(f"{PATH}/{endpoint_id}", headers=alice.headers)
    assert response.status_code == 200
    assert response.json == {"success": True, "data": {"id": endpoint_id, "status": "inactive"}}
    listed = client.simulate_get(PATH, headers=alice.headers).json["data"]
    assert [(item["id"], item["status"]) for item in listed] == [(endpoint_id, "inactive")]
    again = client.simulate_delete(f"{PATH}/{endpoint_id}", headers=alice.headers)
    assert again.json == {"success": True, "data": {"id": endpoint_id, "status": "inactive"}}


def test_a_delete_idempotency_key_is_bound_to_its_endpoint(client, alice):
    first = create(client, alice, url=URL + "/1").json["data"]["id"]
    second = create(client, alice, url=URL + "/2").json["data"]["id"]
    headers = {**alice.headers, "Idempotency-Key": "delete-1"}
    assert client.simulate_delete(f"{PATH}/{first}", headers=headers).status_code == 200
    replay = client.simulate_delete(f"{PATH}/{first}", headers=headers)
    assert replay.status_code == 200 and replay.headers["x-service-idempotent-replay"] == "true"
    assert_error(client.simulate_delete(f"{PATH}/{second}", headers=headers), 409, "idempotency_conflict")
    assert WebhookEndpoint.get(WebhookEndpoint.public_id == second).status == "active"


def test_a_foreign_or_unknown_endpoint_is_not_found(client, alice, charlie):
    foreign = create(client, charlie).json["data"]["id"]
    for endpoint_id in (foreign, "whend_doesnotexist", "x" * 300):
        assert_error(client.simulate_delete(f"{PATH}/{endpoint_id}", headers=alice.headers), 404,
                     "endpoint_not_found")
    assert WebhookEndpoint.get(WebhookEndpoint.public_id == foreign).status == "active"


def test_the_payment_endpoint_is_not_managed_through_the_api(client, alice):
    endpoint, _secret = webhooks.set_payment_endpoint(alice.id, URL + "/payments")
    assert client.simulate_get(PATH, headers=alice.headers).json["data"] == []
    assert_error(client.simulate_delete(f"{PATH}/{endpoint.public_id}", headers=alice.headers), 404,
                 "endpoint_not_found")


OPERATIONS = [("POST", PATH), ("GET", PATH), ("DELETE", PATH + "/whend_x")]


def test_every_operation_needs_a_valid_key(client, alice):
    restricted = alice.with_key(["all"], allowed_ips=["10.9.9.9"])
    revoked_headers = alice.with_key(["all"])
    revoke_key(authenticate(revoked_headers["Authorization"].split(" ", 1)[1]).public_id)
    for method, path in OPERATIONS:
        assert_unauthenticated(client, method, path)
        body = {"url": URL, "events": ["message.sent"]}
        elsewhere = client.simulate_request(method, path, json=body, headers=restricted, remote_addr="127.0.0.1")
        assert assert_error(elsewhere, 401, "unauthorized")["error"]["details"] == {"reason": "ip_not_allowed"}
        assert_error(client.simulate_request(method, path, json=body, headers=revoked_headers), 401,
                     "invalid_api_key")
    assert WebhookEndpoint.select().count() == 0


def assert_unauthenticated(client, method, path):
    missing = client.simulate_request(method, path, json={"url": URL, "events": ["message.sent"]})
    assert_error(missing, 401, "unauthorized")
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = client.simulate_request(method, path, json={"url": URL, "events": ["message.sent"]},
                                    headers={"Authorization": "Bearer svc_live_key_nope.secret"})
    assert_error(wrong, 401, "invalid_api_key")


def test_every_operation_needs_its_scope(client, alice):
    for method, path, needed, held in [("POST", PATH, "webhooks:write", "webhooks:read"),
                                       ("DELETE", PATH + "/whend_x", "webhooks:write", "webhooks:read"),
                                       ("GET", PATH, "webhooks:read", "webhooks:write")]:
        response = client.simulate_request(method, path, json={"url": URL, "events": ["message.sent"]},
                                           headers=alice.with_key([held]))
        body = assert_error(response, 403, "missing_scope")
        assert body["error"]["details"]["required_scope"] == needed
    assert WebhookEndpoint.select().count() == 0


def test_creation_is_limited_to_30_a_minute(client, alice):
    invalid = {"url": "http://not-https", "events": ["message.sent"]}
    for _ in range(30):
        assert client.simulate_post(PATH, json=invalid, headers=alice.headers).status_code == 422
    response = client.simulate_post(PATH, json=invalid, headers=alice.headers)
    body = assert_error(response, 429, "rate_limited")
    assert body["message"] == body["error"]["message"]
    assert int(response.headers["retry-after"]) >= 1
    # Counted per method and route: reads are not held up by rejected writes.
    assert client.simulate_get(PATH, headers=alice.headers).status_code == 200


def test_an_unreachable_database_answers_503(tmp_path):
    settings = load_settings({**base_env(tmp_path), "SVC_DATABASE_URL": "postgresql://postgres@127.0.0.1:9/none"})
    client = testing.TestClient(create_app(settings))
    headers = {"Authorization": "Bearer svc_live_key_abc.secret"}
    for method, path in (("POST", PATH), ("GET", PATH), ("DELETE", PATH + "/whend_x")):
        response = client.simulate_request(method, path, headers=headers,
                                           body=json.dumps({"url": URL, "events": ["message.sent"]}))
        assert_error(response, 503, "service_unavailable")
        assert response.headers["retry-after"]
