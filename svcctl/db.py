"""svcctl db upgrade."""

from __future__ import annotations

import typer

from config import ConfigError, get_settings
from models.setup import init_db
from models.store.db import upgrade
from svcctl.output import JSON_OPTION, err, fail, print_json

app = typer.Typer(help="The database schema.", no_args_is_help=True)


def migrate() -> list[str]:
    init_db(get_settings())
    return upgrade()


@app.command("upgrade")
def upgrade_command(as_json: bool = JSON_OPTION):
    """Apply pending schema migrations (safe to run again)."""
    try:
        applied = migrate()
    except ConfigError as error:
        fail(str(error))
    if as_json:
        print_json({"applied": applied})
    elif applied:
        err.print(f"applied {len(applied)} migration(s): {', '.join(applied)}")
    else:
        err.print("schema is up to date")
