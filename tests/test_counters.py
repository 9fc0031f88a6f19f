"""The embedded profile's shared-memory tallies: exact across processes, windowed, no database write."""

from __future__ import annotations

import multiprocessing

from models.store.counters import SharedMemoryCounters


def _hammer(path, key: str, times: int) -> None:
    store = SharedMemoryCounters(path)
    for _ in range(times):
        store.incr([key, "common"], 60, 1_000_000.0)


def test_processes_counting_together_lose_no_hit(tmp_path):
    path = tmp_path / "service.db.counters"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_hammer, args=(path, f"own:{index}", 400)) for index in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    store = SharedMemoryCounters(path)
    counts = store.incr(["common", "own:0", "own:3"], 60, 1_000_000.0, {"common": 0, "own:0": 0, "own:3": 0})
    assert counts == {"common": 1600, "own:0": 400, "own:3": 400}


def test_a_new_window_starts_from_zero_and_amounts_add_up(tmp_path):
    store = SharedMemoryCounters(tmp_path / "c")
    assert store.incr(["k"], 60, 120.0, {"k": 5}) == {"k": 5}
    assert store.incr(["k"], 60, 179.0) == {"k": 6}
    assert store.incr(["k"], 60, 180.0) == {"k": 1}  # the next minute


def test_the_sqlite_profile_counts_rate_limits_without_writing_the_database(client, storage, alice):
    from models.store.counters import counters
    from models.store.db import execute, is_postgres

    for _ in range(3):
        assert client.simulate_get("/api/v1/credits/balance", headers=alice.headers).status_code == 200
    if not is_postgres():
        assert isinstance(counters(), SharedMemoryCounters)
    assert execute('SELECT COUNT(*) FROM "rate_counter"').fetchone()[0] == 0
