"""svcctl accounts."""

import typer

app = typer.Typer(help="Accounts.", no_args_is_help=True)
