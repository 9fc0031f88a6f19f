"""Tenancy: another company's identifiers, of every kind, through every endpoint that takes one.

Alice holds a key with every scope; Charlie, an outsider, has one of each resource (a number, a
campaign still queued and one finished, a single message, a webhook endpoint, a debt). Every
read and every write Alice aims at them answers 404 with the resource's own code, exactly as for
an identifier nobody has, and leaves them as they were; no list of Alice's shows them.
"""

from __future__ import annotations

import pytest

from models.events import webhooks
from models.events.tables import WebhookEndpoint
from models.receivables.tables import Debt
from models.sending.tables import Campaign, Message
from tests.campaigns_fixtures import *  # noqa: F403  (fixtures)
from tests.campaigns_fixtures import campaign_body, let_write, make_number

CUSTOMER = "5215577001122"


def debt_body(external_id: str, account_id: str) -> dict:
    return {"external_id": external_id, "account_id": account_id, "deudor": {"nombre": "Ana", "documento": "CC-1"},
            "moneda": "COP", "monto_original": "1000", "saldo_pendiente": "1000"}


@pytest.fixture
def outsider(client, charlie, sim, immediate_queue) -> dict[str, str]:
    """Charlie's resources, each made the way Charlie's backend makes it."""
    account = make_number(charlie.id, sim)
    done = client.simulate_post("/api/v1/campaigns", json=campaign_body(account, ["5215577000001"]),
                                headers=charlie.headers)
    assert done.status_code == 201, done.text
    immediate_queue.immediate = False  # nothing consumes this queue: the next campaign stays queued
    try:
        queued = client.simulate_post("/api/v1/campaigns", json=campaign_body(account, ["5215577000002"]),
                                      headers=charlie.headers)
    finally:
        immediate_queue.immediate = True
    assert queued.status_code == 201, queued.text
    let_write(account, CUSTOMER)
    message = client.simulate_post("/api/v1/messages", headers=charlie.headers, json={
        "account_id": account.public_id, "to": CUSTOMER, "type": "text", "text": {"body": "hola"}})
    assert message.status_code == 202, message.text
    endpoint, _secret = webhooks.create_endpoint(charlie.id, "https://127.0.0.1:9/hooks", ["message.sent"])
    debt = client.simulate_post("/api/v1/cartera/deudas", json=debt_body("FAC-CHARLIE", account.public_id),
                                headers={**charlie.headers, "Idempotency-Key": "charlie-debt"})
    assert debt.status_code == 201, debt.text
    return {"account": account.public_id, "campaign": queued.json["data"]["id"],
            "finished_campaign": done.json["data"]["id"], "message": message.json["data"]["id"],
            "endpoint": endpoint.public_id, "debt": "FAC-CHARLIE"}


def attempts(ids: dict[str, str], mine: str) -> list[tuple[str, str, dict | None, str]]:
    """(method, path, body, expected code) for every endpoint that takes an identifier; `mine` is a
    number of Alice's, for bodies that need one besides the foreign identifier."""
    account, campaign, debt = ids["account"], ids["campaign"], ids["debt"]
    return [
        ("GET", f"/accounts/{account}", None, "account_not_found"),
        ("GET", f"/accounts/{account}/templates", None, "account_not_found"),
        ("POST", "/campaigns", campaign_body_for(account), "account_not_found"),
        ("GET", f"/campaigns/{campaign}", None, "campaign_not_found"),
        ("GET", f"/campaigns/{ids['finished_campaign']}", None, "campaign_not_found"),
        ("GET", f"/campaigns/{campaign}/recipients", None, "campaign_not_found"),
        ("GET", f"/campaigns/{ids['finished_campaign']}/recipients", None, "campaign_not_found"),
        ("POST", f"/campaigns/{campaign}/cancel", None, "campaign_not_found"),
        ("POST", "/messages", {"account_id": account, "to": CUSTOMER, "type": "text", "text": {"body": "x"}},
         "account_not_found"),
        ("GET", f"/messages/{ids['message']}", None, "message_not_found"),
        ("DELETE", f"/webhooks/endpoints/{ids['endpoint']}", None, "endpoint_not_found"),
        ("POST", "/cartera/deudas", debt_body("FAC-ALICE-1", account), "account_not_found"),
        ("GET", f"/cartera/deudas/{debt}", None, "debt_not_found"),
        ("POST", "/cartera/pagos", {"external_id": "PAY-1", "deuda_external_id": debt, "monto": "10",
                                    "moneda": "COP", "metodo": "cash", "pagado_en": "2026-01-01T10:00:00-05:00"},
         "debt_not_found"),
        ("POST", f"/cartera/deudas/{debt}/resolver", {"status": "paid", "reason": "x"}, "debt_not_found"),
    ]


def campaign_body_for(account_id: str) -> dict:
    return {"account_id": account_id, "template_name": "hello_world", "recipients": [{"wa_id": "5215577000009"}]}


def call(client, persona, method: str, path: str, body: dict | None, key: str):
    headers = {**persona.headers, "Idempotency-Key": key}
    return client.simulate_request(method, "/api/v1" + path, json=body, headers=headers)


def snapshot(ids: dict[str, str]) -> dict:
    return {
        "campaign": Campaign.get(Campaign.public_id == ids["campaign"]).status,
        "message": Message.get(Message.public_id == ids["message"]).status,
        "endpoint": WebhookEndpoint.get(WebhookEndpoint.public_id == ids["endpoint"]).status,
        "debt": [(d.status, d.saldo_pendiente) for d in Debt.select().where(Debt.external_id == ids["debt"])],
    }


def test_every_foreign_identifier_is_a_404_for_reads_and_writes(client, alice, charlie, outsider, number):
    before = snapshot(outsider)
    made_up = {"account": "wacc_" + "x" * 24, "campaign": "cmp_" + "x" * 24, "finished_campaign": "cmp_nothing",
               "message": "msg_" + "x" * 24, "endpoint": "whend_" + "x" * 24, "debt": "FAC-NOBODY"}
    for index, ((method, path, body, code), (_m, unknown_path, unknown_body, _c)) in enumerate(
            zip(attempts(outsider, number.public_id), attempts(made_up, number.public_id), strict=True)):
        foreign = call(client, alice, method, path, body, f"foreign-{index}")
        assert foreign.status_code == 404, (method, path, foreign.text)
        assert foreign.json["error"]["code"] == code, (method, path, foreign.json)
        # The same answer as for an identifier that exists nowhere: nothing tells them apart.
        unknown = call(client, alice, method, unknown_path, unknown_body, f"unknown-{index}")
        assert (unknown.status_code, unknown.json["error"]["code"]) == (404, code), (method, unknown_path)
    assert snapshot(outsider) == before
    assert Campaign.select().where(Campaign.tenant == alice.id).count() == 0
    assert Message.select().where(Message.tenant == alice.id).count() == 0
    assert Debt.select().where(Debt.tenant == alice.id).count() == 0


def test_a_batch_element_naming_a_foreign_number_fails_alone(client, alice, outsider, number):
    response = client.simulate_post("/api/v1/cartera/deudas/lote", headers={**alice.headers, "Idempotency-Key": "b1"},
                                    json={"deudas": [debt_body("FAC-A", number.public_id),
                                                     debt_body("FAC-B", outsider["account"])]})
    assert response.status_code == 200, response.text
    results = {item["external_id"]: item for item in response.json["data"]["results"]}
    assert results["FAC-A"]["success"] is True
    assert results["FAC-B"]["success"] is False and results["FAC-B"]["error"]["code"] == "account_not_found"
    assert [d.external_id for d in Debt.select().where(Debt.tenant == alice.id)] == ["FAC-A"]


def test_the_same_external_id_is_two_debts_one_per_company(client, alice, charlie, outsider, number):
    mine = client.simulate_post("/api/v1/cartera/deudas", json={**debt_body("FAC-CHARLIE", number.public_id),
                                                                 "saldo_pendiente": "700"},
                                headers={**alice.headers, "Idempotency-Key": "same-id"})
    assert mine.status_code == 201, mine.text  # created for Alice, not an update of Charlie's
    read = client.simulate_get("/api/v1/cartera/deudas/FAC-CHARLIE", headers=alice.headers).json["data"]["deuda"]
    theirs = client.simulate_get("/api/v1/cartera/deudas/FAC-CHARLIE", headers=charlie.headers).json["data"]["deuda"]
    assert (read["saldo_pendiente"], read["account_id"]) == (700, number.public_id)
    assert (theirs["saldo_pendiente"], theirs["account_id"]) == (1000, outsider["account"])


def test_no_list_shows_another_companys_resources(client, alice, outsider, number):
    client.simulate_post("/api/v1/campaigns", json=campaign_body(number, ["5215577000003"]), headers=alice.headers)
    listed = ""
    for path in ("/accounts", "/campaigns", "/webhooks/endpoints", "/credits/ledger",
                 f"/accounts/{number.public_id}/templates"):
        response = client.simulate_get("/api/v1" + path, headers=alice.headers)
        assert response.status_code == 200, (path, response.text)
        listed += response.text
    assert number.public_id in listed
    for value in outsider.values():
        assert value not in listed
