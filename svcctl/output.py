"""How every command talks: data to stdout (a rich table, or JSON with --json), errors as one
line on stderr with a non-zero exit."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import orjson
import typer
from rich.console import Console
from rich.table import Table

from config import ConfigError, get_settings
from models.db import connection, init_db
from models.errors import DomainError

out = Console()
err = Console(stderr=True)

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON.")


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")


def table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Table:
    grid = Table(title=title, show_lines=False)
    for column in columns:
        grid.add_column(column)
    for row in rows:
        grid.add_row(*["" if value is None else str(value) for value in row])
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
