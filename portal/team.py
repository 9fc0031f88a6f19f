"""The company's users and invitations, the audit log (owners), and each user's sign-in
security: two-factor, signing out everywhere, and the company's two-factor policy."""

from __future__ import annotations

from babel import Locale

from config.i18n import N_
from models.errors import Invalid
from models.tenancy import portal
from models.tenancy.tables import ROLES, PortalUser
from portal.signin import checked, throttle
from portal.web import BASE, ctx, form, locale_of, page, paginate_by_keyset, redirect, render, require, say, say_error


class Users:
    @page()
    def on_get(self, req, resp):
        require(req, "users")
        tenant_id = ctx(req).tenant_id
        render(req, resp, "users.html", users=list(portal.users_of(tenant_id)),
               invitations=list(portal.invitations_of(tenant_id)), roles=ROLES, invited=None)

    @page(write="users")
    def on_post(self, req, resp):
        context = ctx(req)
        invitation, token = portal.invite(context.tenant_id, form(req).get("email"), form(req).get("role"),
                                          context.user, context.ip)
        render(req, resp, "users.html", status=201, users=list(portal.users_of(context.tenant_id)),
               invitations=list(portal.invitations_of(context.tenant_id)), roles=ROLES,
               invited={"invitation": invitation, "url": portal.invitation_url(token)})


class UserRole:
    @page(write="users")
    def on_post(self, req, resp, user_id: str):
        portal.change_role(ctx(req).user, user_id, form(req).get("role"), ctx(req).ip)
        redirect(resp, f"{BASE}/users", "role_changed")


class UserRemove:
    @page(write="users")
    def on_post(self, req, resp, user_id: str):
        portal.remove_user(ctx(req).user, user_id, ctx(req).ip)
        redirect(resp, f"{BASE}/users", "user_removed")


class Audit:
    @page()
    def on_get(self, req, resp):
        require(req, "users")
        render(req, resp, "audit.html", listing=paginate_by_keyset(req, portal.audit_log(ctx(req).tenant_id)))


def _security(req, resp, status: int = 200, **values) -> None:
    user = PortalUser.get_by_id(ctx(req).user.id)
    # The company's locale named in the reader's language: "español (Chile)".
    company_locale = Locale.parse(user.tenant.locale).get_display_name(locale_of(req).language)
    render(req, resp, "security.html", status=status, me=user, policy=portal.policy_of(user.tenant_id),
           company_locale=company_locale, setup=values.get("setup"), error=values.get("error"),
           password_error=values.get("password_error"))


class Security:
    @page(setup=True)
    def on_get(self, req, resp):
        _security(req, resp)


class TwoFactorSetup:
    """Start (a new secret to scan) or confirm (a code from the app) two-factor for oneself."""

    @page(setup=True)
    def on_post(self, req, resp):
        user = PortalUser.get_by_id(ctx(req).user.id)
        if form(req).get("action") == "confirm":
            if portal.confirm_totp(user, form(req).get("code"), ctx(req).ip):
                redirect(resp, f"{BASE}/security", "two_factor_on")
                return
            secret = portal.pending_totp_secret(user)
            _security(req, resp, status=422,
                      error=say(req, N_("That code is not valid; check the app's clock and try again.")),
                      setup=secret and {"secret": secret, "uri": portal.provisioning_uri(user, secret)})
            return
        secret = portal.begin_totp(user)
        _security(req, resp, setup={"secret": secret, "uri": portal.provisioning_uri(user, secret)})


class TwoFactorDisable:
    @page(setup=True)
    def on_post(self, req, resp):
        portal.disable_totp(ctx(req).user, ctx(req).ip)
        redirect(resp, f"{BASE}/security", "two_factor_off")


class PasswordChange:
    @page(setup=True)
    def on_post(self, req, resp):
        fields, context = form(req), ctx(req)
        if fields.raw("new_password") != fields.raw("new_password_again"):
            _security(req, resp, status=422, password_error=say(req, N_("The two new passwords differ.")))
            return
        throttle(req, context.user.email, "password_change")
        try:
            changed = portal.change_password(context.user, fields.raw("current_password"), fields.raw("new_password"),
                                             context.session, context.ip)
        except Invalid as error:
            _security(req, resp, status=422, password_error=say_error(req, error))
            return
        checked(req, context.user.email, "password_change", changed)
        if not changed:
            _security(req, resp, status=401, password_error=say(req, N_("The current password is wrong.")))
            return
        redirect(resp, f"{BASE}/security", "password_changed")


class Policy:
    @page(write="security")
    def on_post(self, req, resp):
        portal.set_require_totp(ctx(req).user, form(req).get("require_totp") == "on", ctx(req).ip)
        redirect(resp, f"{BASE}/security", "policy_saved")


class Language:
    """The user's own language for the pages, or none: the browser's decides."""

    @page(setup=True)
    def on_post(self, req, resp):
        portal.set_language(ctx(req).user, form(req).get("language") or None, ctx(req).ip)
        redirect(resp, f"{BASE}/security", "language_saved")


ROUTES = [
    ("/users", Users()),
    ("/users/{user_id}/role", UserRole()),
    ("/users/{user_id}/remove", UserRemove()),
    ("/audit", Audit()),
    ("/security", Security()),
    ("/security/two-factor", TwoFactorSetup()),
    ("/security/two-factor/disable", TwoFactorDisable()),
    ("/security/password", PasswordChange()),
    ("/security/policy", Policy()),
    ("/security/language", Language()),
]
