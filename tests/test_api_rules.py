"""The API's common rules: authentication, scopes, envelopes, body limits, idempotency, rate limits."""

from __future__ import annotations

import hashlib
import json
import threading

import pytest

from api.operation import MAX_BODY_BYTES, Reply, operation
from api.schemas import Input
from models.tenancy import credits
from models.tenancy.keys import revoke_key, rotate_key

ACCESS_REQUEST = {"company_name": "Acme", "contact_name": "Ada", "contact_email": "ada@acme.test"}


def error_of(response) -> dict:
    assert response.json["success"] is False
    return response.json["error"]


class TestAuthentication:
    def test_it_rejects_a_missing_key(self, client, alice):
        response = client.simulate_get("/api/v1/health")
        assert response.status_code == 401
        assert error_of(response)["code"] == "unauthorized"
        assert response.headers["www-authenticate"].startswith("Bearer")

    def test_it_rejects_a_key_with_a_wrong_secret(self, client, alice):
        forged = alice.key_string.rsplit(".", 1)[0] + ".not-the-secret"
        response = client.simulate_get("/api/v1/health", headers={"Authorization": f"Bearer {forged}"})
        assert response.status_code == 401
        assert error_of(response)["code"] == "invalid_api_key"

    @pytest.mark.parametrize("header", ["Basic abc", "Bearer", "Bearer svc_live_", "Bearer svc_live_key_x",
                                        "Bearer " + "x" * 5000, "Bearer svc_test_key_abc.def"])
    def test_it_rejects_malformed_credentials(self, client, alice, header):
        response = client.simulate_get("/api/v1/health", headers={"Authorization": header})
        assert response.status_code == 401
        assert error_of(response)["code"] in {"unauthorized", "invalid_api_key"}

    def test_a_revoked_key_stops_working(self, client, alice):
        assert client.simulate_get("/api/v1/health", headers=alice.headers).status_code == 200
        revoke_key(alice.key.public_id)
        response = client.simulate_get("/api/v1/health", headers=alice.headers)
        assert response.status_code == 401
        assert error_of(response)["code"] == "invalid_api_key"

    def test_rotation_replaces_the_secret(self, client, alice):
        _key, new_key = rotate_key(alice.key.public_id)
        assert client.simulate_get("/api/v1/health", headers=alice.headers).status_code == 401
        response = client.simulate_get("/api/v1/health", headers={"Authorization": f"Bearer {new_key}"})
        assert response.status_code == 200

    def test_it_honours_the_ip_allow_list(self, client, alice):
        inside = alice.with_key(["all"], allowed_ips=["127.0.0.0/8"])
        outside = alice.with_key(["all"], allowed_ips=["10.1.2.3"])
        assert client.simulate_get("/api/v1/health", headers=inside, remote_addr="127.0.0.1").status_code == 200
        response = client.simulate_get("/api/v1/health", headers=outside, remote_addr="127.0.0.1")
        assert response.status_code == 401
        assert error_of(response) == {"message": "this API key may not be used from this address",
                                      "code": "unauthorized", "details": {"reason": "ip_not_allowed"}}

    def test_health_answers_with_the_service_identity(self, client, alice):
        response = client.simulate_get("/api/v1/health", headers=alice.headers)
        assert response.json == {"success": True,
                                 "data": {"service": "botyconnect_api", "version": "v1", "status": "ok"}}


class TestEnvelopes:
    def test_an_unknown_route_gets_the_envelope(self, client, alice):
        response = client.simulate_get("/api/v1/nothing-here", headers=alice.headers)
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"

    def test_a_wrong_method_gets_the_envelope(self, client, alice):
        response = client.simulate_put("/api/v1/credits/balance", headers=alice.headers)
        assert response.status_code == 405
        assert error_of(response)["code"] == "method_not_allowed"

    @pytest.mark.parametrize("body", [b"{", b"[]", b"null", b"\"text\"", b"\xff\xfe", b"{\"company_name\": 5}"])
    def test_bad_json_is_a_validation_error(self, client, body):
        response = client.simulate_post("/api/v1/access-requests", body=body,
                                        headers={"Content-Type": "application/json"})
        assert response.status_code == 422
        assert error_of(response)["code"] == "validation_failed"
        assert error_of(response)["details"]["errors"]

    def test_validation_errors_name_each_field(self, client):
        body = {**ACCESS_REQUEST, "contact_email": "nope", "webhook_url": "http://plain.test",
                "estimated_numbers_count": 0, "surprise": 1}
        response = client.simulate_post("/api/v1/access-requests", json=body)
        assert response.status_code == 422
        fields = set(error_of(response)["details"]["errors"])
        assert fields == {"contact_email", "webhook_url", "estimated_numbers_count", "surprise"}

    def test_odd_strings_never_break_the_service(self, client):
        body = {**ACCESS_REQUEST, "company_name": "\u202e\ud7ff🙂\t" * 10, "use_case": "'; DROP TABLE x; --"}
        response = client.simulate_post("/api/v1/access-requests", json=body)
        assert response.status_code == 201

    def test_a_nul_character_is_refused_on_every_engine(self, client):
        body = {**ACCESS_REQUEST, "company_name": "Acme\u0000Evil"}
        response = client.simulate_post("/api/v1/access-requests", json=body)
        assert response.status_code == 422
        assert "body" in error_of(response)["details"]["errors"]

    def test_an_oversized_body_is_refused_before_it_is_read(self, client, alice):
        body = b"{" + b" " * MAX_BODY_BYTES + b"}"
        response = client.simulate_post("/api/v1/access-requests", body=body,
                                        headers={"Content-Type": "application/json"})
        assert response.status_code == 413
        assert error_of(response)["code"] == "payload_too_large"


class TestAccessRequests:
    def test_it_records_a_pending_request(self, client, storage):
        from models.tenancy.tables import AccessRequest

        response = client.simulate_post("/api/v1/access-requests", json=ACCESS_REQUEST)
        assert response.status_code == 201
        data = response.json["data"]
        assert data["status"] == "pending" and data["request_id"].startswith("bcar_")
        stored = AccessRequest.get(AccessRequest.public_id == data["request_id"])
        assert (stored.company_name, stored.contact_email) == ("Acme", "ada@acme.test")

    def test_it_limits_five_requests_a_minute_per_ip_and_email(self, client, storage):
        for _ in range(5):
            assert client.simulate_post("/api/v1/access-requests", json=ACCESS_REQUEST).status_code == 201
        response = client.simulate_post("/api/v1/access-requests", json=ACCESS_REQUEST)
        assert response.status_code == 429
        assert response.json["message"]
        assert error_of(response)["code"] == "rate_limited"
        assert int(response.headers["retry-after"]) >= 1
        other_email = {**ACCESS_REQUEST, "contact_email": "bob@acme.test"}
        assert client.simulate_post("/api/v1/access-requests", json=other_email).status_code == 201


class GrantInput(Input):
    note: str


class GrantOne:
    """A write endpoint that counts its executions: a grant of one credit per call."""

    @operation("test", scope="credits:read", body=GrantInput)
    def on_post(self, req, resp):
        entry = credits.grant(req.context.tenant_id, 1, reason=req.context.body.note)
        return Reply(201, {"success": True, "data": {"ledger_id": entry.id}})


class TestIdempotency:
    """Idempotency is per tenant, so it is exercised on a keyed write added for the test."""

    @pytest.fixture
    def write(self, client, alice):
        def post(key: str | None, body: dict, headers=None):
            extra = {"Idempotency-Key": key} if key else {}
            return client.simulate_post("/api/v1/test-write", json=body,
                                        headers={**(headers or alice.headers), **extra})
        return post

    @pytest.fixture(autouse=True)
    def test_write_route(self, app):
        app.add_route("/api/v1/test-write", GrantOne())

    def test_a_replay_returns_the_original_response_without_repeating(self, write, alice):
        first = write("k-1", {"note": "a"})
        again = write("k-1", {"note": "a"})
        assert first.status_code == again.status_code == 201
        assert again.json == first.json
        assert again.headers["x-service-idempotent-replay"] == "true"
        assert "x-service-idempotent-replay" not in first.headers
        assert credits.wallet_of(alice.id).balance == 1001

    def test_the_same_key_with_another_body_conflicts(self, write):
        write("k-2", {"note": "a"})
        response = write("k-2", {"note": "b"})
        assert response.status_code == 409
        assert error_of(response)["code"] == "idempotency_conflict"
        assert error_of(response)["details"] == {"reason": "mismatch"}

    def test_keys_are_per_tenant(self, write, alice, charlie):
        write("shared", {"note": "a"})
        response = write("shared", {"note": "a"}, headers=charlie.headers)
        assert response.status_code == 201
        assert "x-service-idempotent-replay" not in response.headers

    def test_validation_failures_are_replayed_too(self, write, alice):
        first = write("k-3", {"wrong": 1})
        again = write("k-3", {"wrong": 1})
        assert first.status_code == again.status_code == 422
        assert again.headers["x-service-idempotent-replay"] == "true"

    def test_without_a_key_nothing_is_deduplicated(self, write, alice):
        write(None, {"note": "a"})
        write(None, {"note": "a"})
        assert credits.wallet_of(alice.id).balance == 1002

    def test_a_key_longer_than_255_is_refused(self, write):
        response = write("k" * 256, {"note": "a"})
        assert response.status_code == 422

    def test_a_read_claims_no_key_and_refuses_none(self, client, alice):
        from models.tenancy.tables import IdempotencyRecord

        for key in ("read-1", "read-1", " ", "k" * 256):
            response = client.simulate_get("/api/v1/credits/balance",
                                           headers={**alice.headers, "Idempotency-Key": key})
            assert response.status_code == 200
            assert "x-service-idempotent-replay" not in response.headers
        assert IdempotencyRecord.select().count() == 0

    def test_a_concurrent_duplicate_conflicts_instead_of_running_twice(self, write, alice, app):
        from models.tenancy import idempotency

        # The first request is mid-flight: its claim exists without a stored response. The body
        # hash is of the bytes the test client sends (it encodes with the stdlib json).
        body_hash = hashlib.sha256(json.dumps({"note": "a"}).encode()).hexdigest()
        idempotency.claim(alice.id, "k-4", "POST", "/api/v1/test-write", body_hash)
        response = write("k-4", {"note": "a"})
        assert response.status_code == 409
        assert error_of(response)["details"] == {"reason": "in_progress"}
        assert credits.wallet_of(alice.id).balance == 1000

    def test_racing_duplicates_run_once(self, write, alice, storage):
        from models.store.db import connection

        outcomes = []

        def send():
            with connection():
                outcomes.append(write("race", {"note": "a"}).status_code)

        threads = [threading.Thread(target=send) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert outcomes.count(201) >= 1
        assert set(outcomes) <= {201, 409}
        assert credits.wallet_of(alice.id).balance == 1001

    def test_expired_keys_are_purged_and_reusable(self, write, alice):
        import datetime as dt

        from models.tenancy import idempotency
        from models.tenancy.tables import IdempotencyRecord

        write("old", {"note": "a"})
        from models.clock import utcnow

        IdempotencyRecord.update(created_at=utcnow() - dt.timedelta(hours=49)).execute()
        assert idempotency.purge_expired() == 1
        response = write("old", {"note": "b"})
        assert response.status_code == 201
        assert credits.wallet_of(alice.id).balance == 1002


class TestRateLimits:
    def test_every_authenticated_response_carries_the_headers(self, client, alice):
        response = client.simulate_get("/api/v1/credits/balance", headers=alice.headers)
        assert response.headers["ratelimit-limit"] == "120"
        assert response.headers["ratelimit-remaining"] == "119"
        assert 1 <= int(response.headers["ratelimit-reset"]) <= 60

    def test_a_key_is_held_to_its_own_limit(self, client, alice):
        headers = alice.with_key(["all"], rate_limit=3)
        statuses = [client.simulate_get("/api/v1/health", headers=headers).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        response = client.simulate_get("/api/v1/health", headers=headers)
        assert error_of(response)["details"]["scope"] == "api_key"
        assert response.headers["retry-after"]
        assert response.headers["ratelimit-remaining"] == "0"
        # Another key of the same company has its own allowance.
        assert client.simulate_get("/api/v1/health", headers=alice.headers).status_code == 200

    def test_the_tenant_limit_spans_its_keys(self, client, alice):
        self._preload(f"t:{alice.id}", 1000)
        response = client.simulate_get("/api/v1/health", headers=alice.headers)
        assert response.status_code == 429
        assert error_of(response)["details"]["scope"] == "tenant"

    def test_each_endpoint_has_its_own_read_limit(self, client, alice):
        headers = alice.with_key(["all"], rate_limit=10_000)
        self._preload(f"e:{alice.id}:GET:/api/v1/credits/balance", 600)
        response = client.simulate_get("/api/v1/credits/balance", headers=headers)
        assert response.status_code == 429
        assert error_of(response)["details"]["scope"] == "endpoint"
        assert client.simulate_get("/api/v1/credits/ledger", headers=headers).status_code == 200

    @staticmethod
    def _preload(key: str, count: int) -> None:
        """Bring a counter to its limit in the current window, as that many requests would."""
        from models.store.counters import counters, window_start

        store = counters()
        if hasattr(store, "client"):
            store.client.set(f"{store.prefix}:rl:{key}:{window_start(60)}", count, ex=120)
        else:
            for _ in range(count):
                store.incr([key], 60)


def test_the_openapi_document_describes_the_endpoints(client, storage):
    response = client.simulate_get("/api/v1/openapi.json")
    assert response.status_code == 200
    document = response.json
    assert document["openapi"].startswith("3.1")
    for path in ("/api/v1/health", "/api/v1/access-requests", "/api/v1/credits/balance", "/api/v1/credits/ledger"):
        assert path in document["paths"]
    request_schema = document["paths"]["/api/v1/access-requests"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]
    name = request_schema["$ref"].rsplit("/", 1)[1]
    assert set(document["components"]["schemas"][name]["required"]) == {"company_name", "contact_name",
                                                                         "contact_email"}
