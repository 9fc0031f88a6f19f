"""Hostile input against the live server: schemathesis drives every operation of the OpenAPI
document the service itself publishes, on a real gunicorn (with the worker and the simulator),
and every answer must be one the document describes.

A company is seeded through the API with one of each resource (a number with its templates, a
campaign, a single message, a webhook endpoint, a debt with installments and a payment), and so
is an outsider; schemathesis draws path and body identifiers from both often (its dictionaries),
so requests reach real resources, foreign ones and made-up ones alike.

Checks: all of schemathesis's but `positive_data_acceptance`, which expects every schema-valid
request to succeed; the document describes shapes, and a schema-valid request can still break a
business rule the contract answers with 422 (`template_not_approved`, `outside_24h_window`,
`invalid_recipient`, `idempotency_key_required` on a blank key, ...). Among the rest: no 5xx,
every status documented, every body matching its schema, the content type, schema-invalid input
refused with a 4xx, authentication enforced, undeclared methods answered 405. Bounded: at most
MAX_EXAMPLES cases per operation and phase, a fixed seed.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import requests

from tests.conftest import Persona
from tests.faults_fixtures import connect_number
from tests.live import ROOT, LiveService, env_for, wait_until
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)
from tests.webhooks_fixtures import Receiver

pytestmark = [pytest.mark.parametrize("storage", ["sqlite"], indirect=True), pytest.mark.timeout(420),
              pytest.mark.slow]
MAX_EXAMPLES = 25
SEED = 20261122
CONTACT = "5215590001234"


@pytest.fixture
def service(storage, tmp_path, immediate_queue, webhook_ca):
    immediate_queue.immediate = False
    env = {**env_for(storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1], "SVC_TENANT_RATE_LIMIT": "1000000",
           "SVC_READ_RATE_LIMIT": "1000000", "SVC_WRITE_RATE_LIMIT": "1000000",
           "SVC_FAILED_AUTH_LIMIT": "1000000"}
    live = LiveService(env, tmp_path).start()
    yield live
    live.stop()


def call(service, persona, method: str, path: str, expected: int, **kwargs) -> dict:
    response = requests.request(method, f"{service.api_url}/api/v1{path}", headers={
        **persona.headers, **kwargs.pop("headers", {})}, timeout=30, **kwargs)
    assert response.status_code == expected, f"{method} {path}: {response.status_code} {response.text}"
    return response.json()["data"]


def seed_company(service, persona, receiver: Receiver, tag: str) -> dict[str, str]:
    """One of each resource, made through the API (the number through the simulator's signup)."""
    account = connect_number(service, persona, 20, mode="coexistence")
    sent = requests.post(f"{service.sim_url}/_sim/inbound", timeout=10,
                         json={"from": CONTACT, "to": account.phone_id, "text": "hola"})
    assert sent.status_code == 200, sent.text
    campaign = call(service, persona, "POST", "/campaigns", 201, json={
        "account_id": account.public_id, "template_name": "hello_world",
        "recipients": [{"wa_id": "5215590000001"}, {"wa_id": "5215590000002"}]})
    message = wait_until(lambda: _message(service, persona, account.public_id), timeout=20,
                         message="the inbound webhook to open the window")
    endpoint = call(service, persona, "POST", "/webhooks/endpoints", 201,
                    json={"url": receiver.url(path=f"/hooks/{tag}"), "events": ["message.sent", "campaign.created"]})
    debt_id = f"FAC-{tag}-1"
    call(service, persona, "POST", "/cartera/deudas", 201, headers={"Idempotency-Key": f"seed-{tag}-debt"}, json={
        "external_id": debt_id, "account_id": account.public_id, "external_version": 1,
        "deudor": {"nombre": "Ana Pérez", "documento": f"CC-{tag}", "telefono": "573001112233"},
        "moneda": "COP", "monto_original": "300000", "saldo_pendiente": "300000",
        "cuotas": [{"external_id": f"{debt_id}-1", "numero": 1, "monto": "150000", "vence": "2030-01-31"},
                   {"external_id": f"{debt_id}-2", "numero": 2, "monto": "150000", "vence": "2030-02-28"}]})
    call(service, persona, "POST", "/cartera/pagos", 201, headers={"Idempotency-Key": f"seed-{tag}-pay"}, json={
        "external_id": f"PAY-{tag}-1", "deuda_external_id": debt_id, "monto": "50000", "moneda": "COP",
        "metodo": "transfer", "pagado_en": "2026-01-15T10:00:00-05:00"})
    return {"account": account.public_id, "campaign": campaign["id"], "message": message,
            "endpoint": endpoint["id"], "debt": debt_id}


def _message(service, persona, account_id: str) -> str | None:
    response = requests.post(f"{service.api_url}/api/v1/messages", headers=persona.headers, timeout=30, json={
        "account_id": account_id, "to": CONTACT, "type": "text", "text": {"body": "Hola"}})
    return response.json()["data"]["id"] if response.status_code == 202 else None


def config(alice: dict[str, str], charlie: dict[str, str]) -> str:
    """schemathesis.toml: identifiers to draw from (the company's own, the outsider's), and where."""
    def values(*items) -> str:
        return "[" + ", ".join(f'"{item}"' for item in items) + "]"

    dictionaries = {
        "accounts": values(alice["account"], charlie["account"]),
        "campaigns": values(alice["campaign"], charlie["campaign"]),
        "messages": values(alice["message"], charlie["message"]),
        "endpoints": values(alice["endpoint"], charlie["endpoint"]),
        "debts": values(alice["debt"], charlie["debt"]),
        "templates": values("hello_world", "payment_reminder", "order_update", "promo_pending"),
        "contacts": values(CONTACT, "5215590000003", "5215590000000"),
    }
    bindings = {
        "path.account_id": "accounts", "body.account_id": "accounts", "body.deudas[*].account_id": "accounts",
        "path.campaign_id": "campaigns", "path.message_id": "messages", "path.endpoint_id": "endpoints",
        "path.external_id": "debts", "body.deuda_external_id": "debts", "body.template_name": "templates",
        "body.to": "contacts", "body.recipients[*].wa_id": "contacts",
    }
    lines = []
    for name, items in dictionaries.items():
        lines += [f"[dictionaries.{name}]", f"values = {items}", ""]
    lines.append("[parameters]")
    lines += [f'"{key}" = {{ dictionary = "{name}", probability = 0.7 }}' for key, name in bindings.items()]
    # A batch answers 200 with each bad element refused in its results (DECISIONS), so an invalid
    # element is not a request the server should reject whole.
    lines += ["", "[[operations]]", 'include-name = "POST /api/v1/cartera/deudas/lote"',
              "checks.negative_data_rejection.enabled = false"]
    return "\n".join(lines) + "\n"


def test_every_operation_answers_as_its_document_says(service, storage, webhook_ca, tmp_path):
    receiver = Receiver(webhook_ca[0])
    try:
        alice = Persona("Alice Hostile", credits=1_000_000, rate_limit=1_000_000)
        charlie = Persona("Charlie Hostile", credits=1000)
        mine = seed_company(service, alice, receiver, "alice")
        theirs = seed_company(service, charlie, receiver, "charlie")
        config_file = tmp_path / "schemathesis.toml"
        config_file.write_text(config(mine, theirs))
        started = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config_file), "run",
             f"{service.api_url}/api/v1/openapi.json", "--header", f"Authorization: Bearer {alice.key_string}",
             "--exclude-checks", "positive_data_acceptance", "--max-examples", str(MAX_EXAMPLES),
             "--seed", str(SEED), "--workers", "1", "--request-timeout", "20", "--suppress-health-check", "all",
             "--warnings", "off", "--no-color"],
            cwd=ROOT, capture_output=True, text=True, timeout=360)
        elapsed = time.monotonic() - started
    finally:
        receiver.close()
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-12000:] + "\n--- api log\n" + service.log("api")[-3000:]
    assert "23 selected / 23 total" in output or "selected" in output
    assert "Server error" not in output
    assert elapsed < 300
    print(output[-2500:])  # the run's summary, for `pytest -s`
