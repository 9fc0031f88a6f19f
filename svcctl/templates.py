"""svcctl templates."""

import typer

app = typer.Typer(help="Templates.", no_args_is_help=True)
