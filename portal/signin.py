"""Sign-in, the two-factor step, sign-out, and accepting an invitation; every password or code
goes through the throttle (`models/tenancy/sign_in_throttle.py`) first, counted in the metrics."""

from __future__ import annotations

import functools
import math
import threading
import time

import falcon
from prometheus_client import Counter, Histogram

from config import get_settings
from config.i18n import N_
from models.errors import Invalid
from models.tenancy import portal, sign_in_throttle
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
    say,
    say_error,
    set_session_cookie,
)

ATTEMPTS = Counter("svc_portal_sign_in_attempts_total",
                   "Portal sign-in attempts (passwords, two-factor codes, a password change's current password), "
                   "by step and outcome", ["step", "outcome"])
DELAYS = Histogram("svc_portal_sign_in_delay_seconds", "How long slowed sign-in attempts waited before their check",
                   buckets=(1, 2, 4, 8))
WAITING_SHARE = 4  # at most one request thread in four waits to check a slowed sign-in
_REFUSALS = {"address": N_("Too many sign-in attempts from this address. Try again in %(minutes)s min."),
             "address_email": N_("Too many sign-in attempts for this email from this address. Try again in "
                                 "%(minutes)s min."),
             "busy": N_("Too many sign-ins are being slowed down right now. Try again in %(minutes)s min.")}


@functools.cache
def _waiting_places() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(max(1, get_settings().web_threads // WAITING_SHARE))


def _throttled(refusal: str, retry_after: int) -> Refused:
    return Refused(429, N_("Too many attempts"), _REFUSALS[refusal], {"Retry-After": str(retry_after)},
                   minutes=math.ceil(retry_after / 60))


def throttle(req: falcon.Request, email: str, step: str) -> None:
    """Before a password or code of `email` is checked: 429 once the address has used up its
    attempts (for every email, or for this one), else a wait while the email is being guessed at
    from elsewhere. Waiting holds a thread, so at most a share of them wait; past it, 429 too."""
    verdict = sign_in_throttle.check(email, ctx(req).ip, step)
    if verdict.refused:
        ATTEMPTS.labels(step, f"refused_{verdict.refused}").inc()
        raise _throttled(verdict.refused, verdict.retry_after)
    if verdict.delay:
        places = _waiting_places()
        if not places.acquire(blocking=False):
            ATTEMPTS.labels(step, "refused_busy").inc()
            raise _throttled("busy", math.ceil(verdict.delay))
        try:
            time.sleep(verdict.delay)
        finally:
            places.release()
        DELAYS.observe(verdict.delay)


def checked(req: falcon.Request, email: str, step: str, accepted: bool) -> None:
    """Count what the check said; a failure also counts against the email and reaches the audit log."""
    ATTEMPTS.labels(step, "accepted" if accepted else "failed").inc()
    if not accepted:
        sign_in_throttle.failed(email, ctx(req).ip, step)


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
        throttle(req, email, "password")
        user = portal.authenticate(email, form(req).raw("password"))
        checked(req, email, "password", user is not None)
        if user is None:
            render(req, resp, "login.html", status=401, email=email, next=target,
                   error=say(req, N_("Wrong email or password.")))
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
        throttle(req, session.user.email, "two_factor")
        completed = portal.complete_totp(session, form(req).get("code"), ctx(req).ip)
        checked(req, session.user.email, "two_factor", completed is not None)
        if completed is None:
            render(req, resp, "two_factor.html", status=401, next=target, error=say(req, N_("That code is not valid.")))
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
        _invitation_page(req, resp, portal.open_invitation(token))

    @page(public=True)
    def on_post(self, req, resp, token: str):
        invitation = portal.open_invitation(token)
        password = form(req).raw("password")
        if password != form(req).raw("password_again"):
            _invitation_page(req, resp, invitation, 422, say(req, N_("The two passwords differ.")))
            return
        try:
            user = portal.accept_invitation(token, password, ctx(req).ip)
        except Invalid as error:
            _invitation_page(req, resp, invitation, 422, say_error(req, error))
            return
        _sign_in(req, resp, user, BASE)


def _invitation_page(req, resp, invitation, status: int = 200, error: str | None = None) -> None:
    # Nobody is signed in yet: the inviting company's locale is the fallback.
    render(req, resp, "invitation.html", status=status, company=invitation.tenant, invitation=invitation, error=error)


ROUTES = [
    ("/login", Login()),
    ("/login/two-factor", TwoFactor()),
    ("/logout", Logout()),
    ("/logout/everywhere", LogoutEverywhere()),
    ("/invitations/{token}", Invitation()),
]
