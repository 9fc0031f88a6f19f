"""Output an operator can copy: in 80 columns or a pipe, svcctl's tables never cut or wrap an id,
a key or a URL (they wrap words and drop less important columns instead), and `svcctl up` prints
the demo key on one line."""

from __future__ import annotations

import re

import requests
from typer.testing import CliRunner

from models.tenancy.tables import Tenant
from models.tenancy.tenants import create_tenant
from svcctl.main import app
from tests.test_security_master_key import demo_installation  # noqa: F401  (fixture)

runner = CliRunner()
KEY = re.compile(r"svc_live_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def run(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.stderr or result.stdout
    return result.stdout


def test_tables_keep_ids_keys_and_urls_whole_in_80_columns(client, storage, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    for serial in range(3):
        create_tenant(f"A company whose registered trading name runs on and on, number {serial}")
    listed = run("tenants", "list")
    for tenant in Tenant.select():
        assert tenant.public_id in listed
    assert max(len(line) for line in listed.splitlines()) <= 80
    assert "company whose" in listed  # the name wraps; it is not dropped while there is room

    tenant = Tenant.select().first()
    created = run("keys", "create", "--tenant", tenant.public_id, "--scope", "all")
    keys = KEY.findall(created)
    assert len(keys) == 1
    assert client.simulate_get("/api/v1/health", headers={"Authorization": f"Bearer {keys[0]}"}).status_code == 200

    url = "https://hooks.example.com/receivers/companies/" + "a-long-path-segment/" * 3 + "events"
    answer = client.simulate_post("/api/v1/webhooks/endpoints", headers={"Authorization": f"Bearer {keys[0]}"},
                                  json={"url": url, "events": ["message.sent", "message.delivered"]})
    assert answer.status_code == 201, answer.text
    endpoints = run("webhooks", "endpoints", "--tenant", tenant.public_id)
    assert url in endpoints and answer.json["data"]["id"] in endpoints
    # Too wide for every column: the ones that identify nothing give way, and the caption says so.
    assert "not shown at this width" in endpoints and "--json" in endpoints


def test_up_prints_the_demo_key_on_one_line(demo_installation):  # noqa: F811  (fixture)
    _process, api, _sim, _data_dir, log_path = demo_installation
    printed = log_path.read_text()
    line = next(line for line in printed.splitlines() if line.startswith("key"))
    key = KEY.search(line).group(0)
    assert line.split() == ["key", key]
    assert requests.get(f"{api}/api/v1/health", headers={"Authorization": f"Bearer {key}"},
                        timeout=10).status_code == 200
