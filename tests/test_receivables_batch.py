"""POST /cartera/deudas/lote: up to 500 debts, each one saved or refused on its own."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from models.receivables.tables import Debt
from tests.receivables_fixtures import (
    deadlock_a_batch,
    debt_body,
    error_of,
    get_debt,
    make_account,
    post,
    sqlite_only_mark,
)


@pytest.fixture
def account(alice):
    return make_account(alice)


def test_valid_elements_are_saved_when_others_fail(client, alice, charlie, account):
    post(client, alice, "/deudas", debt_body(account.public_id, "OLD", external_version=9,
                                             deudor={"nombre": "Eva", "documento": "9-9"}))
    post(client, alice, "/deudas", debt_body(account.public_id, "UPD", deudor={"nombre": "Eva", "documento": "9-9"}))
    post(client, alice, "/deudas", debt_body(account.public_id, "X", deudor={
        "nombre": "Flor", "documento": "8-8", "telefono": "56977778888"}))
    foreign = make_account(charlie, phone="56900009999")
    debts = [
        debt_body(account.public_id, "NEW-1", deudor={"nombre": "Gil", "documento": "7-7"}),
        debt_body(account.public_id, "BAD-MONEY", moneda="USD", monto_original="1.005"),
        debt_body(account.public_id, "UPD", saldo_pendiente=10, deudor={"nombre": "Eva", "documento": "9-9"}),
        debt_body(foreign.public_id, "FOREIGN"),
        debt_body(account.public_id, "OLD", external_version=8, deudor={"nombre": "Eva", "documento": "9-9"}),
        debt_body(account.public_id, "CLASH", deudor={"nombre": "Eva", "documento": "9-9",
                                                       "telefono": "56977778888"}),
        "not an object",
        {"external_id": "HALF"},
        debt_body(account.public_id, "NEW-2", deudor={"nombre": "Hugo", "telefono": "56966665555"}),
    ]
    response = post(client, alice, "/deudas/lote", {"deudas": debts})
    assert response.status_code == 200
    data = response.json["data"]
    assert data["summary"] == {"created": 2, "updated": 1, "ignored_stale": 1, "errors": 5}
    results = data["results"]
    assert [r["external_id"] for r in results] == ["NEW-1", "BAD-MONEY", "UPD", "FOREIGN", "OLD", "CLASH", None,
                                                   "HALF", "NEW-2"]
    assert results[0] == {"external_id": "NEW-1", "success": True, "action": "created"}
    assert results[2] == {"external_id": "UPD", "success": True, "action": "updated"}
    assert results[4] == {"external_id": "OLD", "success": True, "action": "ignored_stale"}
    assert results[8] == {"external_id": "NEW-2", "success": True, "action": "created"}
    codes = {r["external_id"]: r["error"]["code"] for r in results if not r["success"]}
    assert codes == {"BAD-MONEY": "validation_failed", "FOREIGN": "account_not_found",
                     "CLASH": "debtor_identity_conflict", None: "validation_failed", "HALF": "validation_failed"}
    bad_money = results[1]["error"]
    assert set(bad_money) == {"code", "message", "details"}
    assert "monto_original" in bad_money["details"]["errors"]
    assert set(Debt.select(Debt.external_id).tuples()) == {("OLD",), ("UPD",), ("X",), ("NEW-1",), ("NEW-2",)}
    assert get_debt(client, alice, "UPD").json["data"]["deuda"]["saldo_pendiente"] == 10


def test_a_later_element_sees_an_earlier_one(client, alice, account):
    debts = [debt_body(account.public_id, "D-1", external_version=1, saldo_pendiente=300),
              debt_body(account.public_id, "D-1", external_version=3, saldo_pendiente=100),
              debt_body(account.public_id, "D-1", external_version=2, saldo_pendiente=200)]
    data = post(client, alice, "/deudas/lote", {"deudas": debts}).json["data"]
    assert [r["action"] for r in data["results"]] == ["created", "updated", "ignored_stale"]
    assert Debt.get().saldo_pendiente == 10000
    assert get_debt(client, alice, "D-1").json["data"]["deuda"]["cuotas"][0]["estado"] == "pending"


@sqlite_only_mark
def test_it_takes_1_to_500_elements(client, alice, account):
    for debts in ([], [debt_body(account.public_id, f"D-{i}") for i in range(501)]):
        response = post(client, alice, "/deudas/lote", {"deudas": debts})
        assert response.status_code == 422
        assert "deudas" in error_of(response)["details"]["errors"]
    assert post(client, alice, "/deudas/lote", {"deudas": "x"}).status_code == 422


@sqlite_only_mark
def test_the_batch_replays_under_its_key(client, alice, account):
    body = {"deudas": [debt_body(account.public_id, "D-1")]}
    first = post(client, alice, "/deudas/lote", body, key="lote-1")
    again = post(client, alice, "/deudas/lote", body, key="lote-1")
    assert again.json == first.json and again.headers["X-Service-Idempotent-Replay"] == "true"
    other = post(client, alice, "/deudas/lote", {"deudas": [debt_body(account.public_id, "D-2")]}, key="lote-1")
    assert error_of(other)["code"] == "idempotency_key_conflict"
    missing = client.simulate_post("/api/v1/cartera/deudas/lote", json=body, headers=alice.headers)
    assert error_of(missing)["code"] == "idempotency_key_required"


def test_five_hundred_new_debts_in_one_batch(client, alice, account):
    debts = [debt_body(account.public_id, f"D-{i}", deudor={"nombre": f"P{i}", "documento": f"{i}-K"})
              for i in range(500)]
    data = post(client, alice, "/deudas/lote", {"deudas": debts}).json["data"]
    assert data["summary"] == {"created": 500, "updated": 0, "ignored_stale": 0, "errors": 0}
    debt = get_debt(client, alice, "D-499").json["data"]["deuda"]
    assert (debt["deudor"]["documento"], len(debt["cuotas"])) == ("499-K", 3)


def test_a_batch_that_meets_a_concurrent_insert_is_redone_one_by_one(alice, account, storage, caplog):
    # A first writer holds D-0 uncommitted while a batch plans D-0..D-39 as new. On PostgreSQL the
    # batch's INSERT waits on the unique key, fails once the first commits, and the batch is
    # redone element by element (D-0 as an update). SQLite admits one writer: the batch waits
    # at BEGIN and finds D-0 already there. Either way each debt exists once.
    from models.receivables import snapshots
    from models.receivables.inputs import parse_debt
    from models.store.db import atomic, connection, db

    caplog.set_level(logging.INFO, logger="receivables")
    specs = [parse_debt(debt_body(account.public_id, f"D-{i}", deudor={"nombre": "Ana", "documento": f"{i}-K"}))
             for i in range(40)]
    holding, release = threading.Event(), threading.Event()
    outcomes: list = []

    def first_writer():
        with connection(), atomic():
            snapshots.upsert_debts(alice.id, specs[:1])
            holding.set()
            release.wait(10)

    def batch_writer():
        with connection():
            outcomes.extend(snapshots.upsert_debts(alice.id, specs))

    first = threading.Thread(target=first_writer)
    first.start()
    assert holding.wait(10)
    batch = threading.Thread(target=batch_writer)
    batch.start()
    if storage.database_url:
        for _ in range(200):  # until the batch's INSERT is waiting on the first writer's row lock
            if db.execute_sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                              "AND datname = current_database()").fetchone()[0]:
                break
            time.sleep(0.05)
    else:
        time.sleep(0.2)
    release.set()
    first.join()
    batch.join()
    assert [result.error for result in outcomes] == [None] * 40
    assert [result.action for result in outcomes] == ["updated"] + ["created"] * 39
    assert Debt.select().count() == 40
    if storage.database_url:
        assert "conflicted with a concurrent write" in caplog.text


def test_new_debts_planned_straight_to_rows_match_those_planned_as_state(alice, account, storage):
    # A batch of debts named once each writes new debts straight as rows; a batch that names a
    # debt twice plans every element as state. The rows, statuses and answers must be the same.
    from models.receivables import snapshots
    from models.receivables.inputs import parse_debt
    from models.receivables.tables import Installment
    from models.store.db import connection

    def installment(external_id, number, due_date, status=None, amount=100):
        item = {"external_id": external_id, "numero": number, "monto": amount, "vence": due_date}
        return item | ({"estado": status} if status else {})

    def bodies(prefix):
        return [
            debt_body(account.public_id, f"{prefix}open", deudor={"nombre": "Ana", "documento": f"{prefix}1-K"}),
            debt_body(account.public_id, f"{prefix}late", saldo_pendiente=250, tipo="installments",
                      external_version=4, deudor={"nombre": "Bea", "telefono": f"569{len(prefix)}1234567"},
                      cuotas=[installment("a", 1, "2001-01-10"), installment("b", 2, "2001-02-10", "partial"),
                              installment("c", 3, "2031-01-10", "partial"),
                              installment("d", 4, "2001-01-10", "cancelled"),
                              installment("e", 5, "2001-01-10", "paid")]),
            debt_body(account.public_id, f"{prefix}part", saldo_pendiente=120, auto_send=True, referencia=None,
                      external_updated_at="2030-05-01T10:00:00Z",
                      deudor={"nombre": "Ana", "documento": f"{prefix}1-K"},
                      cuotas=[installment("x", 1, "2031-01-10", "pending"), installment("y", 2, "2031-02-10", "paid")]),
            debt_body(account.public_id, f"{prefix}paid", saldo_pendiente=0, cuotas=[],
                      deudor={"nombre": "Cid", "documento": f"{prefix}3-K"}),
            debt_body(account.public_id, f"{prefix}bare", tipo="single", cuotas=[installment("z", 1, "2031-01-10")],
                      deudor={"nombre": "Cid",
                                                                                 "documento": f"{prefix}3-K"}),
            debt_body("wacc_missing", f"{prefix}lost", deudor={"nombre": "Dan", "documento": f"{prefix}4-K"}),
            debt_body(account.public_id, f"{prefix}clash",
                      deudor={"nombre": "Eva", "documento": f"{prefix}1-K", "telefono": f"569{len(prefix)}1234567"}),
        ]

    straight = [parse_debt(body) for body in bodies("R-")]
    planned = [parse_debt(body) for body in bodies("SS-")]
    planned.append(planned[0])  # named twice: the whole batch is planned as state
    with connection():
        first = snapshots.upsert_debts(alice.id, straight)
        second = snapshots.upsert_debts(alice.id, planned)

    def answers(results):
        return [(r.action, r.error and r.error.code, r.debt and {**r.debt.summary(), "external_id": None})
                for r in results]

    assert answers(first) == answers(second[:-1])
    assert [r.action for r in first] == ["created"] * 5 + [None, None]
    assert second[-1].action == "updated"

    def stored(prefix):
        debts = {}
        for debt in Debt.select().where(Debt.external_id.startswith(prefix)).order_by(Debt.id):
            installments = [(i.external_id.removeprefix(prefix), i.numero, i.monto, i.amount_paid, i.vence, i.status,
                             i.declared_status)
                      for i in Installment.select().where(Installment.debt == debt.id).order_by(Installment.id)]
            debts[debt.external_id.removeprefix(prefix)] = (
                debt.moneda, debt.referencia, debt.monto_original, debt.saldo_pendiente, debt.tipo, debt.auto_send,
                debt.status, debt.external_version, debt.external_updated_at, debt.resolution, debt.row_version,
                debt.debtor.nombre, debt.debtor.documento is not None, debt.debtor.telefono is not None,
                debt.created_at == debt.updated_at, installments)
        return debts

    rows = stored("R-")
    assert rows == stored("SS-")
    assert set(rows) == {"open", "late", "part", "paid", "bare"}
    assert [rows[name][6] for name in ("open", "late", "part", "paid", "bare")] == \
        ["pending", "overdue", "partial", "paid", "pending"]
    assert [item[5] for item in rows["late"][-1]] == ["overdue", "overdue", "partial", "cancelled", "paid"]


@pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
def test_a_batch_broken_by_a_deadlock_is_written_again_not_refused(client, alice, account, storage, caplog):
    """A batch PostgreSQL breaks to end a deadlock (`deadlock_a_batch`) is written again by the
    request, which answers 200 with what that run did, not 503."""
    debts = [debt_body(account.public_id, external_id, deudor={"nombre": document[-1], "documento": document})
             for external_id, document in (("D-1", "CC-A"), ("D-2", "CC-B"))]
    responses: list = []
    batch = threading.Thread(target=lambda: responses.append(post(client, alice, "/deudas/lote", {"deudas": debts})))
    with caplog.at_level(logging.WARNING, logger="models.store.db"):
        deadlock_a_batch(storage.database_url, alice.id, account.id, "USD", batch)
    assert "rolled back by a lock conflict" in caplog.text and "deadlock" in caplog.text
    [response] = responses
    assert response.status_code == 200, response.text
    assert response.json["data"]["summary"] == {"created": 1, "updated": 1, "ignored_stale": 0, "errors": 0}
    assert get_debt(client, alice, "D-2").json["data"]["deuda"]["saldo_pendiente"] == 300  # the batch's snapshot
