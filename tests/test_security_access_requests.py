"""A flood of access requests from one address is refused, whatever email each one gives, and the
queue an administrator reviews stays bounded."""

from __future__ import annotations

import pytest
import requests

from models.tenancy import access_requests
from models.tenancy.access_requests import MAX_PENDING, MAX_PENDING_PER_IP
from models.tenancy.tables import AccessRequest
from tests.live_fixtures import *  # noqa: F403  (live_service)


def request_body(n: int) -> dict:
    return {"company_name": f"Flood {n}", "contact_name": "Mallory", "contact_email": f"m{n}@flood.test"}


def test_one_address_changing_its_email_cannot_flood_the_queue(live_service):
    url = live_service.api_url + "/api/v1/access-requests"
    statuses = []
    with requests.Session() as session:
        for n in range(500):
            response = session.post(url, json=request_body(n), timeout=10)
            statuses.append(response.status_code)
            if response.status_code == 429:
                assert response.json()["error"]["code"] == "rate_limited"
                assert response.json()["message"]
                assert int(response.headers["Retry-After"]) >= 1
                assert response.headers["RateLimit-Remaining"] == "0"
            else:
                assert response.status_code == 201, response.text
    assert statuses.count(201) <= MAX_PENDING_PER_IP
    assert statuses.count(429) == 500 - statuses.count(201)
    assert AccessRequest.select().where(AccessRequest.status == "pending").count() == statuses.count(201)


def test_the_pending_queue_is_bounded_across_addresses_and_reviews_free_it(client, storage):
    def submit(n: int, ip: str):
        return client.simulate_post("/api/v1/access-requests", json=request_body(n), remote_addr=ip)

    for n in range(MAX_PENDING):
        assert submit(n, f"198.51.{n // 250}.{n % 250 + 1}").status_code == 201
    refused = submit(MAX_PENDING, "203.0.113.7")
    assert refused.status_code == 429
    assert refused.json["error"]["details"]["scope"] == "access_requests_pending"
    assert int(refused.headers["retry-after"]) > 0

    oldest = AccessRequest.select().order_by(AccessRequest.id).first()
    access_requests.reject(oldest.public_id, "spam")
    assert submit(MAX_PENDING + 1, "203.0.113.7").status_code == 201


def test_one_address_has_a_bounded_number_of_requests_pending_past_any_minute(storage):
    for n in range(MAX_PENDING_PER_IP):
        access_requests.submit(request_body(n), "192.0.2.44")
    with pytest.raises(access_requests.ReviewQueueFull) as refused:
        access_requests.submit(request_body(99), "192.0.2.44")
    assert refused.value.details["scope"] == "access_requests_pending_per_ip"
    access_requests.submit(request_body(100), "192.0.2.45")
