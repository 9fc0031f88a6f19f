"""svcctl: administration, batch imports and the service's processes."""

from __future__ import annotations

import importlib
import sys

import typer
from typer.core import TyperGroup

from config import ConfigError
from svcctl import operations, processes

# Command group → the module whose `app` it is, in the order the help lists them.
GROUPS = {"db": "db", "tenants": "tenants", "keys": "keys", "credits": "credits",
          "access-requests": "access_requests", "accounts": "accounts", "templates": "templates",
          "campaigns": "campaigns", "cartera": "receivables", "payments": "payments", "webhooks": "webhooks",
          "inbox": "inbox", "portal": "portal", "secrets": "secrets", "sim": "sim"}


class LazyGroups(TyperGroup):
    """Imports a command group's module only when that group is asked for.

    Every area pulls in its own dependencies (the queue, falcon, the simulator...); a command
    loading them all paid for that at every start, a large share of a short run such as an
    import (bench/import_debts.py). The help still lists every group: it asks for each.
    """

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return [*super().list_commands(ctx), *(name for name in GROUPS if name not in self.commands)]

    def get_command(self, ctx: typer.Context, cmd_name: str):
        if cmd_name in GROUPS and cmd_name not in self.commands:
            try:
                module = importlib.import_module(f"svcctl.{GROUPS[cmd_name]}")
            except ConfigError as error:
                # Some commands declare queue tasks, which read the settings as they load: a bad
                # setting must still be one line, not a traceback.
                sys.stderr.write(f"error: {error}\n")
                raise SystemExit(2) from None
            group = typer.main.get_group(module.app)
            group.name = cmd_name
            self.commands[cmd_name] = group
        return super().get_command(ctx, cmd_name)


app = typer.Typer(help="Run and administer the messaging campaign and receivables service.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=LazyGroups)
app.command("up")(processes.up)
app.command("serve")(processes.serve)
app.command("worker")(processes.worker)
app.command("status")(operations.status)

if __name__ == "__main__":
    app()
