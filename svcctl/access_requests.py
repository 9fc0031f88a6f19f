"""svcctl access-requests: list, show, approve (creates the tenant and prints its key once), reject."""

from __future__ import annotations

import typer

from models.store.db import atomic
from models.tenancy import access_requests, portal
from models.tenancy.tables import AccessRequest
from svcctl.output import JSON_OPTION, err, record, show, table, with_database
from svcctl.portal import print_invitation

app = typer.Typer(help="Access requests from companies.", no_args_is_help=True)


@app.command("list")
@with_database
def list_requests(status: str = typer.Option(None, "--status", help="pending, approved or rejected"),
                  as_json: bool = JSON_OPTION):
    """List access requests, newest first."""
    query = AccessRequest.select().order_by(AccessRequest.id.desc())
    if status:
        query = query.where(AccessRequest.status == status)
    data = [request.as_dict() for request in query]
    show(data, as_json, lambda: table("access requests", ("id", "company", "contact", "status", "created"),
                                      [(r["id"], r["company_name"], r["contact_email"], r["status"],
                                        r["created_at"]) for r in data]))


@app.command("show")
@with_database
def show_request(request_id: str, as_json: bool = JSON_OPTION):
    data = access_requests.get(request_id).as_dict()
    show(data, as_json, lambda: record(data))


@app.command("approve")
@with_database
def approve(request_id: str,
            scope: list[str] = typer.Option(["all"], "--scope", help="Scopes of the first key (default all)."),
            invite_owner: bool = typer.Option(False, "--invite-owner",
                                              help="Instead of a key, invite the contact as the company's first "
                                                   "portal owner (the link is printed once)."),
            as_json: bool = JSON_OPTION):
    """Approve: creates the tenant and its first key (or owner invitation), printed once."""
    if invite_owner:
        with atomic():
            request, tenant, _none = access_requests.approve(request_id, scope, with_key=False)
            invitation, token = portal.invite(tenant.id, request.contact_email, "owner")
        print_invitation(invitation, token, tenant.public_id, as_json)
        return
    request, tenant, key_string = access_requests.approve(request_id, scope)
    data = {**request.as_dict(), "tenant_id": tenant.public_id, "key": key_string}
    show(data, as_json, lambda: record(data, "access request approved"))
    if not as_json:
        err.print("[yellow]The key is shown only now; send it to the company over a safe channel.[/yellow]")


@app.command("reject")
@with_database
def reject(request_id: str, reason: str = typer.Option(None, "--reason"), as_json: bool = JSON_OPTION):
    data = access_requests.reject(request_id, reason).as_dict()
    show(data, as_json, lambda: record(data, "access request rejected"))
