"""svcctl portal and the owner invitation on approval: links printed once that sign a user in."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import requests
from typer.testing import CliRunner

from models.tenancy import access_requests, portal
from models.tenancy.tables import ApiKey, PortalInvitation
from svcctl.main import app
from svcctl.processes import DEMO_OWNER, _ensure_demo_tenant
from tests.live import ROOT, free_port, wait_until
from tests.portal_fixtures import PASSWORD, PortalClient, shown_secret

runner = CliRunner()


def run_json(*args: str) -> dict | list:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr or result.stdout
    return json.loads(result.stdout)


def accept(client, url: str) -> PortalClient:
    path = url[url.index("/portal"):]
    browser = PortalClient(client)
    assert browser.get(path).status_code == 200
    joined = browser.post(path, {"password": PASSWORD, "password_again": PASSWORD})
    assert joined.status_code == 303, joined.text
    browser.get("/portal")
    return browser


def test_an_invitation_from_the_cli_lets_the_user_in_once(client, alice):
    invited = run_json("portal", "invite", "--tenant", alice.tenant.public_id, "--email", "Boss@Alice.example.com",
                       "--role", "owner")
    assert invited["email"] == "boss@alice.example.com" and invited["role"] == "owner"
    assert "/portal/invitations/pinv_" in invited["invitation_url"]
    token = invited["invitation_url"].rsplit("/", 1)[1]
    assert token not in json.dumps([i.__data__ for i in PortalInvitation.select()], default=str)
    browser = accept(client, invited["invitation_url"])
    assert "Alice Corp" in browser.get("/portal").text
    users = run_json("portal", "users", "--tenant", alice.tenant.public_id)
    assert [(user["email"], user["role"]) for user in users] == [("boss@alice.example.com", "owner")]

    refused = runner.invoke(app, ["portal", "invite", "--tenant", alice.tenant.public_id,
                                  "--email", "boss@alice.example.com", "--role", "viewer"])
    assert refused.exit_code == 1 and "already has a portal user" in refused.stderr
    bad_role = runner.invoke(app, ["portal", "invite", "--tenant", alice.tenant.public_id, "--email", "x@y.example",
                                   "--role", "admin"])
    assert bad_role.exit_code == 1 and "role" in bad_role.stderr


def test_a_password_reset_ends_the_users_sessions(client, alice):
    user = portal.create_user(alice.id, "reset@alice.example.com", "owner", PASSWORD)
    browser = PortalClient(client)
    assert browser.sign_in(user.email).status_code == 303
    reset = run_json("portal", "reset-password", "--email", user.email)
    assert browser.get("/portal").status_code == 303
    assert PortalClient(client).sign_in(user.email, reset["password"]).status_code == 303
    assert PortalClient(client).sign_in(user.email).status_code == 401


def test_approval_can_invite_the_first_owner_instead_of_printing_a_key(client, storage):
    request = access_requests.submit({"company_name": "Initech", "contact_name": "Bill",
                                      "contact_email": "bill@initech.example.com"}, "203.0.113.5")
    approved = run_json("access-requests", "approve", request.public_id, "--invite-owner")
    assert approved["email"] == "bill@initech.example.com" and approved["role"] == "owner"
    assert "key" not in approved and not ApiKey.select().exists()
    assert access_requests.get(request.public_id).status == "approved"
    browser = accept(client, approved["invitation_url"])
    created = browser.post("/portal/keys", {"scopes": "credits:read"})
    key_string = shown_secret(created.text)
    balance = client.simulate_get("/api/v1/credits/balance", headers={"Authorization": f"Bearer {key_string}"})
    assert balance.status_code == 200


def test_the_demo_company_gets_an_owner_whose_password_is_shown_once(client, storage):
    tenant_id, key_string, password = _ensure_demo_tenant()
    assert key_string and password
    assert PortalClient(client).sign_in(DEMO_OWNER, password).status_code == 303
    assert _ensure_demo_tenant() == (tenant_id, None, None)


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_svcctl_up_prints_the_portal_and_a_sign_in_that_works(tmp_path):
    port, log_path = free_port(), tmp_path / "up.log"
    env = {**os.environ, "SVC_DATA_DIR": str(tmp_path / "data"), "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    with open(log_path, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "svcctl.main", "up", "--bind", f"127.0.0.1:{port}"],
                                   cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        printed = wait_until(lambda: re.search(r"sign in\s+(\S+) / (\S+)", log_path.read_text()), timeout=60,
                             message="the demo sign-in")
        email, password = printed.groups()
        assert re.search(rf"^portal +http://127\.0\.0\.1:{port}/portal$", log_path.read_text(), re.MULTILINE)
        base = f"http://127.0.0.1:{port}/portal"
        wait_until(lambda: answers(f"{base}/login"), message="the portal")
        browser = requests.Session()
        form = browser.get(f"{base}/login", timeout=5).text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
        signed_in = browser.post(f"{base}/login", data={"email": email, "password": password, "csrf_token": csrf},
                                 timeout=10)
        assert signed_in.status_code == 200 and signed_in.url == base
        assert "Demo Company" in signed_in.text and "owner@demo.example.com" in signed_in.text
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=40)
