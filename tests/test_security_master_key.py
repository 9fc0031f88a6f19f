"""The master key (SVC_SECRET_KEY) cannot be rebuilt from anything the service shows or logs.

The attack this answers: the verify token and the app secret used to be slices of the key, and
the app secret was on the simulator's command line and in `GET /_sim/config`, which together
left four characters of the key to guess.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from cryptography.fernet import Fernet

from config import load_settings
from config.settings import derive_secret
from tests.live import ROOT, free_port, wait_until

# Any run of this many characters of the key found anywhere is a leak: a random match of 8
# base64 characters is a 1 in 2^48 event.
LEAK_RUN = 8


def _runs(text: str, length: int = LEAK_RUN) -> set[str]:
    return {text[index:index + length] for index in range(len(text) - length + 1)}


def _leaks(key: str, haystack: str) -> set[str]:
    return {run for run in _runs(key) if run in haystack}


@pytest.fixture
def demo_installation(tmp_path):
    """`svcctl up --sim` on a fresh data dir, with every secret left to its default."""
    api_port, sim_port, gateway_port = free_port(), free_port(), free_port()
    env = {name: value for name, value in os.environ.items()
           if name not in {"SVC_SECRET_KEY", "SVC_APP_SECRET", "SVC_VERIFY_TOKEN"}}
    env.update({"SVC_DATA_DIR": str(tmp_path / "data"), "PYTHONUNBUFFERED": "1"})
    log_path = tmp_path / "up.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "svcctl.main", "up", "--sim", "--bind", f"127.0.0.1:{api_port}",
             "--sim-bind", f"127.0.0.1:{sim_port}", "--payments-sim-bind", f"127.0.0.1:{gateway_port}"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    api, sim = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{sim_port}"
    try:
        # The banner comes once the demo number is connected, after the API first answers.
        wait_until(lambda: _answers(api + "/api/v1/openapi.json") and _answers(sim + "/_sim/health")
                   and _banner_printed(log_path), timeout=60, message="svcctl up --sim and its banner")
        yield process, api, sim, tmp_path / "data", log_path
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=40)


def _banner_printed(log_path: Path) -> bool:
    return any(line.startswith("sign in") for line in log_path.read_text().splitlines())


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code < 500
    except requests.RequestException:
        return False


def _process_tree(root_pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(status.parent.name))
    tree, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def test_nothing_shown_or_logged_reveals_the_master_key(demo_installation):
    process, api, sim, data_dir, log_path = demo_installation
    key = (data_dir / "secret.key").read_text().strip()
    settings = load_settings({"SVC_DATA_DIR": str(data_dir)})
    assert settings.secret_key == key

    shown = {
        "verify token": settings.verify_token,
        "app secret": settings.app_secret,
        "simulator config": requests.get(sim + "/_sim/config", timeout=5).text,
        "simulator health": requests.get(sim + "/_sim/health", timeout=5).text,
        "openapi": requests.get(api + "/api/v1/openapi.json", timeout=5).text,
        "log": log_path.read_text(errors="replace"),
    }
    tree = _process_tree(process.pid)
    assert len(tree) >= 4  # up, the API, the worker, the simulator
    for pid in tree:
        try:
            shown[f"command line of {pid}"] = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue

    for where, text in shown.items():
        assert not _leaks(key, text), f"the {where} holds part of the master key"
    for where, text in shown.items():
        if where not in {"verify token", "app secret"}:
            assert settings.app_secret not in text, f"the app secret is shown in the {where}"
    assert "app_secret" not in requests.get(sim + "/_sim/config", timeout=5).json()
    # No control endpoint hands out a secret: the numbers come without their platform tokens.
    requests.post(sim + "/_sim/signup", json={}, timeout=5).raise_for_status()
    numbers = requests.get(sim + "/_sim/numbers", timeout=5).json()["data"]
    assert numbers and all("token" not in number for number in numbers)


def test_derived_secrets_are_independent_of_each_other_and_of_the_key():
    key = Fernet.generate_key().decode()
    settings = load_settings({"SVC_SECRET_KEY": key, "SVC_DATA_DIR": "/nonexistent"})
    verify_token, app_secret = settings.verify_token, settings.app_secret
    assert not _leaks(key, verify_token + " " + app_secret)
    assert not _runs(verify_token[3:]) & _runs(app_secret[3:])

    # The old attack: everything but the key's last characters known. A key that shares all but
    # its last byte still derives unrelated values, so nothing narrows the search.
    raw = bytearray(base64.urlsafe_b64decode(key))
    raw[-1] ^= 1
    neighbour = base64.urlsafe_b64encode(bytes(raw)).decode()
    for purpose in ("platform webhook verify token", "simulated platform app secret"):
        mine, theirs = derive_secret(key, purpose), derive_secret(neighbour, purpose)
        assert sum(a == b for a, b in zip(mine, theirs, strict=True)) < len(mine) // 2


def test_an_installation_on_the_old_defaults_gets_a_new_key_and_keeps_every_secret(tmp_path):
    """The upgrade of an installation whose key could be rebuilt: a generated key and both derived
    values left to their defaults. Every secret stored under the old key still opens, under a new
    key that nothing the old release showed tells anything about."""
    from cryptography.fernet import InvalidToken

    from config import get_settings, use_settings
    from models.events.tables import WebhookEndpoint
    from models.ids import new_id
    from models.numbers.graph import account_token
    from models.numbers.tables import MessagingAccount
    from models.setup import init_db
    from models.store import secrets
    from models.store.db import connection, db, upgrade
    from models.tenancy.tables import IdempotencyRecord
    from models.tenancy.tenants import create_tenant

    env = {"SVC_DATA_DIR": str(tmp_path / "data")}
    settings = use_settings(load_settings(env))
    init_db(settings)
    assert "0009_security" in upgrade()  # on a fresh installation it finds nothing to do
    old_key = settings.secret_key
    assert load_settings(env).secret_key == old_key
    with connection():
        tenant = create_tenant("Old Co")
        account = MessagingAccount.create(public_id=new_id("wacc_"), tenant=tenant.id, phone_id="pn-1",
                                          access_token=secrets.encrypt("EAAG-platform-token"))
        endpoint = WebhookEndpoint.create(public_id=new_id("whend_"), tenant=tenant.id, url="https://hooks.test/a",
                                          events=["message.sent"], secret_ciphertext=secrets.encrypt("whsec_abc"),
                                          secret_preview="whsec_a…")
        replay = IdempotencyRecord.create(tenant=tenant.id, key="k1", method="POST", path="/x", body_hash="h",
                                          state="done", status=201, body=secrets.encrypt('{"secret": "s"}'))
        plain_replay = IdempotencyRecord.create(tenant=tenant.id, key="k2", method="POST", path="/y",
                                                body_hash="h", state="done", status=200, body='{"ok": true}')
        # As the earlier release left it: this migration not applied yet.
        db.execute_sql(f'DELETE FROM "schema_migration" WHERE "name" = {db.param}', ("0009_security",))

    assert upgrade() == ["0009_security"]
    new_key = load_settings(env).secret_key
    assert new_key != old_key and get_settings().secret_key == new_key
    assert get_settings().verify_token == load_settings(env).verify_token
    data_dir = tmp_path / "data"
    assert sorted(path.name for path in data_dir.iterdir() if path.name.startswith("secret")) == ["secret.key"]
    assert oct((data_dir / "secret.key").stat().st_mode & 0o777) == "0o600"
    # The old release's verify token was the key's first 16 characters: it says nothing of the new key.
    assert not _leaks(new_key, "vt_" + old_key[:16] + " as_" + old_key[16:40])

    with connection():
        assert account_token(MessagingAccount.get_by_id(account.id)) == "EAAG-platform-token"
        assert WebhookEndpoint.get_by_id(endpoint.id).signing_secret == "whsec_abc"
        assert secrets.decrypt(IdempotencyRecord.get_by_id(replay.id).body) == '{"secret": "s"}'
        assert IdempotencyRecord.get_by_id(plain_replay.id).body == '{"ok": true}'
        stored = MessagingAccount.get_by_id(account.id).access_token
    with pytest.raises(InvalidToken):
        Fernet(old_key.encode()).decrypt(stored.encode())
    db.close_all()
