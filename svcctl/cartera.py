"""svcctl cartera."""

import typer

app = typer.Typer(help="Cartera.", no_args_is_help=True)
