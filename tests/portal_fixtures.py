"""A signed-in browser for the portal over the real Falcon app: keeps cookies like a browser does
(path /portal) and posts each form with the CSRF token of the last page it read.

`from tests.portal_fixtures import *` brings the fixtures; helpers are imported by name.
"""

from __future__ import annotations

import re
import time
from itertools import count
from urllib.parse import urlencode

import pytest
from falcon import testing

from models.store import db as database
from models.store.counters import window_start
from models.tenancy import portal, sign_in_throttle
from models.tenancy.tables import PortalUser

__all__ = ["owner", "portal_client"]

PASSWORD = "correct horse battery staple"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_serial = count(1)


class PortalClient:
    def __init__(self, client: testing.TestClient, remote_addr: str = "203.0.113.10",
                 headers: dict[str, str] | None = None):
        self.client = client
        self.cookies: dict[str, str] = {}
        self.csrf: str | None = None
        self.remote_addr = remote_addr
        self.headers = headers or {}  # sent with every request (a browser's Accept-Language)

    def _keep(self, result: testing.Result) -> testing.Result:
        for name, cookie in result.cookies.items():
            if cookie.value:  # unset_cookie sends an empty value that has expired
                self.cookies[name] = cookie.value
            else:
                self.cookies.pop(name, None)
        if found := _CSRF.search(result.text or ""):
            self.csrf = found.group(1)
        return result

    def get(self, path: str, **params) -> testing.Result:
        return self._keep(self.client.simulate_get(path, params=params or None, cookies=self.cookies,
                                                   remote_addr=self.remote_addr, headers=self.headers))

    def post(self, path: str, fields: dict | list | None = None, csrf: str | None | bool = True) -> testing.Result:
        pairs = list(fields.items()) if isinstance(fields, dict) else list(fields or [])
        if csrf is True:
            pairs.append(("csrf_token", self.csrf or ""))
        elif isinstance(csrf, str):
            pairs.append(("csrf_token", csrf))
        body = urlencode(pairs, doseq=True)
        return self._keep(self.client.simulate_post(
            path, body=body, cookies=self.cookies, remote_addr=self.remote_addr,
            headers={**self.headers, "Content-Type": "application/x-www-form-urlencoded"}))

    def sign_in(self, email: str, password: str = PASSWORD) -> testing.Result:
        self.get("/portal/login")
        return self.post("/portal/login", {"email": email, "password": password, "next": "/portal"})


def shown_secret(html: str) -> str:
    """The secret a page shows once (a key, a signing secret, an invitation link)."""
    return re.search(r'id="secret-value">([^<]+)<', html).group(1)


def make_user(tenant_id: int, role: str = "owner", email: str | None = None) -> PortalUser:
    return portal.create_user(tenant_id, email or f"user{next(_serial)}@example.com", role, PASSWORD)


@pytest.fixture
def owner(alice) -> PortalUser:
    return make_user(alice.id, "owner", "owner@alice.example.com")


@pytest.fixture
def portal_client(client) -> PortalClient:
    return PortalClient(client)


def signed_in(client: testing.TestClient, user: PortalUser, headers: dict[str, str] | None = None) -> PortalClient:
    browser = PortalClient(client, headers=headers)
    result = browser.sign_in(user.email)
    assert result.status_code == 303, result.text
    browser.get("/portal")
    return browser


def rows_read(table: str) -> int:
    """Rows PostgreSQL has read from `table` in this transaction, by scans and by index: a page
    read inside one transaction shows what it cost, whatever the list's length."""
    (read,) = database.db.execute_sql(
        "SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables "
        "WHERE relname = %s", (table,)).fetchone()
    return read


def seconds_left_in_window() -> float:
    """What is left of the sign-in throttle's current fixed window: its counts start over after."""
    now = time.time()
    return window_start(sign_in_throttle.LOGIN_WINDOW, now) + sign_in_throttle.LOGIN_WINDOW - now
