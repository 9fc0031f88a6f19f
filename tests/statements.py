"""The statements a block of code runs, as the database driver saw them, and what SQLite's planner
makes of them."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from models.store import db as database

# Four ids or more in a list, as SQLite's trace writes the values bound.
ID_LIST = re.compile(r'\bid"? IN \((?:\d+, ){3}')


@contextlib.contextmanager
def statements_run() -> Iterator[list[str]]:
    """Every statement the driver runs on this thread's connection inside the block (SQLite's
    own trace; on PostgreSQL, each cursor's `execute`)."""
    ran: list[str] = []
    conn = database.db.connection()
    if database.is_postgres():
        from psycopg2.extensions import cursor

        class Counted(cursor):
            def execute(self, sql, params=None):
                ran.append(sql if isinstance(sql, str) else sql.decode())
                return super().execute(sql, params)

            def executemany(self, sql, params):
                for row in params:
                    self.execute(sql, row)

        factory, conn.cursor_factory = conn.cursor_factory, Counted
        state = database.db.obj._state
        kept, state.row_cursor = getattr(state, "row_cursor", None), None
        try:
            yield ran
        finally:
            conn.cursor_factory, state.row_cursor = factory, kept
    else:
        conn.set_trace_callback(ran.append)
        try:
            yield ran
        finally:
            conn.set_trace_callback(None)


def looked_up_by_index(statements: list[str]) -> list[tuple[str, list[str]]]:
    """Of SQLite statements given four ids or more, those it would not run by key, each with its
    plan (models/store/db.py, `unindexed`)."""
    found = []
    for sql in statements:
        if ID_LIST.search(sql):
            plan = [row[3] for row in database.db.execute_sql("EXPLAIN QUERY PLAN " + sql).fetchall()]
            if not any("INTEGER PRIMARY KEY" in step for step in plan):
                found.append((sql[:200], plan))
    return found
