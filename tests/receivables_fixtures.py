"""Test data for receivables: numbers owned by a persona, debt bodies, and keyed requests."""

from __future__ import annotations

import copy
import json
import threading
import uuid

import psycopg2
import pytest

from models.clock import utcnow
from models.ids import new_id
from models.numbers.tables import MessagingAccount
from tests.live import wait_until

API = "/api/v1/cartera"


def make_account(persona, phone: str = "56911112222", status: str = "active") -> MessagingAccount:
    """A connected number of `persona`, as onboarding would leave it."""
    return MessagingAccount.create(public_id=new_id("wacc_"), tenant=persona.id, phone_number=phone,
                                   name="Cobranza", status=status, phone_id=f"pn-{uuid.uuid4().hex[:8]}",
                                   access_token="token", connected_at=utcnow())


def debt_body(account_id: str, external_id: str = "D-1", **changes) -> dict:
    """A valid Debt in the API's shape: 3 installments of 100.00 USD, nothing paid."""
    body = {
        "external_id": external_id,
        "account_id": account_id,
        "deudor": {"nombre": "Ana Pérez", "documento": "11111111-1", "telefono": "56922223333"},
        "moneda": "USD",
        "referencia": "Factura 1001",
        "monto_original": 300,
        "saldo_pendiente": 300,
        "auto_send": False,
        "cuotas": [
            {"external_id": f"{external_id}-1", "numero": 1, "monto": 100, "vence": "2031-01-10", "estado": "pending"},
            {"external_id": f"{external_id}-2", "numero": 2, "monto": 100, "vence": "2031-02-10", "estado": "pending"},
            {"external_id": f"{external_id}-3", "numero": 3, "monto": 100, "vence": "2031-03-10", "estado": "pending"},
        ],
    }
    body = copy.deepcopy(body)
    body.update(changes)
    return body


def payment_body(external_id: str = "P-1", debt: str = "D-1", monto=50, **changes) -> dict:
    body = {"external_id": external_id, "deuda_external_id": debt, "monto": monto, "moneda": "USD",
            "metodo": "transfer", "pagado_en": "2030-12-01T10:00:00-03:00"}
    body.update(changes)
    return body


def keyed(persona, key: str | None = None) -> dict[str, str]:
    return {**persona.headers, "Idempotency-Key": key or uuid.uuid4().hex}


def post(client, persona, path: str, body, key: str | None = None, raw: bytes | None = None):
    """POST with a fresh Idempotency-Key (or `key`); `raw` sends bytes as they are."""
    headers = {**keyed(persona, key), "Content-Type": "application/json"}
    payload = raw if raw is not None else json.dumps(body).encode()
    return client.simulate_post(API + path, body=payload, headers=headers)


def get_debt(client, persona, external_id: str):
    return client.simulate_get(f"{API}/deudas/{external_id}", headers=persona.headers)


def error_of(response) -> dict:
    assert response.json["success"] is False, response.json
    return response.json["error"]


@pytest.fixture(name="storage")
def sqlite_only(sqlite_storage):
    """Overrides the two-engine `storage` where imported: for rules the engine cannot change
    (validation, parsing, arithmetic), so they do not pay for a PostgreSQL database each."""
    return sqlite_storage


# For a test or class whose rule the engine cannot change (parsing, validation, the API's
# common pipeline): it runs on SQLite only, saving a PostgreSQL database per test.
sqlite_only_mark = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)


def deadlock_a_batch(dsn: str, tenant_id: int, account_id: int, currency: str, batch: threading.Thread) -> None:
    """Run `batch` (writing debts D-1 of debtor CC-A and D-2 of CC-B) into a deadlock that
    PostgreSQL breaks by rolling the batch back, and wait for it to end.

    Another writer holds debtor CC-B and debt D-2 uncommitted while the batch inserts CC-A, then
    waits on CC-B; the writer then inserts CC-A, closing the circle. It waits 30 s before looking
    for a deadlock, the batch's connection 1 s, so PostgreSQL breaks the batch. The writer then
    commits: what the batch writes again meets its rows."""
    other = psycopg2.connect(dsn)
    cursor = other.cursor()
    cursor.execute("SET deadlock_timeout = '30s'")
    cursor.execute("""INSERT INTO debtor (tenant_id, nombre, documento, created_at, updated_at)
                      VALUES (%s, 'B', 'CC-B', now(), now()) RETURNING id""", [tenant_id])
    cursor.execute("""INSERT INTO debt (tenant_id, external_id, account_id, debtor_id, moneda, monto_original,
                      saldo_pendiente, tipo, auto_send, status, row_version, created_at, updated_at)
                      VALUES (%s, 'D-2', %s, %s, %s, 10, 10, 'single', false, 'pending', 0, now(), now())""",
                   [tenant_id, account_id, cursor.fetchone()[0], currency])
    batch.start()
    wait_until(lambda: waiting_on_a_lock(dsn, exclude=other.get_backend_pid()),
               message="the batch waiting for debtor CC-B")
    cursor.execute("""INSERT INTO debtor (tenant_id, nombre, documento, created_at, updated_at)
                      VALUES (%s, 'A', 'CC-A', now(), now())""", [tenant_id])
    other.commit()
    other.close()
    batch.join(timeout=60)


def waiting_on_a_lock(dsn: str, exclude: int) -> bool:
    with psycopg2.connect(dsn) as watcher, watcher.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock' AND pid <> %s", [exclude])
        found = cursor.fetchone()[0] > 0
    watcher.close()
    return found
