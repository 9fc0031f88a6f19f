"""Key revocation and rate limits against a live multi-worker gunicorn: each worker keeps its own
copy of a key row and counts high-volume limits in memory (api/ratelimit.py), and neither may let
a revoked key or a spent limit through for long; each keeps a copy of the wallets it has read
(models/tenancy/wallet_copies.py), and no read may miss a change committed before it was sent."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from models.store.db import atomic, connection, execute
from models.tenancy import credits
from models.tenancy.keys import create_key, revoke_key
from models.tenancy.wallet_copies import CHANNEL
from tests.live import LiveService, env_for, wait_until

pytestmark = pytest.mark.slow


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


def _shown(service: LiveService, key_string: str, field: str, reads: int = 12) -> set:
    return {requests.get(f"{service.api_url}/api/v1/credits/balance", timeout=10,
                         headers={"Authorization": f"Bearer {key_string}", "Connection": "close"}).json()["data"][field]
            for _ in range(reads)}


def test_every_worker_answers_a_change_committed_by_another_process_at_once(storage, alice, tmp_path):
    _key, key_string = create_key(alice.tenant, ["all"])
    service = _api(storage, tmp_path)
    try:
        assert _shown(service, key_string, "reserved_balance", reads=30) == {0}  # every worker keeps a copy
        for step in range(1, 6):
            credits.reserve(alice.id, 10)  # this process: committed, and its wallet marked, when it returns
            assert _shown(service, key_string, "reserved_balance") == {10 * step}
    finally:
        service.stop()


def test_concurrent_changes_are_each_seen_by_the_next_read(storage, alice, tmp_path):
    """Threads of this process reserve while they read through the workers: every read shows at
    least the reservations that had returned before it was sent, and never more than were made."""
    _key, key_string = create_key(alice.tenant, ["all"])
    service = _api(storage, tmp_path)
    returned, lock, seen = [0], threading.Lock(), []
    threads, rounds = 4, 15

    def reserve_and_read():
        with connection():
            for _ in range(rounds):
                credits.reserve(alice.id, 1)
                with lock:
                    returned[0] += 1
                    at_least = returned[0]
                (reserved,) = _shown(service, key_string, "reserved_balance", reads=1)
                seen.append((at_least, reserved))

    try:
        _shown(service, key_string, "reserved_balance", reads=30)
        workers = [threading.Thread(target=reserve_and_read) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert len(seen) == threads * rounds
        assert all(at_least <= reserved <= threads * rounds for at_least, reserved in seen), seen
        assert _shown(service, key_string, "reserved_balance", reads=30) == {threads * rounds}
    finally:
        service.stop()


def test_a_change_made_behind_the_service_is_answered_within_a_second(storage, alice, tmp_path):
    _key, key_string = create_key(alice.tenant, ["all"])
    service = _api(storage, tmp_path)
    try:
        assert _shown(service, key_string, "low_balance_threshold", reads=30) == {0}
        with atomic():  # SQL by hand: nothing marks the wallet changed
            execute('UPDATE "wallet" SET "low_balance_threshold" = 77 WHERE "tenant_id" = ?', (alice.id,))
        changed_at = time.monotonic()
        time.sleep(max(0.0, changed_at + storage.wallet_copy_seconds + 0.05 - time.monotonic()))
        assert _shown(service, key_string, "low_balance_threshold", reads=30) == {77}
    finally:
        service.stop()


def _listeners() -> int:
    """This database's sessions listening for wallet changes, which the service's workers open."""
    return execute("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND query = ?",
                   (f"LISTEN {CHANNEL}",)).fetchone()[0]


WARM_UP_READS = 120


@contextlib.contextmanager
def _another_host(storage, persona, tmp_path, field: str) -> Iterator[tuple[LiveService, str]]:
    """Three workers as another host would run them, each holding a copy of the wallet (`field`
    still 0) and listening: a data directory (so a table of versions) of their own on the same
    database, and copies kept for a minute, so that only what they hear on the channel can tell
    them of a change in time. Yields the service and a key."""
    if not storage.database_url:
        pytest.skip("hosts share a database only on PostgreSQL")
    _key, key_string = create_key(persona.tenant, ["all"], rate_limit=10_000)
    service = _api(storage, tmp_path, SVC_DATA_DIR=str(tmp_path / "other-host"), SVC_WALLET_COPY_SECONDS="60",
                   SVC_TENANT_RATE_LIMIT="100000", SVC_READ_RATE_LIMIT="100000")
    try:
        # The kernel, not gunicorn, hands each connection to a worker, and under load unevenly:
        # enough reads that each of the three serves some and so holds a copy.
        wait_until(lambda: _shown(service, key_string, field, reads=WARM_UP_READS) == {0} and _listeners() >= 3,
                   message="every worker listening, with a copy")
        yield service, key_string
    finally:
        service.stop()


def test_a_change_through_another_host_reaches_every_worker_at_once(storage, alice, tmp_path):
    with _another_host(storage, alice, tmp_path, "reserved_balance") as (service, key_string):
        for step in range(1, 4):
            credits.reserve(alice.id, 10)
            wait_until(lambda expected=10 * step: _shown(service, key_string, "reserved_balance") == {expected},
                       timeout=10, interval=0.02, message="the change on every worker")


def test_a_worker_that_lost_its_listening_connection_drops_its_copies(storage, alice, tmp_path):
    with _another_host(storage, alice, tmp_path, "low_balance_threshold") as (service, key_string):
        with atomic():  # SQL by hand: nobody marks or announces it, and the copies hold for a minute
            execute('UPDATE "wallet" SET "low_balance_threshold" = 77 WHERE "tenant_id" = ?', (alice.id,))
        assert _shown(service, key_string, "low_balance_threshold", reads=30) == {0}
        execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query = ?", (f"LISTEN {CHANNEL}",))
        # Deaf, a worker reads the database; listening again, it has dropped the copies it kept,
        # since what changed meanwhile went unheard.
        wait_until(lambda: _shown(service, key_string, "low_balance_threshold", reads=30) == {77}, timeout=10,
                   message="every worker answering from the database")
        wait_until(lambda: _listeners() >= 3, message="every worker listening again")
        credits.reserve(alice.id, 10)
        wait_until(lambda: _shown(service, key_string, "reserved_balance") == {10}, timeout=10, interval=0.02,
                   message="the next change on every worker")
