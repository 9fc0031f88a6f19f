"""svcctl portal: invite a company's user (the link is printed once), list users, reset a password."""

from __future__ import annotations

import typer

from models.clock import isoformat
from models.tenancy import portal
from models.tenancy.tables import ROLES, PortalInvitation
from models.tenancy.tenants import get_tenant
from svcctl.output import JSON_OPTION, err, record, show, table, with_database

app = typer.Typer(help="The company portal's users.", no_args_is_help=True)


def print_invitation(invitation: PortalInvitation, token: str, tenant_id: str, as_json: bool) -> None:
    data = {"tenant_id": tenant_id, "email": invitation.email, "role": invitation.role,
            "invitation_url": portal.invitation_url(token), "expires_at": isoformat(invitation.expires_at)}
    show(data, as_json, lambda: record(data, "invitation created"))
    if not as_json:
        err.print("[yellow]The link is shown only now and works once; send it to the user over a safe channel."
                  "[/yellow]")


@app.command("invite")
@with_database
def invite(tenant: str = typer.Option(..., "--tenant", help="Tenant id (ten_…)."),
           email: str = typer.Option(..., "--email"),
           role: str = typer.Option("owner", "--role", help=f"One of {', '.join(ROLES)}."),
           as_json: bool = JSON_OPTION):
    """Invite a user to a company's portal; prints a one-time link that expires in 72 hours."""
    owner = get_tenant(tenant)
    invitation, token = portal.invite(owner.id, email, role)
    print_invitation(invitation, token, owner.public_id, as_json)


@app.command("users")
@with_database
def users(tenant: str = typer.Option(..., "--tenant"), as_json: bool = JSON_OPTION):
    """A company's portal users."""
    data = [{"id": user.public_id, "email": user.email, "role": user.role, "two_factor": user.has_totp,
             "last_sign_in_at": isoformat(user.last_sign_in_at)} for user in portal.users_of(get_tenant(tenant).id)]
    show(data, as_json, lambda: table("portal users", ("id", "email", "role", "two-factor", "last sign-in"),
                                      [tuple(row.values()) for row in data]))


@app.command("reset-password")
@with_database
def reset_password(email: str = typer.Option(..., "--email"), as_json: bool = JSON_OPTION):
    """Give a user a new generated password (printed once) and end their sessions."""
    password = portal.generated_password()
    user = portal.reset_password(email, password)
    data = {"email": user.email, "password": password}
    show(data, as_json, lambda: record(data, "password reset"))
