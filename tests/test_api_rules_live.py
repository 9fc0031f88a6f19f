"""Key revocation and rate limits against a live multi-worker gunicorn: each worker keeps its own
copy of a key row and counts high-volume limits in memory (api/ratelimit.py), and neither may let
a revoked key or a spent limit through for long."""

from __future__ import annotations

import time

import requests

from models.tenants import create_key, revoke_key
from tests.live import LiveService, env_for, wait_until


def _api(storage, tmp_path, **env) -> LiveService:
    service = LiveService({**env_for(storage), **env}, tmp_path, web_workers=3)
    service.start_api()
    wait_until(lambda: service._answers(f"{service.api_url}/api/v1/openapi.json"), message="the API")
    return service


def _balance(service: LiveService, key_string: str) -> int:
    # A new connection each time, so the requests spread over the workers.
    return requests.get(f"{service.api_url}/api/v1/credits/balance", timeout=10,
                        headers={"Authorization": f"Bearer {key_string}", "Connection": "close"}).status_code


def test_a_revoked_key_is_refused_by_every_worker_within_a_second(storage, alice, tmp_path):
    key, key_string = create_key(alice.tenant, ["all"])
    service = _api(storage, tmp_path)
    try:
        # Every worker has read (and keeps) the key row.
        assert [_balance(service, key_string) for _ in range(30)] == [200] * 30
        revoke_key(key.public_id)
        revoked_at = time.monotonic()
        time.sleep(max(0.0, revoked_at + 1.05 - time.monotonic()))
        assert [_balance(service, key_string) for _ in range(30)] == [401] * 30
    finally:
        service.stop()


def test_a_high_limit_counted_in_worker_memory_still_stops_the_key(storage, alice, tmp_path):
    limit = 1000  # at LOCAL_FLOOR: the first half is counted in each worker's memory
    _key, key_string = create_key(alice.tenant, ["all"], rate_limit=limit)
    # The key's limit is the tightest: the tenant's and the endpoint's are raised out of the way.
    service = _api(storage, tmp_path, SVC_TENANT_RATE_LIMIT="100000", SVC_READ_RATE_LIMIT="100000")
    try:
        wait_until(lambda: time.time() % 60 < 30, timeout=40, message="the start of a minute window")
        statuses = [_balance(service, key_string) for _ in range(limit + 5)]
        assert statuses[:limit] == [200] * limit
        assert statuses[limit:] == [429] * 5
    finally:
        service.stop()
