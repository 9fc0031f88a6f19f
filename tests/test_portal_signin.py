"""Portal sign-in: invitations, passwords, sessions and their cookies, CSRF, throttling, two-factor."""

from __future__ import annotations

import datetime as dt
import re
import time

import pyotp

from jobs.portal import prune_portal_sessions
from models.clock import utcnow
from models.tenancy import portal, sign_in_throttle
from models.tenancy.tables import ApiKey, PortalInvitation, PortalSession, PortalUser
from tests.live import wait_until
from tests.portal_fixtures import *  # noqa: F403
from tests.portal_fixtures import PASSWORD, PortalClient, make_user, seconds_left_in_window, signed_in
from tests.webhooks_fixtures import configure

SECRET_IN_PAGE = re.compile(r'id="totp-secret">([A-Z2-7]+)<')


def test_an_invitation_sets_a_password_and_signs_in_once(client, alice):
    invitation, token = portal.invite(alice.id, "New.Dev@Alice.example.com", "developer")
    browser = PortalClient(client)
    page = browser.get(f"/portal/invitations/{token}")
    assert page.status_code == 200 and "new.dev@alice.example.com" in page.text and "Alice Corp" in page.text

    differ = browser.post(f"/portal/invitations/{token}", {"password": PASSWORD, "password_again": PASSWORD + "x"})
    assert differ.status_code == 422 and "differ" in differ.text
    short = browser.post(f"/portal/invitations/{token}", {"password": "short", "password_again": "short"})
    assert short.status_code == 422 and "12 to 256" in short.text

    joined = browser.post(f"/portal/invitations/{token}", {"password": PASSWORD, "password_again": PASSWORD})
    assert joined.status_code == 303 and joined.headers["location"] == "/portal"
    overview = browser.get("/portal")
    assert overview.status_code == 200
    assert "new.dev@alice.example.com" in overview.text and ">developer<" in overview.text
    user = PortalUser.get(PortalUser.email == "new.dev@alice.example.com")
    assert (user.tenant_id, user.role) == (alice.id, "developer")
    assert user.password_hash.startswith("$argon2id$") and PASSWORD not in user.password_hash

    again = PortalClient(client).get(f"/portal/invitations/{token}")
    assert again.status_code == 404
    assert PortalClient(client).sign_in("new.dev@alice.example.com").status_code == 303


def test_an_expired_invitation_is_refused(client, alice):
    invitation, token = portal.invite(alice.id, "late@alice.example.com", "viewer")
    PortalInvitation.update(expires_at=utcnow() - dt.timedelta(seconds=1)).where(
        PortalInvitation.id == invitation.id).execute()
    browser = PortalClient(client)
    browser.get("/portal/login")  # for the form's token
    assert browser.get(f"/portal/invitations/{token}").status_code == 404
    posted = browser.post(f"/portal/invitations/{token}", {"password": PASSWORD, "password_again": PASSWORD})
    assert posted.status_code == 404
    assert not PortalUser.select().where(PortalUser.email == "late@alice.example.com").exists()


def test_pages_need_a_session(client, owner):
    browser = PortalClient(client)
    page = browser.get("/portal/keys")
    assert page.status_code == 303 and page.headers["location"] == "/portal/login?next=%2Fportal%2Fkeys"
    posted = browser.post("/portal/keys", {"scopes": "all"}, csrf="anything")
    assert posted.status_code == 303 and posted.headers["location"].startswith("/portal/login")
    assert ApiKey.select().where(ApiKey.tenant == owner.tenant_id).count() == 1  # alice's own, nothing more


def test_session_cookies_are_http_only_and_rotate_at_sign_in(client, owner):
    browser = PortalClient(client)
    browser.get("/portal/login")
    # A session token planted before sign-in (fixation) is not the one sign-in leaves.
    planted = signed_in(client, owner).cookies["svc_portal"]
    browser.cookies["svc_portal"] = planted
    result = browser.post("/portal/login", {"email": owner.email, "password": PASSWORD, "next": "/portal"})
    assert result.status_code == 303
    cookie = result.cookies["svc_portal"]
    assert cookie.value != planted and len(cookie.value) >= 40
    assert cookie.http_only and cookie.same_site == "Lax" and cookie.path == "/portal"
    assert not cookie.secure  # the public URL is http://127.0.0.1 in tests
    # The planted session is gone; the new one works.
    assert portal.session_for(planted) is None
    assert browser.get("/portal").status_code == 200

    stranger = PortalClient(client)
    stranger.cookies["svc_portal"] = planted
    assert stranger.get("/portal").status_code == 303


def test_the_session_cookie_is_secure_when_the_public_url_is_https(client, owner, storage):
    configure(storage, public_url="https://portal.example.com")
    result = PortalClient(client).sign_in(owner.email)
    assert result.status_code == 303 and result.cookies["svc_portal"].secure


def test_forms_without_or_with_a_wrong_csrf_token_are_refused(client, owner):
    browser = signed_in(client, owner)
    before = ApiKey.select().count()
    for token in (None, "", "forged-token-of-the-right-length-0123456789abcd"):
        refused = browser.post("/portal/keys", {"scopes": "credits:read"}, csrf=token if token is not None else False)
        assert refused.status_code == 403 and "Form expired" in refused.text
    assert ApiKey.select().count() == before
    assert browser.post("/portal/keys", {"scopes": "credits:read"}).status_code == 201

    # The sign-in form too: without the pre-session token nobody is signed in.
    fresh = PortalClient(client)
    fresh.get("/portal/login")
    refused = fresh.post("/portal/login", {"email": owner.email, "password": PASSWORD}, csrf="wrong")
    assert refused.status_code == 403 and "svc_portal" not in fresh.cookies
    # A token from another browser's cookie does not pass either.
    other = PortalClient(client)
    other.get("/portal/login")
    fresh.csrf = other.csrf
    assert fresh.post("/portal/login", {"email": owner.email, "password": PASSWORD}).status_code == 403


def test_repeated_wrong_passwords_are_throttled_from_their_address(client, owner):
    browser = PortalClient(client)
    browser.get("/portal/login")
    for _ in range(sign_in_throttle.LOGIN_ATTEMPTS_PER_ADDRESS_EMAIL):
        wrong = browser.post("/portal/login", {"email": owner.email, "password": "not the password!"})
        assert wrong.status_code == 401 and "Wrong email or password" in wrong.text
    # Past the limit even the right password waits, from this address.
    throttled = browser.post("/portal/login", {"email": owner.email, "password": PASSWORD})
    assert throttled.status_code == 429 and "Too many sign-in attempts" in throttled.text
    assert 0 < int(throttled.headers["retry-after"]) <= sign_in_throttle.LOGIN_WINDOW
    assert "svc_portal" not in browser.cookies
    # Not from another (tests/test_security_sign_in.py runs the attack on a live server).
    elsewhere = PortalClient(client, remote_addr="198.51.100.20")
    assert elsewhere.sign_in(owner.email.upper()).status_code == 303
    # Another user is not held up by it, from this address either.
    colleague = make_user(owner.tenant_id, "viewer")
    assert browser.sign_in(colleague.email).status_code == 303


def test_wrong_two_factor_codes_and_current_passwords_are_throttled_too(client, owner):
    # The counts live in fixed windows: start with a few seconds of one ahead (this needs one).
    wait_until(lambda: seconds_left_in_window() >= 5, timeout=10, interval=0.5, message="a window with seconds ahead")
    browser = signed_in(client, owner)
    for _ in range(sign_in_throttle.LOGIN_ATTEMPTS_PER_ADDRESS_EMAIL - 1):  # the sign-in was one
        wrong = browser.post("/portal/security/password", {"current_password": "nope nope nope",
                                                           "new_password": PASSWORD + "!",
                                                           "new_password_again": PASSWORD + "!"})
        assert wrong.status_code == 401
    refused = browser.post("/portal/security/password", {"current_password": PASSWORD,
                                                         "new_password": PASSWORD + "!",
                                                         "new_password_again": PASSWORD + "!"})
    assert refused.status_code == 429
    failed = [entry for entry in portal.audit_log(owner.tenant_id) if entry.action == "session.sign_in_failed"]
    assert len(failed) == sign_in_throttle.LOGIN_ATTEMPTS_PER_ADDRESS_EMAIL - 1
    assert {(entry.actor, entry.details["step"]) for entry in failed} == {(owner.email, "password_change")}


def test_an_unknown_email_and_a_wrong_password_read_the_same(client, owner):
    browser = PortalClient(client)
    browser.get("/portal/login")
    unknown = browser.post("/portal/login", {"email": "nobody@alice.example.com", "password": PASSWORD})
    wrong = browser.post("/portal/login", {"email": owner.email, "password": PASSWORD + "!"})
    assert unknown.status_code == wrong.status_code == 401
    assert unknown.text.replace("nobody@alice.example.com", "") == wrong.text.replace(owner.email, "")


def test_a_password_longer_than_allowed_is_wrong_not_cut(client, alice):
    longest = "p" * portal.MAX_PASSWORD
    user = portal.create_user(alice.id, "long@alice.example.com", "viewer", longest)
    assert PortalClient(client).sign_in(user.email, longest + "anything").status_code == 401
    assert PortalClient(client).sign_in(user.email, longest).status_code == 303


def turn_on_two_factor(browser: PortalClient) -> pyotp.TOTP:
    started = browser.post("/portal/security/two-factor", {"action": "start"})
    totp = pyotp.TOTP(SECRET_IN_PAGE.search(started.text).group(1))
    wrong = browser.post("/portal/security/two-factor", {"action": "confirm", "code": "000000"})
    assert wrong.status_code == 422
    confirmed = browser.post("/portal/security/two-factor", {"action": "confirm", "code": totp.now()})
    assert confirmed.status_code == 303
    return totp


def test_two_factor_sign_in_needs_a_fresh_code(client, owner):
    browser = signed_in(client, owner)
    totp = turn_on_two_factor(browser)
    assert PortalUser.get_by_id(owner.id).has_totp

    again = PortalClient(client)
    result = again.sign_in(owner.email)
    assert result.status_code == 303 and result.headers["location"].startswith("/portal/login/two-factor")
    pending_token = again.cookies["svc_portal"]
    # Halfway: no page but the code's.
    assert again.get("/portal/keys").status_code == 303
    assert again.get("/portal/login/two-factor").status_code == 200
    assert again.post("/portal/login/two-factor", {"code": "123456", "next": "/portal"}).status_code == 401
    # The code that turned two-factor on was used: a later step's code is needed.
    code = totp.at(time.time() + 30)
    done = again.post("/portal/login/two-factor", {"code": code, "next": "/portal/keys"})
    assert done.status_code == 303 and done.headers["location"] == "/portal/keys"
    assert again.cookies["svc_portal"] != pending_token and portal.session_for(pending_token) is None
    assert again.get("/portal/keys").status_code == 200

    replayed = PortalClient(client)
    replayed.sign_in(owner.email)
    replayed.get("/portal/login/two-factor")
    assert replayed.post("/portal/login/two-factor", {"code": code, "next": "/portal"}).status_code == 401


def test_a_company_can_require_two_factor(client, owner, alice):
    viewer = make_user(alice.id, "viewer")
    owner_browser = signed_in(client, owner)
    refused = owner_browser.post("/portal/security/policy", {"require_totp": "on"})
    assert refused.status_code == 409  # the owner turns it on for themselves first
    turn_on_two_factor(owner_browser)
    assert owner_browser.post("/portal/security/policy", {"require_totp": "on"}).status_code == 303
    assert portal.policy_of(alice.id).require_totp

    viewer_browser = signed_in(client, viewer)
    sent = viewer_browser.get("/portal/keys")
    assert sent.status_code == 303 and sent.headers["location"] == "/portal/security?ok=two_factor_required"
    assert "requires it" in viewer_browser.get("/portal/security").text
    turn_on_two_factor(viewer_browser)
    assert viewer_browser.get("/portal/keys").status_code == 200
    assert viewer_browser.post("/portal/security/two-factor/disable").status_code == 409


def test_sign_out_and_sign_out_everywhere(client, owner):
    laptop, phone = signed_in(client, owner), signed_in(client, owner)
    signed_out = laptop.post("/portal/logout")
    assert signed_out.status_code == 303 and "svc_portal" not in laptop.cookies
    assert laptop.get("/portal").status_code == 303
    assert phone.get("/portal").status_code == 200

    tablet = signed_in(client, owner)
    assert phone.post("/portal/logout/everywhere").status_code == 303
    assert tablet.get("/portal").status_code == 303 and phone.get("/portal").status_code == 303
    assert not PortalSession.select().where(PortalSession.user == owner.id).exists()
    actions = [entry.action for entry in portal.audit_log(owner.tenant_id)]
    assert "session.signed_out_everywhere" in actions and "session.signed_out" in actions


def test_an_idle_session_ends(client, owner):
    browser = signed_in(client, owner)
    PortalSession.update(last_seen_at=utcnow() - portal.SESSION_IDLE).execute()
    assert browser.get("/portal").status_code == 303


def test_sign_in_returns_only_to_portal_pages(client, owner):
    browser = PortalClient(client)
    browser.get("/portal/login")
    for target, expected in (("https://evil.example/", "/portal"), ("//evil.example/portal", "/portal"),
                             ("/portal/credits", "/portal/credits")):
        result = browser.post("/portal/login", {"email": owner.email, "password": PASSWORD, "next": target})
        assert result.headers["location"] == expected


def test_ended_sessions_and_old_invitations_are_pruned(client, owner, alice):
    live, idle, expired = (signed_in(client, owner) for _ in range(3))
    PortalSession.update(last_seen_at=utcnow() - portal.SESSION_IDLE).where(
        PortalSession.token_hash == portal._digest(idle.cookies["svc_portal"])).execute()
    PortalSession.update(expires_at=utcnow()).where(
        PortalSession.token_hash == portal._digest(expired.cookies["svc_portal"])).execute()
    old, _token = portal.invite(alice.id, "old@alice.example.com", "viewer")
    recent, _token = portal.invite(alice.id, "recent@alice.example.com", "viewer")
    PortalInvitation.update(expires_at=utcnow() - dt.timedelta(days=8)).where(
        PortalInvitation.id == old.id).execute()
    assert prune_portal_sessions.call_local() == (2, 1)
    assert live.get("/portal").status_code == 200
    assert [i.email for i in PortalInvitation.select()] == ["recent@alice.example.com"]


def test_a_user_changes_their_password_and_other_sessions_end(client, owner):
    here, elsewhere = signed_in(client, owner), signed_in(client, owner)
    new = "a much better passphrase"
    wrong = here.post("/portal/security/password", {"current_password": "nope nope nope", "new_password": new,
                                                    "new_password_again": new})
    assert wrong.status_code == 401 and "current password is wrong" in wrong.text
    differ = here.post("/portal/security/password", {"current_password": PASSWORD, "new_password": new,
                                                     "new_password_again": new + "!"})
    assert differ.status_code == 422
    short = here.post("/portal/security/password", {"current_password": PASSWORD, "new_password": "short",
                                                    "new_password_again": "short"})
    assert short.status_code == 422
    changed = here.post("/portal/security/password", {"current_password": PASSWORD, "new_password": new,
                                                      "new_password_again": new})
    assert changed.status_code == 303
    assert here.get("/portal").status_code == 200 and elsewhere.get("/portal").status_code == 303
    assert PortalClient(client).sign_in(owner.email).status_code == 401
    assert PortalClient(client).sign_in(owner.email, new).status_code == 303
