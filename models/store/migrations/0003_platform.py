"""Onboarding attempts, the platform's stored webhook batches, and processed-wamid dedupe.

Frozen: the schema as this migration created it, written out for each engine, so later model
changes (which come with migrations of their own) never change what it does."""

from peewee import PostgresqlDatabase

SQLITE = [
    ('CREATE TABLE IF NOT EXISTS "onboarding_attempt" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, '
     '"redirect_url" VARCHAR(1000) NOT NULL, "label" VARCHAR(120), "external_reference" VARCHAR(120), '
     '"status" VARCHAR(16) NOT NULL, "error" VARCHAR(64), "error_detail" TEXT, "account_id" INTEGER, '
     '"waba_id" VARCHAR(64), "phone_number_id" VARCHAR(64), "created_at" DATETIME NOT NULL, '
     '"expires_at" DATETIME NOT NULL, "claimed_at" DATETIME, "finished_at" DATETIME, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE SET NULL)'),
    ('CREATE UNIQUE INDEX IF NOT EXISTS "onboarding_attempt_public_id" ON "onboarding_attempt" '
     '("public_id")'),
    'CREATE INDEX IF NOT EXISTS "onboarding_attempt_tenant_id" ON "onboarding_attempt" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "onboarding_attempt_account_id" ON "onboarding_attempt" ("account_id")',
    ('CREATE TABLE IF NOT EXISTS "platform_webhook_batch" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"body" TEXT NOT NULL, "received_at" DATETIME NOT NULL, "claimed_at" DATETIME, '
     '"applied_at" DATETIME, "processed_at" DATETIME, "attempts" INTEGER NOT NULL, "last_error" TEXT)'),
    ('CREATE INDEX IF NOT EXISTS "platform_webhook_batch_processed_at_id" ON "platform_webhook_batch" '
     '("processed_at", "id")'),
    ('CREATE TABLE IF NOT EXISTS "processed_message" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"wamid" VARCHAR(255) NOT NULL, "kind" VARCHAR(16) NOT NULL, "processed_at" DATETIME NOT NULL)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "processed_message_wamid" ON "processed_message" ("wamid")',
]

POSTGRES = [
    ('CREATE TABLE IF NOT EXISTS "onboarding_attempt" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, '
     '"redirect_url" VARCHAR(1000) NOT NULL, "label" VARCHAR(120), "external_reference" VARCHAR(120), '
     '"status" VARCHAR(16) NOT NULL, "error" VARCHAR(64), "error_detail" TEXT, "account_id" INTEGER, '
     '"waba_id" VARCHAR(64), "phone_number_id" VARCHAR(64), "created_at" TIMESTAMP NOT NULL, '
     '"expires_at" TIMESTAMP NOT NULL, "claimed_at" TIMESTAMP, "finished_at" TIMESTAMP, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE SET NULL)'),
    ('CREATE UNIQUE INDEX IF NOT EXISTS "onboarding_attempt_public_id" ON "onboarding_attempt" '
     '("public_id")'),
    'CREATE INDEX IF NOT EXISTS "onboarding_attempt_tenant_id" ON "onboarding_attempt" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "onboarding_attempt_account_id" ON "onboarding_attempt" ("account_id")',
    ('CREATE TABLE IF NOT EXISTS "platform_webhook_batch" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"body" TEXT NOT NULL, "received_at" TIMESTAMP NOT NULL, "claimed_at" TIMESTAMP, '
     '"applied_at" TIMESTAMP, "processed_at" TIMESTAMP, "attempts" INTEGER NOT NULL, "last_error" TEXT)'),
    ('CREATE INDEX IF NOT EXISTS "platform_webhook_batch_processed_at_id" ON "platform_webhook_batch" '
     '("processed_at", "id")'),
    ('CREATE TABLE IF NOT EXISTS "processed_message" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"wamid" VARCHAR(255) NOT NULL, "kind" VARCHAR(16) NOT NULL, "processed_at" TIMESTAMP NOT NULL)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "processed_message_wamid" ON "processed_message" ("wamid")',
]


def up(migrator, db):
    for statement in POSTGRES if isinstance(db, PostgresqlDatabase) else SQLITE:
        db.execute_sql(statement)
