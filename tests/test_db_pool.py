"""The PostgreSQL pool after the server cut its connections (a restart, backends terminated)."""

from __future__ import annotations

import threading

import pytest
from peewee import InterfaceError, OperationalError

from models.store.db import connection, db, execute
from tests.conftest import _pg_admin

pytestmark = pytest.mark.parametrize("storage", ["postgres"], indirect=True)
POOLED = 6


def statement_fails(run_statement) -> bool:
    """One statement on a connection from the pool, taken by a thread of its own (the test's
    thread holds a connection of its own throughout)."""
    failed = []

    def run() -> None:
        try:
            with connection():
                run_statement("SELECT 1")
        except (OperationalError, InterfaceError):
            failed.append(True)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return bool(failed)


# Statements the ORM runs, and statements written by hand for hot paths.
@pytest.mark.parametrize("run_statement", [lambda sql: db.execute_sql(sql), execute], ids=["orm", "by-hand"])
def test_one_statement_fails_after_the_server_cut_every_connection_not_one_per_pooled_connection(storage,
                                                                                                  run_statement):
    taken, cut, given_back = threading.Barrier(POOLED + 1), threading.Event(), threading.Event()

    def use(hold: bool) -> None:
        with connection():
            db.execute_sql("SELECT 1")
            taken.wait()
            if hold:  # in use while the server cuts it, given back afterwards unused
                cut.wait()
        if hold:
            given_back.set()

    threads = [threading.Thread(target=use, args=(index == 0,)) for index in range(POOLED)]
    for thread in threads:
        thread.start()
    taken.wait()
    admin = _pg_admin()
    try:
        admin.cursor().execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                               (db.obj.database,))
    finally:
        admin.close()

    # All but one are idle in the pool, given back a moment ago: the pool would hand each out
    # unprobed. The first statement finds the cut; the pool then drops the idle ones and probes
    # the one still in use once it comes back.
    failures = [statement_fails(run_statement)]
    cut.set()
    given_back.wait(10)
    for thread in threads:
        thread.join()
    failures += [statement_fails(run_statement) for _ in range(POOLED * 2)]
    assert failures == [True] + [False] * POOLED * 2
