"""Hot reads whose SQL peewee builds once per process and engine rather than on every call.

Building a statement's text (peewee's `Node.sql`) costs more than running it and reading its rows
on a one-row read. A `Prepared` query is built once with example arguments; its text and the
position of each argument among the parameters are kept per engine dialect (SQLite's `?`,
PostgreSQL's `%s`), and each call binds new arguments to that text. Rows come back through the
query's own cursor wrapper: model objects, dicts or tuples exactly as the query would give; or,
for a page whose dicts are made straight from its rows, as the driver gives them (`driver_rows`):
on a page of 100 rows, peewee's model objects and its conversions of each field cost more than
the statement and the JSON together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from models.store.db import db

_CONSTANT = -1


class Prepared:
    def __init__(self, build: Callable[..., Any], *examples: Any) -> None:
        """`build(*examples)` makes the query; each example stands for an argument of every call and
        must reach the driver as it is (a whole number or text distinct from the query's constants)."""
        self._query = build(*examples)
        self._examples = examples
        self._spelled: dict[str, tuple[str, tuple[tuple[int, Any], ...]]] = {}

    def _statement(self) -> tuple[str, tuple[tuple[int, Any], ...]]:
        dialect = db.obj.param
        spelled = self._spelled.get(dialect)
        if spelled is None:
            sql, params = self._query.sql()
            slots = tuple((self._slot(value), value) for value in params)
            missing = set(range(len(self._examples))) - {index for index, _value in slots}
            if missing:
                raise ValueError(f"arguments {sorted(missing)} do not reach the statement as given: {sql}")
            spelled = self._spelled[dialect] = (sql, slots)
        return spelled

    def _slot(self, value: Any) -> int:
        for index, example in enumerate(self._examples):
            if type(example) is type(value) and example == value:
                return index
        return _CONSTANT

    def _cursor(self, args: tuple) -> Any:
        sql, slots = self._statement()
        params = [value if index == _CONSTANT else args[index] for index, value in slots]
        return db.obj.execute_sql(sql, params)

    def rows(self, *args: Any) -> list:
        """The query's rows for these arguments, as the query itself would return them."""
        return list(self._query._get_cursor_wrapper(self._cursor(args)))

    def driver_rows(self, *args: Any) -> list[tuple]:
        """The rows as the driver gives them, no field's conversion applied: SQLite's timestamps
        are text (`models.clock.stored_isoformat` writes them as the contract does), JSON is text, SQLite's
        booleans are 0 and 1."""
        return self._cursor(args).fetchall()

    def driver_row(self, *args: Any) -> tuple | None:
        """The first row as the driver gives it, or None (every row is read, so that no statement
        stays open on SQLite: build the query with `.limit(1)`)."""
        rows = self._cursor(args).fetchall()
        return rows[0] if rows else None

    def first(self, *args: Any):
        """The first row, or None (a query built with `.limit(1)` reads no more)."""
        rows = self.rows(*args)
        return rows[0] if rows else None

