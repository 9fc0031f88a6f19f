"""svcctl: administration, batch imports and the service's processes."""

from __future__ import annotations

import sys

import typer

from config import ConfigError

try:
    from svcctl import (
        access_requests,
        accounts,
        campaigns,
        cartera,
        credits,
        db,
        keys,
        processes,
        sim,
        templates,
        tenants,
        webhooks,
    )
except ConfigError as error:
    # Some commands declare queue tasks, which read the settings as they load: a bad setting
    # must still be one line, not a traceback.
    sys.stderr.write(f"error: {error}\n")
    raise SystemExit(2) from None

app = typer.Typer(help="Run and administer the messaging campaign and receivables service.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.command("up")(processes.up)
app.command("serve")(processes.serve)
app.command("worker")(processes.worker)
app.add_typer(db.app, name="db")
app.add_typer(tenants.app, name="tenants")
app.add_typer(keys.app, name="keys")
app.add_typer(credits.app, name="credits")
app.add_typer(access_requests.app, name="access-requests")
app.add_typer(accounts.app, name="accounts")
app.add_typer(templates.app, name="templates")
app.add_typer(campaigns.app, name="campaigns")
app.add_typer(cartera.app, name="cartera")
app.add_typer(webhooks.app, name="webhooks")
app.add_typer(sim.app, name="sim")

if __name__ == "__main__":
    app()
