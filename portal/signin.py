"""Sign-in, the two-factor step, sign-out, and accepting an invitation."""

from __future__ import annotations

import falcon

from models.errors import Invalid
from models.tenancy import portal
from models.tenancy.tables import PortalSession, PortalUser
from portal.web import (
    BASE,
    Refused,
    clear_session_cookie,
    ctx,
    form,
    page,
    redirect,
    render,
    set_session_cookie,
)

THROTTLED = Refused(429, "Too many attempts", "Too many sign-in attempts for this email or from this address. "
                                              "Wait 15 minutes and try again.")


def _next(value: str | None) -> str:
    """Only a path inside the portal: never an open redirect to another site."""
    if value and value.startswith(BASE) and not value.startswith("//") and "\\" not in value:
        return value
    return BASE


def _sign_in(req: falcon.Request, resp: falcon.Response, user: PortalUser, target: str) -> None:
    # A fresh token at every sign-in: a session id planted before it is never promoted.
    previous = ctx(req).session
    if previous is not None:
        PortalSession.delete().where(PortalSession.id == previous.id).execute()
    session, token = portal.start_session(user, ctx(req).ip, req.user_agent)
    set_session_cookie(resp, token)
    if session.pending_totp:
        redirect(resp, f"{BASE}/login/two-factor?{falcon.to_query_str({'next': target})[1:]}")
    else:
        redirect(resp, target)


class Login:
    @page(public=True)
    def on_get(self, req, resp):
        if ctx(req).user is not None:
            redirect(resp, BASE)
            return
        render(req, resp, "login.html", email="", error=None, next=_next(req.get_param("next")))

    @page(public=True)
    def on_post(self, req, resp):
        email, target = form(req).get("email"), _next(form(req).get("next"))
        if not portal.login_allowed(email, ctx(req).ip):
            raise THROTTLED
        user = portal.authenticate(email, form(req).raw("password"))
        if user is None:
            render(req, resp, "login.html", status=401, email=email, next=target,
                   error="Wrong email or password.")
            return
        _sign_in(req, resp, user, target)


class TwoFactor:
    @page(pending=True)
    def on_get(self, req, resp):
        if not ctx(req).session.pending_totp:
            redirect(resp, BASE)
            return
        render(req, resp, "two_factor.html", error=None, next=_next(req.get_param("next")))

    @page(pending=True)
    def on_post(self, req, resp):
        session, target = ctx(req).session, _next(form(req).get("next"))
        if not session.pending_totp:
            redirect(resp, target)
            return
        if not portal.login_allowed(session.user.email, ctx(req).ip):
            raise THROTTLED
        completed = portal.complete_totp(session, form(req).get("code"), ctx(req).ip)
        if completed is None:
            render(req, resp, "two_factor.html", status=401, next=target, error="That code is not valid.")
            return
        session, token = completed
        set_session_cookie(resp, token)
        redirect(resp, target)


class Logout:
    @page(pending=True)
    def on_post(self, req, resp):
        portal.end_session(ctx(req).session, ctx(req).ip)
        clear_session_cookie(resp)
        redirect(resp, f"{BASE}/login", "signed_out")


class LogoutEverywhere:
    @page(setup=True)
    def on_post(self, req, resp):
        portal.end_all_sessions(ctx(req).user, ctx(req).ip)
        clear_session_cookie(resp)
        redirect(resp, f"{BASE}/login", "signed_out_everywhere")


class Invitation:
    @page(public=True)
    def on_get(self, req, resp, token: str):
        invitation = portal.open_invitation(token)
        render(req, resp, "invitation.html", invitation=invitation, company=invitation.tenant.name, error=None)

    @page(public=True)
    def on_post(self, req, resp, token: str):
        invitation = portal.open_invitation(token)
        password = form(req).raw("password")
        if password != form(req).raw("password_again"):
            render(req, resp, "invitation.html", status=422, invitation=invitation, company=invitation.tenant.name,
                   error="The two passwords differ.")
            return
        try:
            user = portal.accept_invitation(token, password, ctx(req).ip)
        except Invalid as error:
            render(req, resp, "invitation.html", status=422, invitation=invitation, company=invitation.tenant.name,
                   error=error.message)
            return
        _sign_in(req, resp, user, BASE)


ROUTES = [
    ("/login", Login()),
    ("/login/two-factor", TwoFactor()),
    ("/logout", Logout()),
    ("/logout/everywhere", LogoutEverywhere()),
    ("/invitations/{token}", Invitation()),
]
