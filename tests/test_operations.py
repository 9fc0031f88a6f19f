"""Operations in-process, on SQLite and PostgreSQL + Redis: request ids, /healthz, /readyz,
/metrics and its token, rate-limit refusals counted, JSON log lines, the id carried into a task,
settings, and re-encrypting stored secrets under a new key."""

from __future__ import annotations

import ast
import io
import ipaddress
import json
import logging
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyotp
import pytest
from cryptography.fernet import Fernet
from prometheus_client.mmap_dict import MmapedDict, mmap_key

from api import request_metrics
from config import ConfigError, load_settings, logs
from config.access_log import loggable_path
from models.events.tables import WebhookEndpoint
from models.numbers.tables import MessagingAccount
from models.operations import rotation
from models.receivables import payments
from models.store import secrets
from models.store.db import db
from models.tenancy import portal
from models.tenancy.tables import IdempotencyRecord, PortalUser
from tests.campaigns_fixtures import campaign_body, make_number
from tests.live import env_for
from tests.operations_fixtures import *  # noqa: F403  (served_on_loopback)
from tests.operations_fixtures import parse, total
from tests.webhooks_fixtures import configure

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("served_on_loopback")


def metric(client, name: str, **labels) -> float:
    return total(parse(client.simulate_get("/metrics").text), name, **labels)


def test_every_response_carries_a_request_id(client, alice):
    kept = client.simulate_get("/api/v1/credits/balance", headers={**alice.headers, "X-Request-Id": "erp-run-7:42"})
    assert kept.headers["X-Request-Id"] == "erp-run-7:42"
    made = client.simulate_get("/api/v1/credits/balance", headers=alice.headers)
    assert made.headers["X-Request-Id"].startswith("req_")
    assert made.headers["X-Request-Id"] != client.simulate_get("/healthz").headers["X-Request-Id"]
    # A value that could forge a log line or flood it is replaced, never echoed.
    for insane in ("a b", "x" * 129, "id\u00e9", "<script>"):
        answer = client.simulate_get("/api/v1/credits/balance", headers={**alice.headers, "X-Request-Id": insane})
        assert answer.headers["X-Request-Id"].startswith("req_")
    for status, answer in ((401, client.simulate_get("/api/v1/credits/balance")),
                           (404, client.simulate_get("/no/such/page"))):
        assert answer.status_code == status and answer.headers["X-Request-Id"].startswith("req_")


def test_healthz_and_readyz(client, storage):
    assert client.simulate_get("/healthz").json == {"status": "ok"}
    ready = client.simulate_get("/readyz")
    expected = {"database": "ok", "migrations": "ok", "queue": "ok"}
    if storage.redis_url:
        expected["redis"] = "ok"
    assert (ready.status_code, ready.json) == (200, {"status": "ready", "checks": expected})


def test_readyz_names_a_migration_not_applied(client, storage):
    db.execute_sql("DELETE FROM schema_migration WHERE name = '0012_operations'")
    answer = client.simulate_get("/readyz")
    assert answer.status_code == 503
    assert answer.json["checks"]["migrations"] == "pending: 0012_operations"


def test_metrics_are_behind_the_token_when_one_is_set(client, storage):
    configure(storage, metrics_token="s3cret-scrape")
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        refused = client.simulate_get("/metrics", headers=headers)
        assert refused.status_code == 401 and refused.json["error"]["code"] == "unauthorized"
    answer = client.simulate_get("/metrics", headers={"Authorization": "Bearer s3cret-scrape"})
    assert answer.status_code == 200 and "svc_state_up 1.0" in answer.text
    assert "s3cret-scrape" not in answer.text


def test_without_a_token_metrics_are_served_to_loopback_clients_only(client, storage):
    assert client.simulate_get("/metrics", remote_addr="::1").status_code == 200
    refused = client.simulate_get("/metrics", remote_addr="192.0.2.10")
    assert refused.status_code == 403 and refused.json["success"] is False
    assert refused.json["error"]["code"] == "metrics_loopback_only"
    # A proxy on this host that says whom it forwards for does not make that client local.
    configure(storage, trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),))
    assert client.simulate_get("/metrics", headers={"X-Forwarded-For": "198.51.100.4"}).status_code == 403
    assert client.simulate_get("/metrics").status_code == 200


def test_a_scrape_while_a_worker_creates_its_metrics_file_counts_the_others(client, storage, tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    (tmp_path / "counter_4242.db").write_bytes(b"")  # a starting worker's file, not yet sized
    values = MmapedDict(str(tmp_path / "counter_4243.db"))  # another worker's, as prometheus_client writes it
    values.write_value(mmap_key("svc_probe_total", "svc_probe_total", [], [], "A probe."), 3.0, 0.0)
    values.close()
    answer = client.simulate_get("/metrics")
    assert answer.status_code == 200, answer.text
    assert "svc_probe_total 3.0" in answer.text and "svc_state_up 1.0" in answer.text


def test_requests_and_rate_limit_refusals_are_counted_by_route_template(client, alice, storage):
    headers = alice.with_key(["all"], rate_limit=2)
    route = "/api/v1/campaigns/{campaign_id}"
    before = (metric(client, "svc_http_requests_total", route=route, status="404"),
              metric(client, "svc_http_rate_limited_total", route=route))
    answers = [client.simulate_get("/api/v1/campaigns/cmp_nope", headers=headers).status_code for _ in range(3)]
    assert answers == [404, 404, 429]
    after = (metric(client, "svc_http_requests_total", route=route, status="404"),
             metric(client, "svc_http_rate_limited_total", route=route))
    assert (after[0] - before[0], after[1] - before[1]) == (2, 1)
    # The template, never the id the client sent.
    assert "cmp_nope" not in client.simulate_get("/metrics").text


def test_requests_counted_from_many_threads_reach_the_scrape_once_each_in_their_buckets(client, storage):
    # Eight threads count at once while the flusher adds batches: none lost, none counted twice,
    # each duration in the first bucket whose bound holds it, as `observe` would put it.
    route = "/api/v1/_tallied"
    durations = (0.001, 0.005, 0.03, 0.7, 42.0)
    bounds = ("0.005", "0.01", "0.025", "0.05", "0.5", "1.0", "10.0", "+Inf")

    def figures() -> list[float]:
        samples = parse(client.simulate_get("/metrics").text)
        return [total(samples, "svc_http_requests_total", route=route, method="GET", status="200"),
                total(samples, "svc_http_request_duration_seconds_sum", route=route, method="GET"),
                *(total(samples, "svc_http_request_duration_seconds_bucket", route=route, method="GET", le=bound)
                  for bound in bounds)]

    def count() -> None:
        for _ in range(500):
            for seconds in durations:
                request_metrics.tallies.record(route, "GET", "200 OK", seconds)

    before = figures()
    with ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(count) for _ in range(8)]:
            future.result()
    requests, seconds, *buckets = (after - earlier for after, earlier in zip(figures(), before, strict=True))
    rounds = 8 * 500
    assert requests == rounds * len(durations)
    assert seconds == pytest.approx(rounds * sum(durations))
    assert buckets == [n * rounds for n in (2, 2, 2, 3, 3, 4, 4, 5)]


def test_log_lines_are_json_with_the_ids_they_were_written_under():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs.ContextFilter())
    logger = logging.getLogger("test.operations")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with logs.bound(request="req_abc", tenant=lambda: 42, task="jobs.x.y"):
            logger.info("sent %s", "one\nline")
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert {key: first[key] for key in ("level", "logger", "message", "request_id", "tenant_id", "task")} == {
        "level": "info", "logger": "test.operations", "message": "sent one\nline", "request_id": "req_abc",
        "tenant_id": 42, "task": "jobs.x.y"}
    assert second["request_id"] is None and "ValueError: boom" in second["error"]


def test_a_task_enqueued_by_a_request_carries_its_id(client, alice, storage, immediate_queue):
    immediate_queue.immediate = False
    immediate_queue.flush()
    account = make_number(alice.id)
    answer = client.simulate_post("/api/v1/campaigns", json=campaign_body(account, ["5215550001117"]),
                                  headers={**alice.headers, "X-Request-Id": "complaint-99"})
    assert answer.status_code == 201, answer.text
    tasks = immediate_queue.pending()
    assert tasks and all(task.kwargs.get("_request_id") == "complaint-99" for task in tasks)
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(logs.request_id.get())
    huey_log = logging.getLogger("huey")
    level = huey_log.level
    huey_log.setLevel(logging.DEBUG)  # where huey's own lines about each task are
    huey_log.addHandler(handler)
    try:
        immediate_queue.execute(immediate_queue.dequeue())
    finally:
        huey_log.removeHandler(handler)
        huey_log.setLevel(level)
    assert seen and set(seen) == {"complaint-99"}  # huey's own lines about the task included
    assert logs.request_id.get() is None
    immediate_queue.flush()


@pytest.mark.parametrize("level", ["info", "debug"])
def test_the_queue_routine_is_a_debug_line_and_sql_never_shows(level, capsys):
    import jobs.queue  # noqa: F401  (it lowers huey's routine lines as it loads)

    root = logging.getLogger()
    kept = (list(root.handlers), root.level, {name: logging.getLogger(name).level for name in ("peewee", "urllib3")})
    logs.configure_logging("text", level)
    try:
        logging.getLogger("huey").info("Executing %s", "jobs.idempotency.purge_expired_idempotency_keys: 1f2e")
        logging.getLogger("huey.consumer.Scheduler").info("Enqueueing periodic task %s.", "jobs.webhooks.sweep: 3c4d")
        logging.getLogger("huey").info("Task %s raised RetryTask, retrying.", "5e6f")
        logging.getLogger("peewee").debug("('SELECT \"key\" FROM \"api_key\"', ['svc_live_secret'])")
        logging.getLogger("urllib3.connectionpool").debug('"GET /oauth/access_token?client_secret=as_x HTTP/1.1" 200')
    finally:
        root.handlers[:] = kept[0]
        root.setLevel(kept[1])
        for name, old in kept[2].items():
            logging.getLogger(name).setLevel(old)
    written = capsys.readouterr().err
    assert "INFO huey: Task 5e6f raised RetryTask" in written  # what happened keeps its level
    routine = ["DEBUG huey: Executing jobs.idempotency.purge_expired_idempotency_keys: 1f2e",
               "DEBUG huey.consumer.Scheduler: Enqueueing periodic task jobs.webhooks.sweep: 3c4d."]
    assert [line in written for line in routine] == [level == "debug"] * 2
    assert "INFO huey: Executing" not in written and "INFO huey.consumer.Scheduler" not in written
    assert "svc_live_secret" not in written and "client_secret" not in written


@pytest.mark.parametrize(("raw", "message"), [
    ("not-a-key", "SVC_SECRET_KEY: key 1 is not"),
    ("{key},nope", "SVC_SECRET_KEY: key 2 is not"),
    ("{key},{key}", "SVC_SECRET_KEY: a key is listed twice"),
])
def test_a_bad_secret_key_list_is_one_line(raw, message, tmp_path):
    key = Fernet.generate_key().decode()
    with pytest.raises(ConfigError, match=message):
        load_settings({"SVC_DATA_DIR": str(tmp_path), "SVC_SECRET_KEY": raw.format(key=key)})


def test_operations_settings(tmp_path):
    first, second = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings = load_settings({"SVC_DATA_DIR": str(tmp_path), "SVC_SECRET_KEY": f" {first} , {second} ",
                              "SVC_LOG_FORMAT": "JSON", "SVC_METRICS_PORT": "9105", "SVC_ACCESS_LOG": "off",
                              "SVC_LOG_LEVEL": " Debug "})
    assert (settings.secret_key, settings.secret_keys) == (first, (first, second))
    assert (settings.log_format, settings.metrics_bind, settings.access_log) == ("json", ("127.0.0.1", 9105), False)
    assert settings.log_level == "debug"
    assert load_settings({"SVC_DATA_DIR": str(tmp_path), "SVC_SECRET_KEY": first}).log_level == "info"
    assert load_settings({"SVC_DATA_DIR": str(tmp_path), "SVC_SECRET_KEY": first,
                          "SVC_METRICS_PORT": "0.0.0.0:9200"}).metrics_bind == ("0.0.0.0", 9200)
    for name, raw in (("SVC_LOG_FORMAT", "xml"), ("SVC_METRICS_PORT", "ninety"), ("SVC_METRICS_PORT", "70000"),
                      ("SVC_LOG_LEVEL", "verbose")):
        with pytest.raises(ConfigError, match=name):
            load_settings({"SVC_DATA_DIR": str(tmp_path), "SVC_SECRET_KEY": first, name: raw})


def test_rotate_re_encrypts_every_stored_secret_under_the_first_key(client, alice, storage):
    old_key, new_key = storage.secret_key, Fernet.generate_key().decode()
    account = make_number(alice.id, token="EAAG-platform-token")
    created = client.simulate_post("/api/v1/webhooks/endpoints", headers={**alice.headers, "Idempotency-Key": "k1"},
                                   json={"url": "https://example.com/hooks", "events": ["message.sent"]})
    assert created.status_code == 201, created.text
    signing_secret = created.json["data"]["signing_secret"]
    # A stored response that shows no secret is plain JSON beside the ciphertexts, and stays so.
    IdempotencyRecord.create(tenant=alice.id, key="k2", method="POST", path="/api/v1/x", body_hash="0" * 64,
                             state="done", status=200, body='{"success":true}')
    payments.connect_gateway(alice.id, "APP_USR-gateway-token", "gateway-webhook-secret")
    owner = portal.create_user(alice.id, "owner@alice.example", "owner", "a long enough password 1")
    totp_secret = portal.begin_totp(owner)

    configure(storage, secret_keys=(new_key, old_key), secret_key=new_key)
    assert account.access_token and MessagingAccount.get_by_id(account.id).access_token == account.access_token
    report = rotation.rotate(batch=1)
    columns = {column.column: column for column in report.columns}
    assert columns["messaging_account.access_token"].rotated == 1
    assert columns["webhook_endpoint.secret_ciphertext"].rotated == 1
    assert columns["payment_gateway.access_token_ciphertext"].rotated == 1
    assert columns["payment_gateway.webhook_secret_ciphertext"].rotated == 1
    assert columns["portal_user.totp_pending_ciphertext"].rotated == 1
    assert report.unreadable == 0
    assert rotation.rotate().rotated == 0  # run again: nothing left under the old key

    configure(storage, secret_keys=(new_key,), secret_key=new_key)  # the old key removed
    assert secrets.decrypt(MessagingAccount.get_by_id(account.id).access_token) == "EAAG-platform-token"
    assert WebhookEndpoint.get(WebhookEndpoint.tenant == alice.id).signing_secret == signing_secret
    assert payments.webhook_secret_of(alice.id) == "gateway-webhook-secret"
    assert portal.pending_totp_secret(PortalUser.get_by_id(owner.id)) == totp_secret
    # The idempotent replay of the creation (its body holds the secret, encrypted) still answers.
    replay = client.simulate_post("/api/v1/webhooks/endpoints", headers={**alice.headers, "Idempotency-Key": "k1"},
                                  json={"url": "https://example.com/hooks", "events": ["message.sent"]})
    assert replay.json["data"]["signing_secret"] == signing_secret
    assert columns["idempotency_record.body"].plain == 1
    assert IdempotencyRecord.get(IdempotencyRecord.key == "k2").body == '{"success":true}'


def encrypted_columns_in_the_source() -> set[tuple[str, str]]:
    """(table class, attribute) of every `EncryptedText(...)` a table under models/ declares, read
    from the source: the list rotation must cover, found without asking rotation."""
    declared = set()
    for path in (ROOT / "models").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for statement in node.body:
                    if (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call)
                            and ast.unparse(statement.value.func).rpartition(".")[2] == "EncryptedText"):
                        declared |= {(node.name, target.id) for target in statement.targets}
    return declared


def test_rotation_finds_every_encrypted_column_wherever_its_table_lives():
    # In a process of its own: here every table is imported already, whatever rotation walks.
    listing = ("import json; from models.operations.rotation import encrypted_columns; "
               "print(json.dumps([[table.__name__, column.name] for table, column in encrypted_columns()]))")
    found = subprocess.run([sys.executable, "-c", listing], cwd=ROOT, capture_output=True, text=True, timeout=60,
                           check=True)
    declared = encrypted_columns_in_the_source()
    assert len(declared) >= 7
    assert {tuple(column) for column in json.loads(found.stdout)} == declared


def test_svcctl_secrets_rotate_re_encrypts_every_encrypted_column(client, alice, storage):
    old_key, new_key = storage.secret_key, Fernet.generate_key().decode()
    # A secret under the old key in every encrypted column: the number's token; the endpoint's
    # signing secret, and the stored response of its creation, which shows it; the gateway's
    # credentials; a confirmed two-factor secret, and one being set up.
    make_number(alice.id, token="EAAG-platform-token")
    created = client.simulate_post("/api/v1/webhooks/endpoints", headers={**alice.headers, "Idempotency-Key": "k1"},
                                   json={"url": "https://example.com/hooks", "events": ["message.sent"]})
    assert created.status_code == 201, created.text
    payments.connect_gateway(alice.id, "APP_USR-gateway-token", "gateway-webhook-secret")
    owner = portal.create_user(alice.id, "owner@alice.example", "owner", "a long enough password 1")
    totp_secret = portal.begin_totp(owner)
    assert portal.confirm_totp(PortalUser.get_by_id(owner.id), pyotp.TOTP(totp_secret).now())
    portal.begin_totp(PortalUser.get_by_id(owner.id))

    # The command as an operator runs it: a process of its own, which imports what it walks.
    result = subprocess.run([sys.executable, "-m", "svcctl.main", "secrets", "rotate", "--json"], cwd=ROOT,
                            env={**os.environ, **env_for(storage), "SVC_SECRET_KEY": f"{new_key},{old_key}"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    every_column = {f"{table._meta.table_name}.{column.column_name}" for table, column in rotation.encrypted_columns()}
    assert len(every_column) == len(encrypted_columns_in_the_source())
    assert {column["column"] for column in report["columns"]} == every_column
    assert {column["column"] for column in report["columns"] if column["rotated"]} == every_column
    assert report["unreadable"] == 0


def test_a_secret_no_key_opens_is_reported_not_lost(alice, storage):
    make_number(alice.id, token="EAAG-other")
    configure(storage, secret_keys=(Fernet.generate_key().decode(),))
    report = rotation.rotate()
    assert report.unreadable == 1 and report.rotated == 0


def test_a_logged_path_holds_no_credential():
    # The portal's invitation token is in its path; the platform's verify token in a query.
    assert loggable_path("/portal/invitations/pinv_s3cr3t") == "/portal/invitations/…"
    assert loggable_path("/platform/webhook?hub.mode=subscribe&hub.verify_token=vt_x") == "/platform/webhook"
    assert loggable_path("/api/v1/campaigns/cmp_1/recipients") == "/api/v1/campaigns/cmp_1/recipients"
    # The debtor's page: its token in the path, and in a reminder's /pay/ button; payment links stay.
    assert loggable_path("/d/dl_s3cr3t?ok=returned") == "/d/…"
    assert loggable_path("http://svc.example/pay/dl_s3cr3t") == "http://svc.example/pay/…"
    assert loggable_path("/pay/plk_1") == "/pay/plk_1"


def test_the_text_access_line_is_the_documented_format(monkeypatch):
    """The API's text access line, written directly, is TEXT_ACCESS_FORMAT filled by gunicorn's own
    atoms (with the path made loggable), so log parsers keep working."""
    import datetime as dt
    from types import SimpleNamespace

    from gunicorn import glogging
    from gunicorn.config import Config

    from config.access_log import TEXT_ACCESS_FORMAT, ServiceLogger

    monkeypatch.setenv("SVC_LOG_FORMAT", "text")
    config = Config()
    config.set("accesslog", "-")
    logger = ServiceLogger(config)
    lines = io.StringIO()
    logger.access_log.handlers[0].stream = lines
    logger.now = lambda: "[28/Nov/2026:14:30:00 +0000]"
    secret = "/portal/invitations/inv_secret"
    environ = {"REMOTE_ADDR": "10.1.2.3", "REQUEST_METHOD": "GET", "RAW_URI": f"{secret}?x=1",
               "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_USER_AGENT": "erp/2.0", "PATH_INFO": secret,
               "HTTP_REFERER": "https://example.test/portal/invitations/inv_other"}
    req = SimpleNamespace(method="GET", path=secret, headers=[("USER-AGENT", "erp/2.0")])
    took = dt.timedelta(seconds=1, microseconds=2345)
    for sent in (512, None):
        resp = SimpleNamespace(status="200 OK", sent=sent, headers=[("X-Request-Id", "req_abc")])
        logger.access(resp, req, environ, took)
        expected = TEXT_ACCESS_FORMAT % glogging.SafeAtoms(logger.atoms(resp, req, environ, took))
        assert lines.getvalue().splitlines()[-1] == expected
    assert "inv_secret" not in lines.getvalue() and "inv_other" not in lines.getvalue()
    assert lines.getvalue().splitlines()[0].endswith('"erp/2.0" 1.002345s rid=req_abc')
