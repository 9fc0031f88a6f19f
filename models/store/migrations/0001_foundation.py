"""Tenants, keys, access requests, credits, the event outbox, idempotency and rate counters.

Frozen: the schema as this migration created it, written out for each engine, so later model
changes (which come with migrations of their own) never change what it does."""

from peewee import PostgresqlDatabase

SQLITE = [
    ('CREATE TABLE IF NOT EXISTS "tenant" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "name" VARCHAR(255) NOT NULL, "timezone" VARCHAR(64) NOT NULL, '
     '"status" VARCHAR(16) NOT NULL, "created_at" DATETIME NOT NULL)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "tenant_public_id" ON "tenant" ("public_id")',
    ('CREATE TABLE IF NOT EXISTS "access_request" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "company_name" VARCHAR(255) NOT NULL, '
     '"contact_name" VARCHAR(255) NOT NULL, "contact_email" VARCHAR(255) NOT NULL, "tax_id" VARCHAR(80), '
     '"country" VARCHAR(120), "contact_phone" VARCHAR(60), "estimated_monthly_messages" INTEGER, '
     '"estimated_numbers_count" INTEGER, "use_case" TEXT, "webhook_url" VARCHAR(1000), '
     '"source_ip" VARCHAR(64), "status" VARCHAR(16) NOT NULL, "tenant_id" INTEGER, '
     '"decision_reason" TEXT, "created_at" DATETIME NOT NULL, "reviewed_at" DATETIME, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE SET NULL)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "access_request_public_id" ON "access_request" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "access_request_tenant_id" ON "access_request" ("tenant_id")',
    ('CREATE TABLE IF NOT EXISTS "api_key" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "secret_hash" VARCHAR(64) NOT NULL, '
     '"scopes" TEXT NOT NULL, "allowed_ips" TEXT, "rate_limit" INTEGER NOT NULL, '
     '"created_at" DATETIME NOT NULL, "rotated_at" DATETIME, "revoked_at" DATETIME, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "api_key_public_id" ON "api_key" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "api_key_tenant_id" ON "api_key" ("tenant_id")',
    ('CREATE TABLE IF NOT EXISTS "event" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "name" VARCHAR(64) NOT NULL, '
     '"payload" TEXT NOT NULL, "created_at" DATETIME NOT NULL, "fanned_out_at" DATETIME, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "event_public_id" ON "event" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "event_tenant_id" ON "event" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "event_fanned_out_at" ON "event" ("fanned_out_at")',
    ('CREATE TABLE IF NOT EXISTS "idempotency_record" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"tenant_id" INTEGER NOT NULL, "key" VARCHAR(255) NOT NULL, "method" VARCHAR(8) NOT NULL, '
     '"path" VARCHAR(1000) NOT NULL, "body_hash" VARCHAR(64) NOT NULL, "state" VARCHAR(16) NOT NULL, '
     '"status" INTEGER, "body" TEXT, "headers" TEXT, "created_at" DATETIME NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "idempotency_record_tenant_id" ON "idempotency_record" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "idempotency_record_created_at" ON "idempotency_record" ("created_at")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "idempotency_record_tenant_id_key" ON "idempotency_record" '
     '("tenant_id", "key")'),
    ('CREATE TABLE IF NOT EXISTS "ledger_entry" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"tenant_id" INTEGER NOT NULL, "type" VARCHAR(16) NOT NULL, "amount" INTEGER NOT NULL, '
     '"balance_after" INTEGER NOT NULL, "reserved_after" INTEGER NOT NULL, "reference" VARCHAR(255), '
     '"description" VARCHAR(1000), "campaign_id" INTEGER, "messaging_account_id" INTEGER, '
     '"created_at" DATETIME NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "ledger_entry_tenant_id" ON "ledger_entry" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "ledger_entry_created_at" ON "ledger_entry" ("created_at")',
    ('CREATE TABLE IF NOT EXISTS "rate_counter" ("key" VARCHAR(200) NOT NULL, "window" INTEGER NOT NULL, '
     '"count" INTEGER NOT NULL)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "rate_counter_key_window" ON "rate_counter" ("key", "window")',
    ('CREATE TABLE IF NOT EXISTS "wallet" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"tenant_id" INTEGER NOT NULL, "balance" INTEGER NOT NULL, "reserved" INTEGER NOT NULL, '
     '"status" VARCHAR(16) NOT NULL, "low_balance_threshold" INTEGER NOT NULL, '
     '"updated_at" DATETIME NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, CHECK (reserved >= 0), '
     'CHECK (balance >= reserved))'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "wallet_tenant_id" ON "wallet" ("tenant_id")',
]

POSTGRES = [
    ('CREATE TABLE IF NOT EXISTS "tenant" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "name" VARCHAR(255) NOT NULL, "timezone" VARCHAR(64) NOT NULL, '
     '"status" VARCHAR(16) NOT NULL, "created_at" TIMESTAMP NOT NULL)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "tenant_public_id" ON "tenant" ("public_id")',
    ('CREATE TABLE IF NOT EXISTS "access_request" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "company_name" VARCHAR(255) NOT NULL, '
     '"contact_name" VARCHAR(255) NOT NULL, "contact_email" VARCHAR(255) NOT NULL, "tax_id" VARCHAR(80), '
     '"country" VARCHAR(120), "contact_phone" VARCHAR(60), "estimated_monthly_messages" INTEGER, '
     '"estimated_numbers_count" INTEGER, "use_case" TEXT, "webhook_url" VARCHAR(1000), '
     '"source_ip" VARCHAR(64), "status" VARCHAR(16) NOT NULL, "tenant_id" INTEGER, '
     '"decision_reason" TEXT, "created_at" TIMESTAMP NOT NULL, "reviewed_at" TIMESTAMP, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE SET NULL)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "access_request_public_id" ON "access_request" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "access_request_tenant_id" ON "access_request" ("tenant_id")',
    ('CREATE TABLE IF NOT EXISTS "api_key" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "secret_hash" VARCHAR(64) NOT NULL, '
     '"scopes" TEXT NOT NULL, "allowed_ips" TEXT, "rate_limit" INTEGER NOT NULL, '
     '"created_at" TIMESTAMP NOT NULL, "rotated_at" TIMESTAMP, "revoked_at" TIMESTAMP, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "api_key_public_id" ON "api_key" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "api_key_tenant_id" ON "api_key" ("tenant_id")',
    ('CREATE TABLE IF NOT EXISTS "event" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "name" VARCHAR(64) NOT NULL, '
     '"payload" TEXT NOT NULL, "created_at" TIMESTAMP NOT NULL, "fanned_out_at" TIMESTAMP, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "event_public_id" ON "event" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "event_tenant_id" ON "event" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "event_fanned_out_at" ON "event" ("fanned_out_at")',
    ('CREATE TABLE IF NOT EXISTS "idempotency_record" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"tenant_id" INTEGER NOT NULL, "key" VARCHAR(255) NOT NULL, "method" VARCHAR(8) NOT NULL, '
     '"path" VARCHAR(1000) NOT NULL, "body_hash" VARCHAR(64) NOT NULL, "state" VARCHAR(16) NOT NULL, '
     '"status" INTEGER, "body" TEXT, "headers" TEXT, "created_at" TIMESTAMP NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "idempotency_record_tenant_id" ON "idempotency_record" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "idempotency_record_created_at" ON "idempotency_record" ("created_at")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "idempotency_record_tenant_id_key" ON "idempotency_record" '
     '("tenant_id", "key")'),
    ('CREATE TABLE IF NOT EXISTS "ledger_entry" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"tenant_id" INTEGER NOT NULL, "type" VARCHAR(16) NOT NULL, "amount" INTEGER NOT NULL, '
     '"balance_after" INTEGER NOT NULL, "reserved_after" INTEGER NOT NULL, "reference" VARCHAR(255), '
     '"description" VARCHAR(1000), "campaign_id" INTEGER, "messaging_account_id" INTEGER, '
     '"created_at" TIMESTAMP NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "ledger_entry_tenant_id" ON "ledger_entry" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "ledger_entry_created_at" ON "ledger_entry" ("created_at")',
    ('CREATE TABLE IF NOT EXISTS "rate_counter" ("key" VARCHAR(200) NOT NULL, "window" BIGINT NOT NULL, '
     '"count" INTEGER NOT NULL)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "rate_counter_key_window" ON "rate_counter" ("key", "window")',
    ('CREATE TABLE IF NOT EXISTS "wallet" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"tenant_id" INTEGER NOT NULL, "balance" INTEGER NOT NULL, "reserved" INTEGER NOT NULL, '
     '"status" VARCHAR(16) NOT NULL, "low_balance_threshold" INTEGER NOT NULL, '
     '"updated_at" TIMESTAMP NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, CHECK (reserved >= 0), '
     'CHECK (balance >= reserved))'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "wallet_tenant_id" ON "wallet" ("tenant_id")',
]


def up(migrator, db):
    for statement in POSTGRES if isinstance(db, PostgresqlDatabase) else SQLITE:
        db.execute_sql(statement)
