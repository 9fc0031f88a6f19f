"""svcctl campaigns."""

import typer

app = typer.Typer(help="Campaigns.", no_args_is_help=True)
