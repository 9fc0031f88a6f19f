"""svcctl webhooks."""

import typer

app = typer.Typer(help="Webhooks.", no_args_is_help=True)
