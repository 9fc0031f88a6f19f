"""How every command talks: data to stdout (a rich table, or JSON with --json), errors as one
line on stderr with a non-zero exit."""

from __future__ import annotations

import datetime as dt
import functools
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import orjson
import peewee
import typer
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from config import ConfigError, get_settings
from models.errors import DomainError
from models.setup import init_db
from models.store.db import connection, pending_migrations, storage_unavailable

# No guessing at what a value is: rich's highlighter would colour numbers, paths and words that look
# like calls in our sentences and in values from outside alike. What is styled, we style.
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON.")


# What must not reach a terminal as it is: control characters (C0 but tab and newline, DEL, C1),
# which start escape sequences, and the bidirectional overrides that reorder what is shown.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def plain(value: Any) -> Text:
    """A value from outside (a company name, a reference, an error message) as text: never read as
    markup, and every character that could drive the terminal shown as a visible escape (`\\x1b`)."""
    raw = "" if value is None else str(value)
    return Text(_UNPRINTABLE.sub(lambda match: match.group().encode("unicode_escape").decode(), raw))


def styled(*parts: Any) -> Text:
    """A line of ours with values from outside in it: a (words, style) pair is ours and styled, a Text
    is kept as it was built, anything else is shown by `plain` (never read as markup)."""
    return Text.assemble(*(part if isinstance(part, tuple | Text) else plain(part) for part in parts))


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(styled(("error:", "red"), " ", message), soft_wrap=True)
    raise typer.Exit(code)


def moment_option(name: str, raw: str | None) -> dt.datetime | None:
    """An option's ISO 8601 date or date-time (UTC when it names no offset), or None when not given."""
    if raw is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(raw)
    except ValueError:
        fail(f"{name}: expected an ISO 8601 date or date-time, e.g. 2026-11-01 or 2026-11-01T00:00:00-03:00, "
             f"got {raw!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")


# What an operator copies: never cut or wrapped, and the last column to give way.
_IDENTIFIER = re.compile(r"^(?:[a-z]+_[A-Za-z0-9_.-]{6,}|[a-z][a-z0-9+.-]*://\S+)$")
_IDENTIFYING_HEADERS = {"id", "key", "url", "field", "value", "name", "tenant", "campaign", "endpoint", "number",
                        "event id", "external_id", "account", "debt"}
_BORDERS = 1  # the table's left edge; each column adds its padding and right edge (3)


def _tokens(text: str) -> list[str]:
    return text.split() or [""]


class _Column:
    def __init__(self, header: str, cells: list[Text]):
        self.header = header
        self.cells = cells
        shown = [cell.plain for cell in cells]
        longest_token = max(cell_len(token) for cell in shown for token in _tokens(cell)) if cells else 0
        self.natural = max([cell_len(header), *(cell_len(cell) for cell in shown)])
        # Narrower than its longest token, a column would have to break an id, a key or a URL.
        self.minimum = max(longest_token, *(cell_len(word) for word in _tokens(header)), 1)
        self.identifying = header in _IDENTIFYING_HEADERS or any(
            _IDENTIFIER.match(token) for cell in shown for token in _tokens(cell))
        self.width = self.natural


def _fit(columns: list[_Column], available: int) -> int:
    """Narrow the columns of words (never below their longest token) until the table fits;
    returns the table's width."""
    for column in columns:
        column.width = column.natural
    total = _BORDERS + sum(column.width + 3 for column in columns)
    while total > available:
        shrinkable = [column for column in columns if column.width > column.minimum]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda column: column.width)
        step = min(widest.width - widest.minimum, total - available)
        widest.width -= step
        total -= step
    return total


def table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Table:
    """A table that fits the console without cutting what an operator copies.

    Ids, keys and URLs are never cut or wrapped: columns of words wrap first, then the columns
    that identify nothing are dropped from the right (the caption names them; --json has all).
    If the identifying columns alone are wider than the console, the table is printed wider.
    A cell given as a Text is ours and keeps its style; any other value is shown by `plain`.
    """
    headers = list(columns)
    data = [[value if isinstance(value, Text) else plain(value) for value in row] for row in rows]
    shown = [_Column(header, [row[index] for row in data]) for index, header in enumerate(headers)]
    available = out.width
    dropped: list[str] = []
    total = _fit(shown, available)
    while total > available:
        optional = [column for column in shown[1:] if not column.identifying]
        if not optional:
            break
        shown.remove(optional[-1])
        dropped.insert(0, optional[-1].header)
        total = _fit(shown, available)
    heading = None if title is None else plain(title)
    if heading and shown and heading.cell_len > total and heading.cell_len <= available:
        shown[-1].width += heading.cell_len - total  # so the title reads on one line
        total = heading.cell_len
    caption = f"not shown at this width: {', '.join(dropped)} (--json has every field)" if dropped else None
    grid = Table(title=heading, caption=caption, show_lines=False, width=total if total > available else None)
    for column in shown:
        grid.add_column(column.header, width=column.width, overflow="fold")
    for index in range(len(data)):
        grid.add_row(*[column.cells[index] for column in shown])
    return grid


def show(data: Any, as_json: bool, render: Callable[[], Any]) -> None:
    if as_json:
        print_json(data)
    else:
        # Never cropped: a table wider than the console (its ids alone) is printed whole.
        out.print(render(), crop=False)


def record(data: dict, title: str | None = None) -> Table:
    return table(title, ("field", "value"), data.items())


def with_database(command: Callable) -> Callable:
    """Run a command with the configured database open; domain and config errors become one line,
    and so do a database that does not answer and one whose schema is behind (a first run, or
    SVC_DATA_DIR pointing elsewhere)."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            init_db(get_settings())
            with connection():
                return command(*args, **kwargs)
        except ConfigError as error:
            fail(str(error))
        except DomainError as error:
            fail(error.message)
        except peewee.DatabaseError as error:
            if storage_unavailable(error):  # the driver's first line names the host, never the password
                fail(f"the database did not answer: {str(error).strip().splitlines()[0]}")
            try:
                pending = pending_migrations()
            except peewee.DatabaseError:
                raise error from None
            if not pending:
                raise
            fail(f"the database's schema is not up to date ({len(pending)} migration(s) not applied): "
                 "run `svcctl db upgrade` first")

    return run
