"""Transactions and their hooks (models/db.py), on both engines."""

from __future__ import annotations

import pytest

from models.db import after_commit, atomic
from models.events import Event, emit, listening
from models.tenants import create_tenant


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
