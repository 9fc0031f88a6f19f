"""Nobody is locked out of the portal by a stranger: sign-in attempts are throttled per address and
per (address, email), and an email guessed at from many addresses is slowed, never refused.

The lockout attack runs against a live gunicorn from distinct loopback addresses (127.0.0.0/8 is
all this host's), on SQLite and on PostgreSQL + Redis; the clock is moved the way the counters
take it (`now=`) to follow an attacker over hours.
"""

from __future__ import annotations

import re
import time

import pytest
import requests
from requests.adapters import HTTPAdapter

from models.store.counters import window_start
from models.tenancy import portal, sign_in_throttle
from models.tenancy.sign_in_throttle import (
    LOGIN_ATTEMPTS_PER_ADDRESS,
    LOGIN_ATTEMPTS_PER_ADDRESS_EMAIL,
    LOGIN_FIRST_DELAY,
    LOGIN_FREE_FAILURES,
    LOGIN_MAX_DELAY,
    LOGIN_WINDOW,
    delay_after,
)
from tests.live import LiveService, env_for, wait_until
from tests.operations_fixtures import parse, total
from tests.portal_fixtures import *  # noqa: F403  (owner)
from tests.portal_fixtures import PASSWORD, make_user, seconds_left_in_window

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
WRONG = "not the password at all"
STRANGER, OTHER_STRANGER, OWNER_ADDRESS = "127.0.0.2", "127.0.0.3", "127.0.0.4"


class FromAddress(HTTPAdapter):
    """Every connection from one source address."""

    def __init__(self, address: str):
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, source_address=(self.address, 0), **kwargs)


class Browser:
    """A browser at `address`: keeps the portal's cookies and posts the sign-in form with its token."""

    def __init__(self, api_url: str, address: str):
        self.api_url = api_url
        self.session = requests.Session()
        self.session.mount("http://", FromAddress(address))

    def sign_in(self, email: str, password: str) -> requests.Response:
        form = self.session.get(f"{self.api_url}/portal/login", timeout=10)
        token = CSRF.search(form.text).group(1)
        return self.session.post(f"{self.api_url}/portal/login", timeout=30, allow_redirects=False,
                                 data={"email": email, "password": password, "next": "/portal",
                                       "csrf_token": token})


@pytest.fixture
def api(storage, tmp_path):
    live = LiveService(env_for(storage), tmp_path)
    live.start_api()
    wait_until(lambda: LiveService._answers(f"{live.api_url}/healthz"), message="the API")
    yield live
    live.stop()


def test_wrong_passwords_from_one_address_do_not_keep_the_user_out_from_another(api, owner):
    # The counts live in fixed 15-minute windows: start with a minute of one ahead (the test needs
    # about ten seconds; a wider margin only makes the suite wait longer, up to the margin itself).
    wait_until(lambda: seconds_left_in_window() > 60, timeout=70, interval=1, message="a fresh window")
    stranger = Browser(api.api_url, STRANGER)
    answers = [stranger.sign_in(owner.email, WRONG) for _ in range(15)]
    assert [answer.status_code for answer in answers] == [401] * LOGIN_ATTEMPTS_PER_ADDRESS_EMAIL + [429] * 5
    refused = answers[-1]
    assert "Too many sign-in attempts for this email from this address" in refused.text
    assert 0 < int(refused.headers["Retry-After"]) <= LOGIN_WINDOW

    # A second stranger's failures push the email past its free failures: from here it is slowed.
    other = Browser(api.api_url, OTHER_STRANGER)
    assert [other.sign_in(owner.email, WRONG).status_code for _ in range(2)] == [401, 401]
    failures = LOGIN_ATTEMPTS_PER_ADDRESS_EMAIL + 2
    assert delay_after(failures) > 0

    started = time.monotonic()
    signed_in = Browser(api.api_url, OWNER_ADDRESS)
    answer = signed_in.sign_in(owner.email, PASSWORD)
    assert answer.status_code == 303 and answer.headers["Location"] == "/portal"
    assert time.monotonic() - started >= delay_after(failures)
    assert signed_in.session.get(f"{api.api_url}/portal", timeout=10, allow_redirects=False).status_code == 200
    # The address that used up its attempts stays refused for this email, the right password included.
    assert stranger.sign_in(owner.email, PASSWORD).status_code == 429

    samples = parse(requests.get(f"{api.api_url}/metrics", timeout=10).text)
    attempts = {outcome: total(samples, "svc_portal_sign_in_attempts_total", step="password", outcome=outcome)
                for outcome in ("accepted", "failed", "refused_address_email", "refused_address")}
    assert attempts == {"accepted": 1, "failed": failures, "refused_address_email": 6, "refused_address": 0}
    assert total(samples, "svc_portal_sign_in_delay_seconds_count") == 2  # the second stranger's last, the owner's
    assert total(samples, "svc_portal_sign_in_delay_seconds_sum") == delay_after(failures - 1) + delay_after(failures)
    assert owner.email not in str(samples)

    log = [(entry.action, entry.actor, entry.ip, (entry.details or {}).get("limit"))
           for entry in reversed(list(portal.audit_log(owner.tenant_id)))]
    failed = [entry for entry in log if entry[0] == "session.sign_in_failed"]
    assert failed == ([("session.sign_in_failed", "anonymous", STRANGER, None)] * LOGIN_ATTEMPTS_PER_ADDRESS_EMAIL
                      + [("session.sign_in_failed", "anonymous", OTHER_STRANGER, None)] * 2)
    # One line when the address is first refused, not one per refusal.
    assert [entry for entry in log if entry[0] == "session.sign_in_throttled"] == [
        ("session.sign_in_throttled", "anonymous", STRANGER, "address_email")]
    assert ("session.signed_in", owner.email, OWNER_ADDRESS, None) in log


def test_ten_wrong_passwords_every_quarter_hour_never_keep_the_owner_out(storage, owner):
    start = window_start(LOGIN_WINDOW, time.time())
    for quarter in range(8):  # two hours of it
        now = start + quarter * LOGIN_WINDOW + 1
        for _ in range(10):
            assert sign_in_throttle.check(owner.email, "198.51.100.7", "password", now).refused is None
            sign_in_throttle.failed(owner.email, "198.51.100.7", "password", now)
        assert sign_in_throttle.check(owner.email, "198.51.100.7", "password", now).refused == "address_email"
        # The owner, from their own address, is neither refused nor slowed, and the password is checked.
        verdict = sign_in_throttle.check(owner.email, "203.0.113.5", "password", now + 60)
        assert (verdict.refused, verdict.delay) == (None, 0.0)
        assert portal.authenticate(owner.email, PASSWORD).id == owner.id


def test_an_email_guessed_at_from_many_addresses_is_slowed_up_to_a_bound_never_refused(storage, owner):
    now = window_start(LOGIN_WINDOW, time.time()) + 1
    delays = []
    for attempt in range(LOGIN_FREE_FAILURES + 6):
        address = f"198.51.100.{attempt + 1}"  # a fresh address each time
        verdict = sign_in_throttle.check(owner.email, address, "password", now)
        assert verdict.refused is None
        delays.append(verdict.delay)
        sign_in_throttle.failed(owner.email, address, "password", now)
    assert delays == [0.0] * (LOGIN_FREE_FAILURES + 1) + [LOGIN_FIRST_DELAY * 2 ** n for n in range(4)] + [
        LOGIN_MAX_DELAY]
    assert delay_after(10**9) == LOGIN_MAX_DELAY
    # Another user's email is not slowed by it; the next window starts clean.
    colleague = make_user(owner.tenant_id, "viewer")
    assert sign_in_throttle.check(colleague.email, "203.0.113.5", "password", now).delay == 0.0
    assert sign_in_throttle.check(owner.email, "203.0.113.5", "password", now + LOGIN_WINDOW).delay == 0.0


def test_an_address_is_refused_past_its_attempts_whatever_the_emails(storage, owner):
    now = window_start(LOGIN_WINDOW, time.time()) + 1
    for index in range(LOGIN_ATTEMPTS_PER_ADDRESS):
        assert sign_in_throttle.check(f"guess{index}@example.com", "198.51.100.9", "password", now).refused is None
    assert sign_in_throttle.check(owner.email, "198.51.100.9", "password", now).refused == "address"
    assert sign_in_throttle.check(owner.email, "198.51.100.10", "password", now).refused is None
    [throttled] = [entry for entry in portal.audit_log(owner.tenant_id) if entry.action == "session.sign_in_throttled"]
    assert (throttled.ip, throttled.details) == ("198.51.100.9", {"limit": "address", "step": "password"})


def test_an_ipv6_client_counts_by_its_64(storage, owner):
    now = window_start(LOGIN_WINDOW, time.time()) + 1
    for index in range(LOGIN_ATTEMPTS_PER_ADDRESS_EMAIL):
        # A host moving through its own /64 is still one address.
        assert sign_in_throttle.check(owner.email, f"2001:db8:1:2::{index + 1:x}", "password", now).refused is None
    assert sign_in_throttle.check(owner.email, "2001:db8:1:2:ffff::1", "password", now).refused == "address_email"
    assert sign_in_throttle.check(owner.email, "2001:db8:1:3::1", "password", now).refused is None
