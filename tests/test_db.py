"""Transactions and their hooks (models/store/db.py), on both engines."""

from __future__ import annotations

import peewee
import pytest

from models.events.outbox import emit, listening
from models.events.tables import Event
from models.store.db import after_commit, atomic, db, execute, fetch_one, is_postgres
from models.tenancy.tenants import create_tenant


def test_after_commit_hooks_run_once_the_outermost_transaction_commits(storage):
    tenant = create_tenant("Hooks")
    seen: list[tuple[str, int]] = []

    def count_events() -> None:
        seen.append(("after", Event.select().where(Event.tenant == tenant.id).count()))

    with atomic():
        emit(tenant.id, "message.sent", {"n": 1})
        after_commit(count_events)
        with atomic():  # a savepoint: not the commit
            after_commit(count_events)  # the same hook twice in one transaction runs once
        assert seen == []
    # It ran after the commit, and sees what was committed.
    assert seen == [("after", 1)]
    # Outside a transaction: at once.
    after_commit(lambda: seen.append(("now", 0)))
    assert seen[-1] == ("now", 0)


def test_after_commit_hooks_never_run_for_a_rollback_and_a_failing_hook_is_only_logged(storage, caplog):
    tenant = create_tenant("Rollback")
    seen: list[str] = []
    with pytest.raises(RuntimeError), atomic():
        emit(tenant.id, "message.sent", {"n": 1})
        after_commit(lambda: seen.append("rolled back"))
        raise RuntimeError("undo")
    assert seen == [] and Event.select().where(Event.tenant == tenant.id).count() == 0

    def broken() -> None:
        raise ValueError("the hook broke")

    with atomic():
        after_commit(broken)
        after_commit(lambda: seen.append("next"))
    assert seen == ["next"] and "the hook broke" in caplog.text


def test_writing_events_tells_the_listeners_once_per_commit(storage):
    tenant = create_tenant("Listeners")
    told: list[int] = []
    with listening([lambda: told.append(Event.select().where(Event.tenant == tenant.id).count())]):
        with atomic():
            for n in range(3):
                emit(tenant.id, "message.sent", {"n": n})
            assert told == []
        assert told == [3]
        with pytest.raises(RuntimeError), atomic():
            emit(tenant.id, "message.sent", {"n": 4})
            raise RuntimeError("undo")
        assert told == [3]


def test_hand_written_reads_answer_the_same_for_every_kind_of_parameter(storage):
    tenant = create_tenant("Reads Co")
    # Whole numbers are written into the statement on PostgreSQL; a negative one must stay a number
    # (`- -2`, never a comment), and other parameters still go through the driver.
    assert fetch_one("SELECT ? - ?, ?", (1, -2, "a'b")) == (3, "a'b")
    assert fetch_one("SELECT ? - ?", [5, 7]) == (-2,)
    assert fetch_one('SELECT "name" FROM "tenant" WHERE "id" = ?', (tenant.id,)) == ("Reads Co",)
    assert fetch_one('SELECT "name" FROM "tenant" WHERE "id" = ?', (tenant.id + 1000,)) is None
    assert execute('SELECT "id" FROM "tenant" WHERE "id" IN (?, ?)', (tenant.id, -1)).fetchall() == [(tenant.id,)]


def test_a_hand_written_read_after_the_connection_was_swapped_runs_on_the_new_one(storage):
    tenant = create_tenant("Swap Co")
    assert fetch_one('SELECT "name" FROM "tenant" WHERE "id" = ?', (tenant.id,)) == ("Swap Co",)
    db.close()  # the thread's kept cursor belongs to the connection given back here
    db.connect()
    assert fetch_one('SELECT "name" FROM "tenant" WHERE "id" = ?', (tenant.id,)) == ("Swap Co",)
    with pytest.raises(peewee.ProgrammingError if is_postgres() else peewee.OperationalError):
        fetch_one('SELECT 1 FROM "no_such_table" WHERE "id" = ?', (tenant.id,))
