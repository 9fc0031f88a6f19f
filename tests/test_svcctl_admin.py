"""svcctl administration: tenants, keys, credits, access requests, db upgrade, configuration errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from models.tenancy import credits
from models.tenancy.keys import authenticate
from models.tenancy.tables import ApiKey
from svcctl.main import app
from tests.live import free_port

runner = CliRunner()


def run(*args: str, ok: bool = True):
    result = runner.invoke(app, list(args))
    if ok:
        assert result.exit_code == 0, result.stderr or result.stdout
    return result


def run_json(*args: str):
    return json.loads(run(*args, "--json").stdout)


def test_a_tenant_and_a_key_created_from_the_cli_authenticate(client, storage):
    tenant = run_json("tenants", "create", "Globex")
    assert tenant["id"].startswith("ten_")
    key = run_json("keys", "create", "--tenant", tenant["id"], "--scope", "credits:read",
                   "--scope", "campaigns:read", "--allow-ip", "127.0.0.1", "--rate-limit", "30")
    assert key["key"].startswith("svc_live_key_")
    assert (key["scopes"], key["allowed_ips"], key["rate_limit"]) == (
        ["campaigns:read", "credits:read"], ["127.0.0.1/32"], 30)
    response = client.simulate_get("/api/v1/credits/balance", headers={"Authorization": f"Bearer {key['key']}"},
                                   remote_addr="127.0.0.1")
    assert response.status_code == 200
    assert response.headers["ratelimit-limit"] == "30"


def test_the_key_list_never_shows_secrets(storage):
    tenant = run_json("tenants", "create", "Globex")
    created = run_json("keys", "create", "--tenant", tenant["id"], "--scope", "all")
    listed = run_json("keys", "list", "--tenant", tenant["id"])
    assert [item["id"] for item in listed] == [created["id"]]
    assert created["key"].split(".", 1)[1] not in json.dumps(listed)
    assert "key" not in listed[0]


def test_rotate_and_revoke(storage):
    tenant = run_json("tenants", "create", "Globex")
    created = run_json("keys", "create", "--tenant", tenant["id"], "--scope", "all")
    rotated = run_json("keys", "rotate", created["id"])
    assert rotated["id"] == created["id"] and rotated["key"] != created["key"]
    assert authenticate(created["key"]) is None
    assert authenticate(rotated["key"]) is not None
    assert run_json("keys", "revoke", created["id"])["status"] == "revoked"
    assert authenticate(rotated["key"]) is None


def test_an_unknown_scope_is_one_clear_line(storage):
    tenant = run_json("tenants", "create", "Globex")
    result = run("keys", "create", "--tenant", tenant["id"], "--scope", "campaigns:destroy", ok=False)
    assert result.exit_code != 0
    assert "unknown scope 'campaigns:destroy'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert ApiKey.select().count() == 0


def test_a_missing_tenant_is_one_clear_line(storage):
    result = run("credits", "show", "--tenant", "ten_missing", ok=False)
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: no tenant ten_missing"


def test_a_tenants_locale_and_time_zone_are_set_at_creation_and_later(storage):
    created = run_json("tenants", "create", "Globex", "--timezone", "America/Santiago", "--locale", "es-cl")
    assert (created["locale"], created["timezone"]) == ("es_CL", "America/Santiago")
    assert run_json("tenants", "create", "Initech")["locale"] == "en_US"  # the default
    changed = run_json("tenants", "set", created["id"], "--locale", "pt_BR")
    assert (changed["locale"], changed["timezone"]) == ("pt_BR", "America/Santiago")
    changed = run_json("tenants", "set", created["id"], "--timezone", "America/Sao_Paulo")
    assert (changed["locale"], changed["timezone"]) == ("pt_BR", "America/Sao_Paulo")
    assert run_json("tenants", "show", created["id"])["locale"] == "pt_BR"


@pytest.mark.parametrize("option, value, message", [
    ("--locale", "de_DE", "is not a locale of a country in Spanish, Portuguese or English"),
    ("--locale", "es", "is not a locale of a country"),  # a language without its country
    ("--locale", "es_419", "is not a locale of a country"),
    ("--locale", "xx_YY", "is not a locale of a country"),
    ("--timezone", "Mars/Olympus", "is not an IANA time zone"),
])
def test_a_bad_locale_or_time_zone_is_one_clear_line_and_changes_nothing(storage, option, value, message):
    tenant = run_json("tenants", "create", "Globex")
    result = run("tenants", "set", tenant["id"], option, value, ok=False)
    assert result.exit_code == 1 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert run("tenants", "create", "Initech", option, value, ok=False).exit_code == 1
    assert run_json("tenants", "show", tenant["id"])["locale"] == "en_US"
    assert [t["name"] for t in run_json("tenants", "list")] == ["Globex"]


def test_setting_nothing_is_refused(storage):
    tenant = run_json("tenants", "create", "Globex")
    result = run("tenants", "set", tenant["id"], ok=False)
    assert result.exit_code == 1 and "give --timezone or --locale" in result.stderr


def test_credits_grant_adjust_show_and_ledger(storage):
    tenant = run_json("tenants", "create", "Globex")
    run("credits", "grant", "--tenant", tenant["id"], "--amount", "500", "--reason", "welcome")
    run("credits", "adjust", "--tenant", tenant["id"], "--amount", "-20", "--reason", "correction")
    wallet = run_json("credits", "show", "--tenant", tenant["id"])
    assert wallet == {"balance": 480, "reserved_balance": 0, "available_balance": 480, "status": "active",
                      "low_balance_threshold": 0}
    ledger = run_json("credits", "ledger", "--tenant", tenant["id"])
    assert [(entry["type"], entry["amount"], entry["balance_after"]) for entry in ledger] == [
        ("manual_adjust", -20, 480), ("manual_grant", 500, 500)]


def test_an_adjustment_below_zero_is_refused(storage):
    tenant = run_json("tenants", "create", "Globex")
    result = run("credits", "adjust", "--tenant", tenant["id"], "--amount", "-1", ok=False)
    assert result.exit_code == 1
    assert "not available" in result.stderr


def test_pausing_a_wallet_from_the_cli(storage, alice):
    run("credits", "set", "--tenant", alice.tenant.public_id, "--status", "paused")
    assert credits.wallet_of(alice.id).status == "paused"


def test_approving_an_access_request_creates_the_tenant_and_prints_the_key_once(client, storage):
    submitted = client.simulate_post("/api/v1/access-requests", json={
        "company_name": "Initech", "contact_name": "Peter", "contact_email": "peter@initech.test"}).json
    request_id = submitted["data"]["request_id"]
    assert [item["id"] for item in run_json("access-requests", "list", "--status", "pending")] == [request_id]
    approved = run_json("access-requests", "approve", request_id, "--scope", "credits:read")
    assert approved["status"] == "approved" and approved["tenant_id"].startswith("ten_")
    response = client.simulate_get("/api/v1/credits/balance", headers={"Authorization": f"Bearer {approved['key']}"})
    assert response.status_code == 200
    again = run("access-requests", "approve", request_id, ok=False)
    assert again.exit_code == 1 and "already reviewed" in again.stderr or "approved" in again.stderr
    assert "key" not in run_json("access-requests", "show", request_id)


def test_rejecting_an_access_request(client, storage):
    request_id = client.simulate_post("/api/v1/access-requests", json={
        "company_name": "Initech", "contact_name": "Peter", "contact_email": "peter@initech.test"}
    ).json["data"]["request_id"]
    rejected = run_json("access-requests", "reject", request_id, "--reason", "not a fit")
    assert (rejected["status"], rejected["decision_reason"]) == ("rejected", "not a fit")


def test_db_upgrade_is_idempotent(storage):
    assert run_json("db", "upgrade") == {"applied": []}


@pytest.mark.parametrize("variable, value, message", [
    ("SVC_WEBHOOK_ALLOW_PRIVATE", "ture", "SVC_WEBHOOK_ALLOW_PRIVATE: expected true or false"),
    ("SVC_DATABASE_URL", "mysql://x", "SVC_DATABASE_URL: expected a postgresql or postgres URL"),
    ("SVC_WORKER_THREADS", "lots", "SVC_WORKER_THREADS: expected a whole number"),
])
def test_a_bad_setting_stops_start_up_with_one_line_naming_it(tmp_path, variable, value, message):
    env = {"PATH": "/usr/bin:/bin", "SVC_DATA_DIR": str(tmp_path), variable: value}
    result = subprocess.run([sys.executable, "-m", "svcctl.main", "db", "upgrade"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


@pytest.mark.parametrize("command", [["tenants", "list"], ["cartera", "list", "--tenant", "ten_x"],
                                     ["cartera", "remind", "--dry-run"], ["status", "--json"]])
def test_a_command_on_a_database_not_yet_migrated_says_to_upgrade_it(tmp_path, command):
    env = {"PATH": "/usr/bin:/bin", "SVC_DATA_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "svcctl.main", *command], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not up to date" in lines[0] and "svcctl db upgrade" in lines[0], result.stderr

    subprocess.run([sys.executable, "-m", "svcctl.main", "db", "upgrade"], env=env, check=True, capture_output=True,
                   timeout=60)
    after = subprocess.run([sys.executable, "-m", "svcctl.main", *command], env=env,
                           capture_output=True, text=True, timeout=60)
    assert "not up to date" not in after.stderr and "Traceback" not in after.stderr



def test_a_command_whose_database_does_not_answer_says_so_in_one_line_without_the_password(tmp_path):
    port = free_port()  # nothing listens there
    env = {"PATH": "/usr/bin:/bin", "SVC_DATA_DIR": str(tmp_path),
           "SVC_DATABASE_URL": f"postgresql://postgres:s3cret-pw@127.0.0.1:{port}/postgres"}
    result = subprocess.run([sys.executable, "-m", "svcctl.main", "tenants", "list"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "the database did not answer" in lines[0] and str(port) in lines[0], result.stderr
    assert "s3cret-pw" not in result.stderr + result.stdout

@pytest.mark.parametrize("command", [["cartera", "import"], ["cartera", "responses", "export"]])
def test_an_erp_job_loads_none_of_the_parts_it_does_not_use(tmp_path, command):
    # An ERP job runs `svcctl cartera import` for a few debts at a time, or takes the night's
    # feed: the start-up is most of it. Not loaded: the reminders' loop, the gateway's client,
    # Babel, the dunning plans, the platform's webhook parser, a campaign's creation (an import
    # only withdraws reminders: their credits and their campaign's end), and the models of the
    # event bodies (the outbox needs their names only).
    code = ("import sys\n"
            "from typer.testing import CliRunner\n"
            "from svcctl.main import app\n"
            f"result = CliRunner().invoke(app, {command!r} + ['--help'])\n"
            "assert result.exit_code == 0, result.output\n"
            "print(sorted(name for name in ('requests', 'models.receivables.collection', 'models.operations.tables',"
            " 'svcctl.payments', 'babel', 'svcctl.dunning_plans', 'messaging.webhooks', 'models.sending.campaigns',"
            " 'models.numbers.platform_users', 'models.events.types') if name in sys.modules))\n")
    env = {"PATH": "/usr/bin:/bin", "SVC_DATA_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_a_command_does_not_search_the_installed_packages_for_pydantic_plugins(tmp_path):
    # A pydantic plugin installed beside the service, as pip would leave it: pydantic finds it by
    # scanning every distribution's metadata, a scan each process's start no longer pays.
    (tmp_path / "spy_plugin.py").write_text(
        "import pathlib\n"
        "pathlib.Path(__file__).with_name('loaded').write_text('yes')\n"
        "plugin = object()\n")
    metadata = tmp_path / "spy_plugin-1.0.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: spy-plugin\nVersion: 1.0\n")
    (metadata / "entry_points.txt").write_text("[pydantic]\nspy = spy_plugin:plugin\n")
    env = {"PATH": "/usr/bin:/bin", "SVC_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(tmp_path)}

    def plugin_loaded(extra_env: dict[str, str]) -> tuple[bool, subprocess.CompletedProcess]:
        # The import's help loads its module, whose pydantic models (the debts' input) are built.
        result = subprocess.run([sys.executable, "-m", "svcctl.main", "cartera", "import", "--help"],
                                env={**env, **extra_env}, capture_output=True, text=True, timeout=60)
        loaded = (tmp_path / "loaded").exists()
        (tmp_path / "loaded").unlink(missing_ok=True)
        return loaded, result

    loaded, result = plugin_loaded({})
    assert result.returncode == 0 and "--tenant" in result.stdout, result.stderr
    assert not loaded
    # An operator who wants plugins names the ones to leave out instead, and pydantic loads the
    # rest (this one, which is no real plugin, then breaks the command: proof that it was loaded).
    loaded, result = plugin_loaded({"PYDANTIC_DISABLE_PLUGINS": "another_plugin"})
    assert loaded and "new_schema_validator" in result.stderr
