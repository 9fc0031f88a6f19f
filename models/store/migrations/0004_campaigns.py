"""Campaigns and their recipients, single messages, and the pacing buckets and engine heartbeats
of the database counter store.

Frozen: the schema as this migration created it, written out for each engine, so later model
changes (which come with migrations of their own) never change what it does."""

from peewee import PostgresqlDatabase

SQLITE = [
    ('CREATE TABLE IF NOT EXISTS "campaign" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "account_id" INTEGER NOT NULL, '
     '"source" VARCHAR(16) NOT NULL, "external_reference" VARCHAR(160), '
     '"template_name" VARCHAR(255) NOT NULL, "template_language" VARCHAR(20) NOT NULL, '
     '"header_type" VARCHAR(16), "header_url" VARCHAR(1000), "body_placeholders" TEXT, '
     '"status" VARCHAR(16) NOT NULL, "hold_reason" VARCHAR(64), "total_recipients" INTEGER NOT NULL, '
     '"reserved_credits" INTEGER NOT NULL, "consumed_credits" INTEGER NOT NULL, '
     '"released_credits" INTEGER NOT NULL, "refunded_credits" INTEGER NOT NULL, '
     '"created_at" DATETIME NOT NULL, "started_at" DATETIME, "finished_at" DATETIME, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "campaign_public_id" ON "campaign" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "campaign_account_id" ON "campaign" ("account_id")',
    ('CREATE INDEX IF NOT EXISTS "campaign_tenant_id_source_id" ON "campaign" ("tenant_id", "source", '
     '"id")'),
    'CREATE INDEX IF NOT EXISTS "campaign_status" ON "campaign" ("status")',
    ('CREATE TABLE IF NOT EXISTS "campaign_recipient" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "campaign_id" INTEGER NOT NULL, "wa_id" VARCHAR(32) NOT NULL, '
     '"external_contact_id" VARCHAR(160), "vars" TEXT, "payload" TEXT, "status" VARCHAR(16) NOT NULL, '
     '"attempts" INTEGER NOT NULL, "throttled" INTEGER NOT NULL, "retries" INTEGER NOT NULL, '
     '"error_code" VARCHAR(32), "last_error" VARCHAR(1000), "not_before" DATETIME, '
     '"claim_token" VARCHAR(64), "claimed_at" DATETIME, "message_id" VARCHAR(40), "wam_id" VARCHAR(255), '
     '"sent_at" DATETIME, "delivered_at" DATETIME, "read_at" DATETIME, "failed_at" DATETIME, '
     '"created_at" DATETIME NOT NULL, '
     'FOREIGN KEY ("campaign_id") REFERENCES "campaign" ("id") ON DELETE CASCADE)'),
    ('CREATE UNIQUE INDEX IF NOT EXISTS "campaign_recipient_public_id" ON "campaign_recipient" '
     '("public_id")'),
    'CREATE INDEX IF NOT EXISTS "campaign_recipient_wam_id" ON "campaign_recipient" ("wam_id")',
    ('CREATE INDEX IF NOT EXISTS "campaign_recipient_campaign_id_status_id" ON "campaign_recipient" '
     '("campaign_id", "status", "id")'),
    ('CREATE INDEX IF NOT EXISTS "campaign_recipient_status_claimed_at" ON "campaign_recipient" '
     '("status", "claimed_at")'),
    ('CREATE TABLE IF NOT EXISTS "heartbeat" ("key" VARCHAR(200) NOT NULL PRIMARY KEY, '
     '"expires" REAL NOT NULL)'),
    ('CREATE TABLE IF NOT EXISTS "message" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "account_id" INTEGER NOT NULL, '
     '"to" VARCHAR(32) NOT NULL, "type" VARCHAR(16) NOT NULL, "content" TEXT NOT NULL, '
     '"external_reference" VARCHAR(160), "status" VARCHAR(16) NOT NULL, "wam_id" VARCHAR(255), '
     '"claim_token" VARCHAR(64), "claimed_at" DATETIME, "attempts" INTEGER NOT NULL, '
     '"error_code" VARCHAR(32), "last_error" VARCHAR(1000), "created_at" DATETIME NOT NULL, '
     '"sent_at" DATETIME, "delivered_at" DATETIME, "read_at" DATETIME, "failed_at" DATETIME, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "message_public_id" ON "message" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "message_tenant_id" ON "message" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "message_account_id" ON "message" ("account_id")',
    'CREATE INDEX IF NOT EXISTS "message_wam_id" ON "message" ("wam_id")',
    'CREATE INDEX IF NOT EXISTS "message_status_claimed_at" ON "message" ("status", "claimed_at")',
    ('CREATE TABLE IF NOT EXISTS "pacing_bucket" ("key" VARCHAR(200) NOT NULL PRIMARY KEY, '
     '"tokens" REAL NOT NULL, "updated" REAL NOT NULL, "version" INTEGER NOT NULL)'),
]

POSTGRES = [
    ('CREATE TABLE IF NOT EXISTS "campaign" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "account_id" INTEGER NOT NULL, '
     '"source" VARCHAR(16) NOT NULL, "external_reference" VARCHAR(160), '
     '"template_name" VARCHAR(255) NOT NULL, "template_language" VARCHAR(20) NOT NULL, '
     '"header_type" VARCHAR(16), "header_url" VARCHAR(1000), "body_placeholders" TEXT, '
     '"status" VARCHAR(16) NOT NULL, "hold_reason" VARCHAR(64), "total_recipients" INTEGER NOT NULL, '
     '"reserved_credits" INTEGER NOT NULL, "consumed_credits" INTEGER NOT NULL, '
     '"released_credits" INTEGER NOT NULL, "refunded_credits" INTEGER NOT NULL, '
     '"created_at" TIMESTAMP NOT NULL, "started_at" TIMESTAMP, "finished_at" TIMESTAMP, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "campaign_public_id" ON "campaign" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "campaign_account_id" ON "campaign" ("account_id")',
    ('CREATE INDEX IF NOT EXISTS "campaign_tenant_id_source_id" ON "campaign" ("tenant_id", "source", '
     '"id")'),
    'CREATE INDEX IF NOT EXISTS "campaign_status" ON "campaign" ("status")',
    ('CREATE TABLE IF NOT EXISTS "campaign_recipient" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "campaign_id" INTEGER NOT NULL, "wa_id" VARCHAR(32) NOT NULL, '
     '"external_contact_id" VARCHAR(160), "vars" TEXT, "payload" TEXT, "status" VARCHAR(16) NOT NULL, '
     '"attempts" INTEGER NOT NULL, "throttled" INTEGER NOT NULL, "retries" INTEGER NOT NULL, '
     '"error_code" VARCHAR(32), "last_error" VARCHAR(1000), "not_before" TIMESTAMP, '
     '"claim_token" VARCHAR(64), "claimed_at" TIMESTAMP, "message_id" VARCHAR(40), "wam_id" VARCHAR(255), '
     '"sent_at" TIMESTAMP, "delivered_at" TIMESTAMP, "read_at" TIMESTAMP, "failed_at" TIMESTAMP, '
     '"created_at" TIMESTAMP NOT NULL, '
     'FOREIGN KEY ("campaign_id") REFERENCES "campaign" ("id") ON DELETE CASCADE)'),
    ('CREATE UNIQUE INDEX IF NOT EXISTS "campaign_recipient_public_id" ON "campaign_recipient" '
     '("public_id")'),
    'CREATE INDEX IF NOT EXISTS "campaign_recipient_wam_id" ON "campaign_recipient" ("wam_id")',
    ('CREATE INDEX IF NOT EXISTS "campaign_recipient_campaign_id_status_id" ON "campaign_recipient" '
     '("campaign_id", "status", "id")'),
    ('CREATE INDEX IF NOT EXISTS "campaign_recipient_status_claimed_at" ON "campaign_recipient" '
     '("status", "claimed_at")'),
    ('CREATE TABLE IF NOT EXISTS "heartbeat" ("key" VARCHAR(200) NOT NULL PRIMARY KEY, '
     '"expires" REAL NOT NULL)'),
    ('CREATE TABLE IF NOT EXISTS "message" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "account_id" INTEGER NOT NULL, '
     '"to" VARCHAR(32) NOT NULL, "type" VARCHAR(16) NOT NULL, "content" TEXT NOT NULL, '
     '"external_reference" VARCHAR(160), "status" VARCHAR(16) NOT NULL, "wam_id" VARCHAR(255), '
     '"claim_token" VARCHAR(64), "claimed_at" TIMESTAMP, "attempts" INTEGER NOT NULL, '
     '"error_code" VARCHAR(32), "last_error" VARCHAR(1000), "created_at" TIMESTAMP NOT NULL, '
     '"sent_at" TIMESTAMP, "delivered_at" TIMESTAMP, "read_at" TIMESTAMP, "failed_at" TIMESTAMP, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "message_public_id" ON "message" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "message_tenant_id" ON "message" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "message_account_id" ON "message" ("account_id")',
    'CREATE INDEX IF NOT EXISTS "message_wam_id" ON "message" ("wam_id")',
    'CREATE INDEX IF NOT EXISTS "message_status_claimed_at" ON "message" ("status", "claimed_at")',
    ('CREATE TABLE IF NOT EXISTS "pacing_bucket" ("key" VARCHAR(200) NOT NULL PRIMARY KEY, '
     '"tokens" REAL NOT NULL, "updated" REAL NOT NULL, "version" BIGINT NOT NULL)'),
]


def up(migrator, db):
    for statement in POSTGRES if isinstance(db, PostgresqlDatabase) else SQLITE:
        db.execute_sql(statement)
