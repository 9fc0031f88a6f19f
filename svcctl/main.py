"""svcctl: administration, batch imports and the service's processes."""

from __future__ import annotations

import typer

from svcctl import processes
from svcctl.lazy import LazyGroup


class Commands(LazyGroup):
    # In the order the help lists them, after up, serve and worker.
    lazy_commands = {"status": "svcctl.operations:status", "db": "svcctl.db:app", "tenants": "svcctl.tenants:app",
                     "keys": "svcctl.keys:app", "credits": "svcctl.credits:app",
                     "access-requests": "svcctl.access_requests:app", "accounts": "svcctl.accounts:app",
                     "templates": "svcctl.templates:app", "campaigns": "svcctl.campaigns:app",
                     "cartera": "svcctl.receivables:app", "payments": "svcctl.payments:app",
                     "webhooks": "svcctl.webhooks:app", "inbox": "svcctl.inbox:app", "portal": "svcctl.portal:app",
                     "secrets": "svcctl.secrets:app", "sim": "svcctl.sim:app"}


app = typer.Typer(help="Run and administer the messaging campaign and receivables service.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=Commands)
app.command("up")(processes.up)
app.command("serve")(processes.serve)
app.command("worker")(processes.worker)

if __name__ == "__main__":
    app()
