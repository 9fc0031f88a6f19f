"""Idempotency keys of requests that died mid-way (their process killed): a retry takes a claim
over at once when nothing was committed, and never runs an operation that was.

The process deaths are arranged by hand here (a claim left by a process that has exited); the
live version, with gunicorn workers killed under load, is in tests/test_faults_processes.py.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading

import pytest

from api.operation import Reply, operation
from models.store.db import connection
from models.tenancy import credits, idempotency
from models.tenancy.idempotency import CLAIMER
from models.tenancy.tables import IdempotencyRecord
from tests.test_api_rules import GrantInput, GrantOne

PATH = "/api/v1/test-write"


def dead_claimer() -> str:
    """The claimer string of a process of this host that has exited."""
    process = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                             text=True, check=True)
    return f"{idempotency._this_host()}/{process.stdout.strip()}"


def body_hash(body: dict) -> str:
    # The test client encodes with the stdlib json.
    return hashlib.sha256(json.dumps(body).encode()).hexdigest()


@pytest.fixture(autouse=True)
def routes(app):
    """Writes that count their executions (one credit granted per call), one of which fails after
    its operation committed, one whose claim is taken over by a retry while it runs, and one whose
    key a duplicate applies while it runs."""
    class GrantThenCrash:
        @operation("test", scope="credits:read", body=GrantInput)
        def on_post(self, req, resp):
            credits.grant(req.context.tenant_id, 1, reason=req.context.body.note)
            raise RuntimeError("the process fails after the operation committed")

    class OvertakenGrant:
        @operation("test", scope="credits:read", body=GrantInput, calls_out_first=True)
        def on_post(self, req, resp):
            # What a retry does when it judges this request dead: remove the in-progress claim.
            IdempotencyRecord.delete().where(IdempotencyRecord.key == req.get_header("Idempotency-Key")).execute()
            credits.grant(req.context.tenant_id, 1, reason=req.context.body.note)
            return Reply(201, {"success": True})

    class OutrunGrant:
        @operation("test", scope="credits:read", body=GrantInput)
        def on_post(self, req, resp):
            # A concurrent duplicate, in a thread of its own, commits first: its record holds the key.
            def duplicate() -> None:
                with connection():
                    claim = idempotency.look_up(req.context.tenant_id, req.get_header("Idempotency-Key"), "POST",
                                                req.path, body_hash(req.context.body.model_dump()))
                    with idempotency.applying(claim.use):
                        credits.grant(req.context.tenant_id, 1, reason="the duplicate")

            thread = threading.Thread(target=duplicate)
            thread.start()
            thread.join()
            credits.grant(req.context.tenant_id, 1, reason=req.context.body.note)
            return Reply(201, {"success": True})

    class CrashBeforeCommit:
        @operation("test", scope="credits:read", body=GrantInput)
        def on_post(self, req, resp):
            raise RuntimeError("the process fails before the operation commits")

    app.add_route(PATH, GrantOne())
    app.add_route(PATH + "-crash", GrantThenCrash())
    app.add_route(PATH + "-crash-before", CrashBeforeCommit())
    app.add_route(PATH + "-overtaken", OvertakenGrant())
    app.add_route(PATH + "-outrun", OutrunGrant())


def post(client, persona, key: str, body: dict, path: str = PATH):
    return client.simulate_post(path, json=body, headers={**persona.headers, "Idempotency-Key": key})


def test_a_claim_left_by_a_process_that_is_gone_is_taken_over_at_once(client, alice):
    body = {"note": "a"}
    claim = idempotency.claim(alice.id, "k-dead", "POST", PATH, body_hash(body))
    IdempotencyRecord.update(headers={CLAIMER: dead_claimer()}).where(IdempotencyRecord.id == claim.use.record_id) \
        .execute()
    response = post(client, alice, "k-dead", body)
    assert response.status_code == 201
    assert credits.wallet_of(alice.id).balance == 1001
    again = post(client, alice, "k-dead", body)
    assert again.headers["x-service-idempotent-replay"] == "true"
    assert credits.wallet_of(alice.id).balance == 1001


def test_a_claim_of_a_live_process_still_conflicts(client, alice):
    body = {"note": "a"}
    idempotency.claim(alice.id, "k-live", "POST", PATH, body_hash(body))  # claimed by this very process
    response = post(client, alice, "k-live", body)
    assert response.status_code == 409
    assert response.json["error"]["details"] == {"reason": "in_progress"}
    assert credits.wallet_of(alice.id).balance == 1000


def test_an_operation_that_committed_is_never_run_again(client, alice):
    body = {"note": "a"}
    claim = idempotency.claim(alice.id, "k-applied", "POST", PATH, body_hash(body))
    IdempotencyRecord.update(state="applied", headers={CLAIMER: dead_claimer()}).where(
        IdempotencyRecord.id == claim.use.record_id).execute()
    response = post(client, alice, "k-applied", body)
    assert response.status_code == 409
    assert response.json["error"]["code"] == "idempotency_conflict"
    assert response.json["error"]["details"] == {"reason": "applied"}
    assert credits.wallet_of(alice.id).balance == 1000


def test_the_applied_mark_commits_with_the_operation(client, alice):
    body = {"note": "a"}
    crashed = post(client, alice, "k-crash", body, path=PATH + "-crash")
    assert crashed.status_code == 500
    record = IdempotencyRecord.get(IdempotencyRecord.key == "k-crash")
    assert record.state == "applied"
    assert credits.wallet_of(alice.id).balance == 1001
    retried = post(client, alice, "k-crash", body, path=PATH + "-crash")
    assert retried.status_code == 409
    assert retried.json["error"]["details"] == {"reason": "applied"}
    assert credits.wallet_of(alice.id).balance == 1001


def test_a_failure_before_any_commit_frees_the_key(client, alice):
    response = post(client, alice, "k-invalid", {"wrong": 1})
    assert response.status_code == 422  # stored for replay, like any answer below 500
    assert IdempotencyRecord.get(IdempotencyRecord.key == "k-invalid").state == "done"


def test_a_request_whose_claim_was_taken_over_commits_nothing(client, alice):
    response = post(client, alice, "k-overtaken", {"note": "a"}, path=PATH + "-overtaken")
    assert response.status_code == 409
    assert response.json["error"]["code"] == "idempotency_conflict"
    assert credits.wallet_of(alice.id).balance == 1000


def test_a_request_whose_key_a_duplicate_applied_first_commits_nothing(client, alice):
    response = post(client, alice, "k-outrun", {"note": "a"}, path=PATH + "-outrun")
    assert response.status_code == 409
    assert response.json["error"]["code"] == "idempotency_conflict"
    assert response.json["error"]["details"] == {"reason": "in_progress"}
    assert credits.wallet_of(alice.id).balance == 1001  # the duplicate's grant only
    assert IdempotencyRecord.get(IdempotencyRecord.key == "k-outrun").state == "applied"


def test_a_key_is_written_by_the_operations_commit_not_before(client, alice):
    """Only an operation that calls out first claims its key before it runs: the others' record
    is written in their first transaction, so a request that fails before committing leaves none."""
    crashed = post(client, alice, "k-before", {"note": "a"}, path=PATH + "-crash-before")
    assert crashed.status_code == 500
    assert not IdempotencyRecord.select().where(IdempotencyRecord.key == "k-before").exists()
