"""Webhook endpoints, deliveries and the attempt log.

Frozen: the schema as this migration created it, written out for each engine, so later model
changes (which come with migrations of their own) never change what it does."""

from peewee import PostgresqlDatabase

SQLITE = [
    ('CREATE TABLE IF NOT EXISTS "webhook_endpoint" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "kind" VARCHAR(16) NOT NULL, '
     '"url" VARCHAR(1000) NOT NULL, "events" TEXT NOT NULL, "status" VARCHAR(16) NOT NULL, '
     '"secret_ciphertext" TEXT NOT NULL, "secret_preview" VARCHAR(32) NOT NULL, '
     '"active_url_hash" VARCHAR(64), "failure_count" INTEGER NOT NULL, "last_success_at" DATETIME, '
     '"last_failure_at" DATETIME, "created_at" DATETIME NOT NULL, "deactivated_at" DATETIME, '
     '"drain_until" DATETIME, "wake_at" DATETIME, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "webhook_endpoint_public_id" ON "webhook_endpoint" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "webhook_endpoint_tenant_id" ON "webhook_endpoint" ("tenant_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "webhook_endpoint_tenant_id_kind_active_url_hash" ON '
     '"webhook_endpoint" ("tenant_id", "kind", "active_url_hash")'),
    ('CREATE TABLE IF NOT EXISTS "webhook_delivery" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"event_id" INTEGER NOT NULL, "endpoint_id" INTEGER NOT NULL, "tenant_id" INTEGER NOT NULL, '
     '"event_name" VARCHAR(64) NOT NULL, "sequence" INTEGER NOT NULL, "status" VARCHAR(16) NOT NULL, '
     '"attempts" INTEGER NOT NULL, "max_attempts" INTEGER NOT NULL, "next_attempt_at" DATETIME, '
     '"claimed_until" DATETIME, "last_status_code" INTEGER, "last_error" TEXT, '
     '"created_at" DATETIME NOT NULL, "updated_at" DATETIME NOT NULL, "delivered_at" DATETIME, '
     'FOREIGN KEY ("event_id") REFERENCES "event" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("endpoint_id") REFERENCES "webhook_endpoint" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "webhook_delivery_event_id" ON "webhook_delivery" ("event_id")',
    'CREATE INDEX IF NOT EXISTS "webhook_delivery_endpoint_id" ON "webhook_delivery" ("endpoint_id")',
    'CREATE INDEX IF NOT EXISTS "webhook_delivery_tenant_id" ON "webhook_delivery" ("tenant_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "webhook_delivery_event_id_endpoint_id_sequence" ON '
     '"webhook_delivery" ("event_id", "endpoint_id", "sequence")'),
    ('CREATE INDEX IF NOT EXISTS "webhook_delivery_endpoint_id_status_next_attempt_at" ON '
     '"webhook_delivery" ("endpoint_id", "status", "next_attempt_at")'),
    ('CREATE INDEX IF NOT EXISTS "webhook_delivery_status_next_attempt_at" ON "webhook_delivery" '
     '("status", "next_attempt_at")'),
    'CREATE INDEX IF NOT EXISTS "webhook_delivery_tenant_id_id" ON "webhook_delivery" ("tenant_id", "id")',
    ('CREATE TABLE IF NOT EXISTS "webhook_attempt" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"delivery_id" INTEGER NOT NULL, "number" INTEGER NOT NULL, "attempted_at" DATETIME NOT NULL, '
     '"outcome" VARCHAR(16) NOT NULL, "status_code" INTEGER, "latency_ms" INTEGER, '
     '"response_excerpt" TEXT, "error" TEXT, '
     'FOREIGN KEY ("delivery_id") REFERENCES "webhook_delivery" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "webhook_attempt_delivery_id" ON "webhook_attempt" ("delivery_id")',
    'CREATE INDEX IF NOT EXISTS "webhook_attempt_attempted_at" ON "webhook_attempt" ("attempted_at")',
]

POSTGRES = [
    ('CREATE TABLE IF NOT EXISTS "webhook_endpoint" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"public_id" VARCHAR(40) NOT NULL, "tenant_id" INTEGER NOT NULL, "kind" VARCHAR(16) NOT NULL, '
     '"url" VARCHAR(1000) NOT NULL, "events" TEXT NOT NULL, "status" VARCHAR(16) NOT NULL, '
     '"secret_ciphertext" TEXT NOT NULL, "secret_preview" VARCHAR(32) NOT NULL, '
     '"active_url_hash" VARCHAR(64), "failure_count" INTEGER NOT NULL, "last_success_at" TIMESTAMP, '
     '"last_failure_at" TIMESTAMP, "created_at" TIMESTAMP NOT NULL, "deactivated_at" TIMESTAMP, '
     '"drain_until" TIMESTAMP, "wake_at" TIMESTAMP, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "webhook_endpoint_public_id" ON "webhook_endpoint" ("public_id")',
    'CREATE INDEX IF NOT EXISTS "webhook_endpoint_tenant_id" ON "webhook_endpoint" ("tenant_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "webhook_endpoint_tenant_id_kind_active_url_hash" ON '
     '"webhook_endpoint" ("tenant_id", "kind", "active_url_hash")'),
    ('CREATE TABLE IF NOT EXISTS "webhook_delivery" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"event_id" INTEGER NOT NULL, "endpoint_id" INTEGER NOT NULL, "tenant_id" INTEGER NOT NULL, '
     '"event_name" VARCHAR(64) NOT NULL, "sequence" SMALLINT NOT NULL, "status" VARCHAR(16) NOT NULL, '
     '"attempts" INTEGER NOT NULL, "max_attempts" INTEGER NOT NULL, "next_attempt_at" TIMESTAMP, '
     '"claimed_until" TIMESTAMP, "last_status_code" INTEGER, "last_error" TEXT, '
     '"created_at" TIMESTAMP NOT NULL, "updated_at" TIMESTAMP NOT NULL, "delivered_at" TIMESTAMP, '
     'FOREIGN KEY ("event_id") REFERENCES "event" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("endpoint_id") REFERENCES "webhook_endpoint" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "webhook_delivery_event_id" ON "webhook_delivery" ("event_id")',
    'CREATE INDEX IF NOT EXISTS "webhook_delivery_endpoint_id" ON "webhook_delivery" ("endpoint_id")',
    'CREATE INDEX IF NOT EXISTS "webhook_delivery_tenant_id" ON "webhook_delivery" ("tenant_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "webhook_delivery_event_id_endpoint_id_sequence" ON '
     '"webhook_delivery" ("event_id", "endpoint_id", "sequence")'),
    ('CREATE INDEX IF NOT EXISTS "webhook_delivery_endpoint_id_status_next_attempt_at" ON '
     '"webhook_delivery" ("endpoint_id", "status", "next_attempt_at")'),
    ('CREATE INDEX IF NOT EXISTS "webhook_delivery_status_next_attempt_at" ON "webhook_delivery" '
     '("status", "next_attempt_at")'),
    'CREATE INDEX IF NOT EXISTS "webhook_delivery_tenant_id_id" ON "webhook_delivery" ("tenant_id", "id")',
    ('CREATE TABLE IF NOT EXISTS "webhook_attempt" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"delivery_id" INTEGER NOT NULL, "number" INTEGER NOT NULL, "attempted_at" TIMESTAMP NOT NULL, '
     '"outcome" VARCHAR(16) NOT NULL, "status_code" INTEGER, "latency_ms" INTEGER, '
     '"response_excerpt" TEXT, "error" TEXT, '
     'FOREIGN KEY ("delivery_id") REFERENCES "webhook_delivery" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "webhook_attempt_delivery_id" ON "webhook_attempt" ("delivery_id")',
    'CREATE INDEX IF NOT EXISTS "webhook_attempt_attempted_at" ON "webhook_attempt" ("attempted_at")',
]


def up(migrator, db):
    for statement in POSTGRES if isinstance(db, PostgresqlDatabase) else SQLITE:
        db.execute_sql(statement)
