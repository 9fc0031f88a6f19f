"""Schema migrations applied to a database an earlier release left, with its rows, on both engines."""

from __future__ import annotations

import datetime as dt
import uuid
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest
from playhouse.migrations import Runner

from config import load_settings, use_settings
from models import setup
from models.numbers.tables import MessagingAccount, PlatformWebhookBatch
from models.receivables.debts import refresh_overdue
from models.receivables.tables import (
    Allocation,
    Debt,
    Debtor,
    Installment,
    Payment,
    PaymentLink,
    PaymentReversal,
)
from models.sending.campaign_reads import read_campaign
from models.sending.tables import COUNTERS, Message
from models.store.db import MIGRATIONS_DIR, connection, db, execute, upgrade
from models.tenancy.tables import PortalUser, Tenant
from tests.conftest import PG_DSN, _pg_admin, _require, base_env, drop_pg_database

WHEN = dt.datetime(2031, 1, 5, 12, 0)


@pytest.fixture(scope="module")
def drop_later():
    """Drops a test's PostgreSQL database beside the tests that follow it: each DROP DATABASE waits
    for a checkpoint (seconds to tens of seconds on a loaded machine), and drops waiting side by
    side share one. The module ends once all of them are gone."""
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="migrations-drop") as pool:
        dropping = []
        yield lambda name: dropping.append(pool.submit(drop_pg_database, name))
        for dropped in dropping:
            dropped.result()


@pytest.fixture(params=["sqlite", "postgres"])
def migrated_to(request, tmp_path, drop_later):
    """A database of each engine, and a function that migrates it up to a named migration."""
    env = base_env(tmp_path / "data")
    name = None
    if request.param == "postgres":
        _require("postgres")
        name = f"svc_mig_{uuid.uuid4().hex[:10]}"
        admin = _pg_admin()
        admin.cursor().execute(f'CREATE DATABASE "{name}"')
        admin.close()
        env["SVC_DATABASE_URL"] = f"{PG_DSN}/{name}"
    setup.init_db(use_settings(load_settings(env)))

    def migrate(target: str) -> None:
        with connection():
            Runner(db.obj, directory=str(MIGRATIONS_DIR)).up(target)

    yield migrate
    db.close_all()
    if name is not None:
        drop_later(name)


def tenant_of_the_release_before(public_id: str) -> Tenant:
    """A company as a release before 0023_languages wrote it (no locale yet)."""
    execute('INSERT INTO "tenant" ("public_id", "name", "timezone", "status", "created_at") VALUES (?, ?, ?, ?, ?)',
            [public_id, "Before", "America/Santiago", "active", WHEN])
    return Tenant.select(Tenant.id).where(Tenant.public_id == public_id).get()


def test_the_english_columns_keep_every_row_of_the_release_before(migrated_to):
    migrated_to("0021_webhook_delivery_indexes")
    with connection():
        tenant = tenant_of_the_release_before("ten_before")
        account = MessagingAccount.create(public_id="wacc_before", tenant=tenant.id, phone_id="pn-before")
        debtor = Debtor.create(tenant=tenant.id, nombre="Ana", documento="1-9")
        debt = Debt.create(tenant=tenant.id, external_id="D-1", account=account.id, debtor=debtor.id, moneda="USD",
                           monto_original=30000, saldo_pendiente=20000, status="partial")
        # The rows as the earlier release wrote them, under its column names.
        execute('INSERT INTO "debt_installment" ("debt_id", "external_id", "numero", "monto", "pagado", "vence", '
                '"estado", "declared_estado") VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
                [debt.id, "D-1-1", 1, 15000, 10000, dt.date(2031, 1, 10), "partial", "pending"])
        installment_id = Installment.select(Installment.id).scalar()
        execute('INSERT INTO "debt_payment" ("tenant_id", "debt_id", "public_id", "origin", "monto", "moneda", '
                '"metodo", "pagado_en", "monto_sin_asignar", "saldo_after", "created_at") '
                'VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
                [tenant.id, debt.id, "bpay_before", "service", 12500, "USD", "gateway", WHEN, 2500, 20000, WHEN])
        payment_id = Payment.select(Payment.id).scalar()
        execute('INSERT INTO "payment_allocation" ("payment_id", "installment_id", "monto") VALUES (?, ?, ?)',
                [payment_id, installment_id, 10000])
        execute('INSERT INTO "payment_link" ("public_id", "tenant_id", "debt_id", "installment_id", "monto", "moneda", '
                '"origin", "status", "expires_at", "created_at") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
                ["plk_before", tenant.id, debt.id, installment_id, 12500, "USD", "api", "paid", WHEN, WHEN])
        execute('INSERT INTO "payment_reversal" ("public_id", "tenant_id", "payment_id", "kind", "monto", "moneda", '
                '"unassigned", "saldo_after", "reversed_at", "created_at") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
                ["brev_before", tenant.id, payment_id, "refund", 3000, "USD", 2500, 20500, WHEN, WHEN])

    assert upgrade()[0] == "0022_english_columns"  # the later ones after it

    with connection():
        installment = Installment.get_by_id(installment_id)
        assert (installment.monto, installment.amount_paid, installment.status, installment.declared_status) == (
            15000, 10000, "partial", "pending")
        payment = Payment.get_by_id(payment_id)
        assert (payment.monto, payment.metodo, payment.unassigned, payment.balance_after) == (
            12500, "gateway", 2500, 20000)
        assert Allocation.get().amount == 10000
        link = PaymentLink.get()
        assert (link.public_id, link.amount, link.currency) == ("plk_before", 12500, "USD")
        reversal = PaymentReversal.get()
        assert (reversal.amount, reversal.currency, reversal.unassigned, reversal.balance_after) == (
            3000, "USD", 2500, 20500)
        # The index on the installment's status and due date follows its column and its name.
        indexes = {index.name: index.columns for index in db.get_indexes("debt_installment")}
        assert indexes["debt_installment_status_vence"] == ["status", "vence"]
        assert "debt_installment_estado_vence" not in indexes
        # The service works on them: the overdue pass finds the installment past due.
        assert refresh_overdue(dt.datetime(2031, 2, 1)) == 1
        assert Installment.get_by_id(installment_id).status == "overdue"


def test_a_company_and_its_users_of_the_release_before_read_the_portal_as_before(migrated_to):
    """0023_languages: every existing company gets en_US, the portal's language until then, and
    its users no language of their own (their browser's decides)."""
    migrated_to("0022_english_columns")
    with connection():
        tenant = tenant_of_the_release_before("ten_before")
        execute('INSERT INTO "portal_user" ("public_id", "tenant_id", "email", "role", "password_hash", "created_at") '
                'VALUES (?, ?, ?, ?, ?, ?)', ["usr_before", tenant.id, "ana@before.example", "owner", "x", WHEN])

    assert upgrade()[0] == "0023_languages"

    with connection():
        assert Tenant.get_by_id(tenant.id).locale == "en_US"
        assert PortalUser.get(PortalUser.public_id == "usr_before").language is None


def test_platform_batches_of_the_release_before_name_the_sends_their_statuses_prove(migrated_to):
    """0025_parked_platform_batches: a batch not processed yet gets the callback data of its
    statuses (recovery holds back only those sends for it); none is parked."""
    migrated_to("0023_languages")
    status = {"id": "wamid.B", "status": "sent", "timestamp": "1", "recipient_id": "5691",
              "biz_opaque_callback_data": "rcp_before"}
    body = orjson.dumps({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [
        {"field": "messages", "value": {"metadata": {"phone_number_id": "pn"}, "statuses": [status]}}]}]}).decode()
    with connection():
        for processed_at in (None, WHEN):
            execute('INSERT INTO "platform_webhook_batch" ("body", "received_at", "processed_at", "attempts") '
                    'VALUES (?, ?, ?, ?)', [body, WHEN, processed_at, 0])
        execute('INSERT INTO "platform_webhook_batch" ("body", "received_at", "attempts") VALUES (?, ?, ?)',
                ["{not json", WHEN, 3])

    assert "0025_parked_platform_batches" in upgrade()

    with connection():
        rows = list(PlatformWebhookBatch.select().order_by(PlatformWebhookBatch.id))
        assert [(row.callbacks, row.parked_at) for row in rows] == [("rcp_before", None), (None, None), ("", None)]


def test_claims_the_release_before_left_in_flight_count_as_started(migrated_to):
    """0024_send_started: a claim an earlier release left unanswered may have been on the wire, so
    it counts as started (recovery settles it, never sends it again); nothing else is marked."""
    migrated_to("0023_languages")
    with connection():
        tenant = tenant_of_the_release_before("ten_claims")
        account = MessagingAccount.create(public_id="wacc_claims", tenant=tenant.id, phone_id="pn-claims")
        for public_id, token in (("msg_claimed", "oldengine.1"), ("msg_waiting", None)):
            execute('INSERT INTO "message" ("public_id", "tenant_id", "account_id", "to", "type", "content", '
                    '"status", "claim_token", "claimed_at", "attempts", "throttled", "created_at") '
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [public_id, tenant.id, account.id, "5691", "text", '{"body": "Hola"}', "queued", token,
                     WHEN if token else None, 1 if token else 0, 0, WHEN])

    assert "0024_send_started" in upgrade()

    with connection():
        started = dict(Message.select(Message.public_id, Message.send_started_at).tuples())
        assert started == {"msg_claimed": WHEN, "msg_waiting": None}


def test_campaigns_of_the_release_before_read_their_counts_from_their_counters(migrated_to):
    """0033_campaign_counters: each campaign's recipients are counted once per status into the row
    of its credit counters (renamed), so its reads answer the counts they counted before."""
    migrated_to("0032_recipient_send_times")
    statuses = ["pending", "queued", "sent", "sent", "delivered", "read", "read", "read", "failed", "skipped"]
    with connection():
        tenant = tenant_of_the_release_before("ten_counts")
        account = MessagingAccount.create(public_id="wacc_counts", tenant=tenant.id, phone_id="pn-counts")
        for public_id, recipients in (("cmp_counted", statuses), ("cmp_empty", [])):
            execute('INSERT INTO "campaign" ("public_id", "tenant_id", "account_id", "source", "template_name", '
                    '"template_language", "status", "total_recipients", "created_at") '
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [public_id, tenant.id, account.id, "api", "hello_world", "en_US", "processing",
                     len(recipients), WHEN])
            (campaign_id,) = execute('SELECT "id" FROM "campaign" WHERE "public_id" = ?', [public_id]).fetchone()
            execute('INSERT INTO "campaign_credits" ("campaign_id", "reserved", "consumed", "released", "refunded") '
                    "VALUES (?, ?, ?, ?, ?)", [campaign_id, 9, 6, 1, 0])
            for position, status in enumerate(recipients, start=1):
                execute('INSERT INTO "campaign_recipient" ("public_id", "campaign_id", "wa_id", "status", '
                        '"attempts", "throttled", "retries", "created_at", "position") '
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [f"rcp_{public_id}_{position}", campaign_id, f"5691{position:04d}", status, 0, 0, 0, WHEN,
                         position])

    assert "0033_campaign_counters" in upgrade()

    with connection():
        counted = read_campaign(tenant.id, "cmp_counted")
        assert {name: counted[name] for name in COUNTERS} == {
            "pending": 1, "queued": 1, "sent": 2, "delivered": 1, "read": 3, "failed": 1, "cancelled": 0,
            "skipped": 1}
        assert (counted["reserved_credits"], counted["consumed_credits"], counted["released_credits"]) == (9, 6, 1)
        empty = read_campaign(tenant.id, "cmp_empty")
        assert {name: empty[name] for name in COUNTERS} == dict.fromkeys(COUNTERS, 0)
