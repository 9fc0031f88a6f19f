"""Fixtures for the numbers and templates area: a real simulator over HTTP, and connected numbers.

Import `simulator` and `app` into a test module: the app then talks to the simulator (started
on a free port for the test) instead of the default platform URL.
"""

from __future__ import annotations

import dataclasses
import socket
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests
from falcon import testing

from config import get_settings, use_settings
from messaging.simulator.server import Simulator
from messaging.webhooks import SIGNATURE_HEADER, sign
from models.setup import init_db
from models.store.db import connection, db

# Fixtures, for `from tests.accounts_fixtures import *` in a test module (helpers are imported by name).
__all__ = ["shared_simulator", "simulator", "app", "client"]

REDIRECT_URL = "https://example.test/done"
# For tests about input handling and rendering, where the engine makes no difference: PostgreSQL
# costs a database per test.
sqlite_only = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)


@pytest.fixture(scope="session")
def shared_simulator():
    # One for the session: stopping a simulator takes half a second, and tests only add to it.
    sim = Simulator(duplicate_rate=0.0)
    sim.start()
    yield sim
    sim.stop()


@pytest.fixture
def simulator(shared_simulator, storage):
    """The platform simulator over HTTP, with this test's settings pointed at it."""
    shared_simulator.configure(app_secret=storage.app_secret, webhook_url=None)
    # A clean platform for each test: tests add numbers and templates.
    requests.post(f"{shared_simulator.base_url}/_sim/reset", timeout=5).raise_for_status()
    point_at(storage, shared_simulator.base_url)
    with connection():
        yield shared_simulator


def point_at(settings, graph_url: str):
    """Install settings that reach the platform at `graph_url`."""
    settings = dataclasses.replace(settings, graph_url=graph_url, public_url="https://svc.example.test")
    use_settings(settings)
    # A new engine for the same database: the storage fixture's connection is replaced by ours.
    init_db(settings)
    return settings


def unreachable_platform() -> None:
    """Point the service at a port nobody listens on (a platform outage, refused connections)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    point_at(get_settings(), f"http://127.0.0.1:{port}")
    db.connect(reuse_if_open=True)


@pytest.fixture
def app(simulator):
    from api.app import create_app

    return create_app(get_settings())


class _Client(testing.TestClient):
    """The app's client; the test's own connection is open again after each request, whether or
    not the app's per-request middleware closed it."""

    def simulate_request(self, *args, **kwargs):
        try:
            return super().simulate_request(*args, **kwargs)
        finally:
            db.connect(reuse_if_open=True)


@pytest.fixture
def client(app):
    return _Client(app)


def redirect_params(response) -> dict[str, str]:
    assert response.status_code == 303, response.text
    location = response.headers["Location"]
    assert location.startswith(REDIRECT_URL + "?"), location
    return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}


def create_link(client, persona, **fields) -> str:
    body = {"redirect_url": REDIRECT_URL, **fields}
    response = client.simulate_post("/api/v1/accounts/coexistence-link", json=body, headers=persona.headers)
    assert response.status_code == 201, response.text
    return response.json["data"]["attempt_id"]


def sim_number(sim: Simulator, phone_number_id: str) -> dict:
    return next(item for item in sim.numbers() if item["id"] == phone_number_id)


def connect_number(client, persona, **fields) -> str:
    """Run a whole simulated onboarding for `persona`; returns the new account's `wacc_` id."""
    attempt_id = create_link(client, persona, **fields)
    params = redirect_params(client.simulate_post(f"/onboarding/{attempt_id}/simulate"))
    assert params["success"] == "true", params
    return params["account_id"]


def post_form(client, path: str, fields: dict[str, str]):
    """What the page's form submission sends."""
    return client.simulate_post(path, body=urlencode(fields),
                                headers={"Content-Type": "application/x-www-form-urlencoded"})


def code_for_number(sim: Simulator, phone_number_id: str) -> str:
    """A fresh signup code for a number the simulator already has (the business reconnects it)."""
    return sim.new_code(phone_number_id)


def signed_post(client, payload: dict | bytes, secret: str | None = None, headers: dict | None = None):
    import orjson

    body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    secret = secret if secret is not None else get_settings().app_secret
    return client.simulate_post("/platform/webhook", body=body,
                                headers={"Content-Type": "application/json", SIGNATURE_HEADER: sign(body, secret),
                                         **(headers or {})})


def notification(waba_id: str, field: str, value: dict) -> dict:
    return {"object": "whatsapp_business_account",
            "entry": [{"id": waba_id, "changes": [{"field": field, "value": value}]}]}


def messages_value(account, **items) -> dict:
    """A change's value as the platform sends it for one of the account's numbers."""
    return {"messaging_product": "whatsapp",
            "metadata": {"display_phone_number": account.phone_number.lstrip("+"), "phone_number_id": account.phone_id},
            **items}
