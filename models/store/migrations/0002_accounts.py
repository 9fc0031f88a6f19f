"""Messaging accounts (numbers), templates and customer-service windows.

Frozen: the schema as this migration created it, written out for each engine, so later model
changes (which come with migrations of their own) never change what it does."""

from peewee import PostgresqlDatabase

SQLITE = [
    ('CREATE TABLE IF NOT EXISTS "messaging_account" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "label" VARCHAR(120), '
     '"external_reference" VARCHAR(160), "phone_number" VARCHAR(32), "name" VARCHAR(255), '
     '"status" VARCHAR(16) NOT NULL, "paused_reason" VARCHAR(255), '
     '"connection_mode" VARCHAR(16) NOT NULL, "business_account_id" VARCHAR(64), "phone_id" VARCHAR(64), '
     '"access_token" TEXT, "subscribed_to_webhooks" INTEGER NOT NULL, "quality_rating" VARCHAR(16), '
     '"daily_limit" INTEGER, "mps" INTEGER NOT NULL, "contacts_synced_at" DATETIME, '
     '"history_synced_at" DATETIME, "templates_synced_at" DATETIME, "created_at" DATETIME NOT NULL, '
     '"connected_at" DATETIME, FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "messaging_account_public_id" ON "messaging_account" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "messaging_account_tenant_id" ON "messaging_account" ("tenant_id")',
    ('CREATE INDEX IF NOT EXISTS "messaging_account_business_account_id" ON "messaging_account" '
     '("business_account_id")'),
    'CREATE INDEX IF NOT EXISTS "messaging_account_phone_id" ON "messaging_account" ("phone_id")',
    ('CREATE TABLE IF NOT EXISTS "business_initiated" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"account_id" INTEGER NOT NULL, "wa_id" VARCHAR(32) NOT NULL, "last_sent_at" DATETIME NOT NULL, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "business_initiated_account_id" ON "business_initiated" ("account_id")',
    ('CREATE INDEX IF NOT EXISTS "business_initiated_last_sent_at" ON "business_initiated" '
     '("last_sent_at")'),
    ('CREATE UNIQUE INDEX IF NOT EXISTS "business_initiated_account_id_wa_id" ON "business_initiated" '
     '("account_id", "wa_id")'),
    ('CREATE TABLE IF NOT EXISTS "contact_window" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"account_id" INTEGER NOT NULL, "wa_id" VARCHAR(32) NOT NULL, "last_inbound_at" DATETIME NOT NULL, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "contact_window_account_id" ON "contact_window" ("account_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "contact_window_account_id_wa_id" ON "contact_window" '
     '("account_id", "wa_id")'),
    ('CREATE TABLE IF NOT EXISTS "template" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"account_id" INTEGER NOT NULL, "platform_id" VARCHAR(64), "name" VARCHAR(512) NOT NULL, '
     '"language" VARCHAR(20) NOT NULL, "status" VARCHAR(32) NOT NULL, "category" VARCHAR(32), '
     '"quality_score" VARCHAR(32), "body_text" TEXT, "header_type" VARCHAR(16), '
     '"variable_count" INTEGER NOT NULL, "variables" TEXT NOT NULL, "components" TEXT NOT NULL, '
     '"active" INTEGER NOT NULL, "updated_at" DATETIME NOT NULL, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "template_account_id" ON "template" ("account_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "template_account_id_name_language" ON "template" ("account_id", '
     '"name", "language")'),
]

POSTGRES = [
    ('CREATE TABLE IF NOT EXISTS "messaging_account" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "label" VARCHAR(120), '
     '"external_reference" VARCHAR(160), "phone_number" VARCHAR(32), "name" VARCHAR(255), '
     '"status" VARCHAR(16) NOT NULL, "paused_reason" VARCHAR(255), '
     '"connection_mode" VARCHAR(16) NOT NULL, "business_account_id" VARCHAR(64), "phone_id" VARCHAR(64), '
     '"access_token" TEXT, "subscribed_to_webhooks" BOOLEAN NOT NULL, "quality_rating" VARCHAR(16), '
     '"daily_limit" INTEGER, "mps" INTEGER NOT NULL, "contacts_synced_at" TIMESTAMP, '
     '"history_synced_at" TIMESTAMP, "templates_synced_at" TIMESTAMP, "created_at" TIMESTAMP NOT NULL, '
     '"connected_at" TIMESTAMP, FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "messaging_account_public_id" ON "messaging_account" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "messaging_account_tenant_id" ON "messaging_account" ("tenant_id")',
    ('CREATE INDEX IF NOT EXISTS "messaging_account_business_account_id" ON "messaging_account" '
     '("business_account_id")'),
    'CREATE INDEX IF NOT EXISTS "messaging_account_phone_id" ON "messaging_account" ("phone_id")',
    ('CREATE TABLE IF NOT EXISTS "business_initiated" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"account_id" INTEGER NOT NULL, "wa_id" VARCHAR(32) NOT NULL, "last_sent_at" TIMESTAMP NOT NULL, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "business_initiated_account_id" ON "business_initiated" ("account_id")',
    ('CREATE INDEX IF NOT EXISTS "business_initiated_last_sent_at" ON "business_initiated" '
     '("last_sent_at")'),
    ('CREATE UNIQUE INDEX IF NOT EXISTS "business_initiated_account_id_wa_id" ON "business_initiated" '
     '("account_id", "wa_id")'),
    ('CREATE TABLE IF NOT EXISTS "contact_window" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"account_id" INTEGER NOT NULL, "wa_id" VARCHAR(32) NOT NULL, "last_inbound_at" TIMESTAMP NOT NULL, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "contact_window_account_id" ON "contact_window" ("account_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "contact_window_account_id_wa_id" ON "contact_window" '
     '("account_id", "wa_id")'),
    ('CREATE TABLE IF NOT EXISTS "template" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"account_id" INTEGER NOT NULL, "platform_id" VARCHAR(64), "name" VARCHAR(512) NOT NULL, '
     '"language" VARCHAR(20) NOT NULL, "status" VARCHAR(32) NOT NULL, "category" VARCHAR(32), '
     '"quality_score" VARCHAR(32), "body_text" TEXT, "header_type" VARCHAR(16), '
     '"variable_count" INTEGER NOT NULL, "variables" TEXT NOT NULL, "components" TEXT NOT NULL, '
     '"active" BOOLEAN NOT NULL, "updated_at" TIMESTAMP NOT NULL, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "template_account_id" ON "template" ("account_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "template_account_id_name_language" ON "template" ("account_id", '
     '"name", "language")'),
]


def up(migrator, db):
    for statement in POSTGRES if isinstance(db, PostgresqlDatabase) else SQLITE:
        db.execute_sql(statement)
