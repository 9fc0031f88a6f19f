"""Command groups that import a command's module only when that command is asked for.

Every area pulls in its own dependencies (the queue, falcon, the gateway's HTTP client, the
simulators...). A command that loaded them all paid for them at every start: a large share of a
short run, such as an ERP job importing a few debts (bench/import_debts.py times a long one).
"""

from __future__ import annotations

import importlib
import sys

import typer
from typer.core import TyperCommand, TyperGroup

from config import ConfigError


class LazyGroup(TyperGroup):
    """A group whose `lazy_commands` load when asked for; the help, asking for each, still lists them.

    `lazy_commands` maps a command's name to "module:attribute": a Typer app, which becomes a group
    of that name, or a command's function. They are listed after the commands registered as usual.
    """

    lazy_commands: dict[str, str] = {}

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return [*super().list_commands(ctx), *(name for name in self.lazy_commands if name not in self.commands)]

    def get_command(self, ctx: typer.Context, cmd_name: str) -> TyperCommand | TyperGroup | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            self.commands[cmd_name] = _load(cmd_name, self.lazy_commands[cmd_name])
        return super().get_command(ctx, cmd_name)


def _load(name: str, target: str) -> TyperCommand | TyperGroup:
    module_name, attribute = target.split(":")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except ConfigError as error:
        # Some commands declare queue tasks, which read the settings as they load: a bad setting
        # must still be one line, not a traceback.
        sys.stderr.write(f"error: {error}\n")
        raise SystemExit(2) from None
    if isinstance(found, typer.Typer):
        command = typer.main.get_group(found)
    else:
        alone = typer.Typer()
        alone.command(name)(found)
        command = typer.main.get_command(alone)  # a Typer of one command is that command
    command.name = name
    return command
