"""How every command talks: data to stdout (a rich table, or JSON with --json), errors as one
line on stderr with a non-zero exit."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import orjson
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from config import ConfigError, get_settings
from models.db import connection, init_db
from models.errors import DomainError

out = Console()
err = Console(stderr=True)

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON.")


# What must not reach a terminal as it is: control characters (C0 but tab and newline, DEL, C1),
# which start escape sequences, and the bidirectional overrides that reorder what is shown.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def plain(value: Any) -> Text:
    """A value from outside (a company name, a reference, an error message) as text: never read as
    markup, and every character that could drive the terminal shown as a visible escape (`\\x1b`)."""
    raw = "" if value is None else str(value)
    return Text(_UNPRINTABLE.sub(lambda match: match.group().encode("unicode_escape").decode(), raw))


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(Text.assemble(("error:", "red"), " ", plain(message)), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")


def table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Table:
    grid = Table(title=None if title is None else plain(title), show_lines=False)
    for column in columns:
        grid.add_column(column)
    for row in rows:
        grid.add_row(*[plain(value) for value in row])
    return grid


def show(data: Any, as_json: bool, render: Callable[[], Any]) -> None:
    if as_json:
        print_json(data)
    else:
        out.print(render())


def record(data: dict, title: str | None = None) -> Table:
    return table(title, ("field", "value"), data.items())


def with_database(command: Callable) -> Callable:
    """Run a command with the configured database open; domain and config errors become one line."""

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

    return run
