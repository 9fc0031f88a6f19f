"""Receivables: debtors, debts, installments, payments and their allocations, collection reminders.

Frozen: the schema as this migration created it, written out for each engine, so later model
changes (which come with migrations of their own) never change what it does."""

from peewee import PostgresqlDatabase

SQLITE = [
    ('CREATE TABLE IF NOT EXISTS "debtor" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"tenant_id" INTEGER NOT NULL, "nombre" VARCHAR(255) NOT NULL, "documento" VARCHAR(64), '
     '"telefono" VARCHAR(32), "created_at" DATETIME NOT NULL, "updated_at" DATETIME NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "debtor_tenant_id" ON "debtor" ("tenant_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debtor_tenant_id_documento" ON "debtor" ("tenant_id", '
     '"documento")'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "debtor_tenant_id_telefono" ON "debtor" ("tenant_id", "telefono")',
    ('CREATE TABLE IF NOT EXISTS "debt" ("id" INTEGER NOT NULL PRIMARY KEY, "tenant_id" INTEGER NOT NULL, '
     '"external_id" VARCHAR(160) NOT NULL, "account_id" INTEGER NOT NULL, "debtor_id" INTEGER NOT NULL, '
     '"moneda" VARCHAR(3) NOT NULL, "referencia" VARCHAR(500), "monto_original" INTEGER NOT NULL, '
     '"saldo_pendiente" INTEGER NOT NULL, "tipo" VARCHAR(16) NOT NULL, "auto_send" INTEGER NOT NULL, '
     '"status" VARCHAR(16) NOT NULL, "external_version" INTEGER, "external_updated_at" DATETIME, '
     '"resolution" VARCHAR(16), "resolution_reason" VARCHAR(500), "resolved_at" DATETIME, '
     '"row_version" INTEGER NOT NULL, "created_at" DATETIME NOT NULL, "updated_at" DATETIME NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id"), '
     'FOREIGN KEY ("debtor_id") REFERENCES "debtor" ("id"))'),
    'CREATE INDEX IF NOT EXISTS "debt_tenant_id" ON "debt" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "debt_account_id" ON "debt" ("account_id")',
    'CREATE INDEX IF NOT EXISTS "debt_debtor_id" ON "debt" ("debtor_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debt_tenant_id_external_id" ON "debt" ("tenant_id", '
     '"external_id")'),
    'CREATE INDEX IF NOT EXISTS "debt_tenant_id_status" ON "debt" ("tenant_id", "status")',
    ('CREATE TABLE IF NOT EXISTS "debt_payment" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"tenant_id" INTEGER NOT NULL, "debt_id" INTEGER NOT NULL, "public_id" VARCHAR(40), '
     '"external_id" VARCHAR(160), "transaction_id" VARCHAR(255), "origin" VARCHAR(8) NOT NULL, '
     '"monto" INTEGER NOT NULL, "moneda" VARCHAR(3) NOT NULL, "metodo" VARCHAR(16) NOT NULL, '
     '"pagado_en" DATETIME NOT NULL, "monto_sin_asignar" INTEGER NOT NULL, '
     '"saldo_after" INTEGER NOT NULL, "created_at" DATETIME NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("debt_id") REFERENCES "debt" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "debt_payment_tenant_id" ON "debt_payment" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "debt_payment_debt_id" ON "debt_payment" ("debt_id")',
    'CREATE UNIQUE INDEX IF NOT EXISTS "debt_payment_public_id" ON "debt_payment" ("public_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debt_payment_tenant_id_external_id" ON "debt_payment" '
     '("tenant_id", "external_id")'),
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debt_payment_tenant_id_transaction_id" ON "debt_payment" '
     '("tenant_id", "transaction_id")'),
    ('CREATE TABLE IF NOT EXISTS "debt_installment" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"debt_id" INTEGER NOT NULL, "external_id" VARCHAR(160) NOT NULL, "numero" INTEGER NOT NULL, '
     '"monto" INTEGER NOT NULL, "pagado" INTEGER NOT NULL, "vence" DATE NOT NULL, '
     '"estado" VARCHAR(16) NOT NULL, "declared_estado" VARCHAR(16) NOT NULL, '
     'FOREIGN KEY ("debt_id") REFERENCES "debt" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "debt_installment_debt_id" ON "debt_installment" ("debt_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debt_installment_debt_id_external_id" ON "debt_installment" '
     '("debt_id", "external_id")'),
    'CREATE INDEX IF NOT EXISTS "debt_installment_estado_vence" ON "debt_installment" ("estado", "vence")',
    ('CREATE TABLE IF NOT EXISTS "payment_allocation" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"payment_id" INTEGER NOT NULL, "installment_id" INTEGER NOT NULL, "monto" INTEGER NOT NULL, '
     'FOREIGN KEY ("payment_id") REFERENCES "debt_payment" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("installment_id") REFERENCES "debt_installment" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "payment_allocation_payment_id" ON "payment_allocation" ("payment_id")',
    ('CREATE INDEX IF NOT EXISTS "payment_allocation_installment_id" ON "payment_allocation" '
     '("installment_id")'),
    ('CREATE TABLE IF NOT EXISTS "debt_reminder" ("id" INTEGER NOT NULL PRIMARY KEY, '
     '"debt_id" INTEGER NOT NULL, "installment_id" INTEGER NOT NULL, "stage" VARCHAR(8) NOT NULL, '
     '"status" VARCHAR(16) NOT NULL, "campaign_id" VARCHAR(40), "created_at" DATETIME NOT NULL, '
     'FOREIGN KEY ("debt_id") REFERENCES "debt" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("installment_id") REFERENCES "debt_installment" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "debt_reminder_debt_id" ON "debt_reminder" ("debt_id")',
    'CREATE INDEX IF NOT EXISTS "debt_reminder_installment_id" ON "debt_reminder" ("installment_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debt_reminder_installment_id_stage" ON "debt_reminder" '
     '("installment_id", "stage")'),
]

POSTGRES = [
    ('CREATE TABLE IF NOT EXISTS "debtor" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"tenant_id" INTEGER NOT NULL, "nombre" VARCHAR(255) NOT NULL, "documento" VARCHAR(64), '
     '"telefono" VARCHAR(32), "created_at" TIMESTAMP NOT NULL, "updated_at" TIMESTAMP NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "debtor_tenant_id" ON "debtor" ("tenant_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debtor_tenant_id_documento" ON "debtor" ("tenant_id", '
     '"documento")'),
    'CREATE UNIQUE INDEX IF NOT EXISTS "debtor_tenant_id_telefono" ON "debtor" ("tenant_id", "telefono")',
    ('CREATE TABLE IF NOT EXISTS "debt" ("id" SERIAL NOT NULL PRIMARY KEY, "tenant_id" INTEGER NOT NULL, '
     '"external_id" VARCHAR(160) NOT NULL, "account_id" INTEGER NOT NULL, "debtor_id" INTEGER NOT NULL, '
     '"moneda" VARCHAR(3) NOT NULL, "referencia" VARCHAR(500), "monto_original" BIGINT NOT NULL, '
     '"saldo_pendiente" BIGINT NOT NULL, "tipo" VARCHAR(16) NOT NULL, "auto_send" BOOLEAN NOT NULL, '
     '"status" VARCHAR(16) NOT NULL, "external_version" BIGINT, "external_updated_at" TIMESTAMP, '
     '"resolution" VARCHAR(16), "resolution_reason" VARCHAR(500), "resolved_at" TIMESTAMP, '
     '"row_version" INTEGER NOT NULL, "created_at" TIMESTAMP NOT NULL, "updated_at" TIMESTAMP NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("account_id") REFERENCES "messaging_account" ("id"), '
     'FOREIGN KEY ("debtor_id") REFERENCES "debtor" ("id"))'),
    'CREATE INDEX IF NOT EXISTS "debt_tenant_id" ON "debt" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "debt_account_id" ON "debt" ("account_id")',
    'CREATE INDEX IF NOT EXISTS "debt_debtor_id" ON "debt" ("debtor_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debt_tenant_id_external_id" ON "debt" ("tenant_id", '
     '"external_id")'),
    'CREATE INDEX IF NOT EXISTS "debt_tenant_id_status" ON "debt" ("tenant_id", "status")',
    ('CREATE TABLE IF NOT EXISTS "debt_payment" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"tenant_id" INTEGER NOT NULL, "debt_id" INTEGER NOT NULL, "public_id" VARCHAR(40), '
     '"external_id" VARCHAR(160), "transaction_id" VARCHAR(255), "origin" VARCHAR(8) NOT NULL, '
     '"monto" BIGINT NOT NULL, "moneda" VARCHAR(3) NOT NULL, "metodo" VARCHAR(16) NOT NULL, '
     '"pagado_en" TIMESTAMP NOT NULL, "monto_sin_asignar" BIGINT NOT NULL, "saldo_after" BIGINT NOT NULL, '
     '"created_at" TIMESTAMP NOT NULL, '
     'FOREIGN KEY ("tenant_id") REFERENCES "tenant" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("debt_id") REFERENCES "debt" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "debt_payment_tenant_id" ON "debt_payment" ("tenant_id")',
    'CREATE INDEX IF NOT EXISTS "debt_payment_debt_id" ON "debt_payment" ("debt_id")',
    'CREATE UNIQUE INDEX IF NOT EXISTS "debt_payment_public_id" ON "debt_payment" ("public_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debt_payment_tenant_id_external_id" ON "debt_payment" '
     '("tenant_id", "external_id")'),
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debt_payment_tenant_id_transaction_id" ON "debt_payment" '
     '("tenant_id", "transaction_id")'),
    ('CREATE TABLE IF NOT EXISTS "debt_installment" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"debt_id" INTEGER NOT NULL, "external_id" VARCHAR(160) NOT NULL, "numero" INTEGER NOT NULL, '
     '"monto" BIGINT NOT NULL, "pagado" BIGINT NOT NULL, "vence" DATE NOT NULL, '
     '"estado" VARCHAR(16) NOT NULL, "declared_estado" VARCHAR(16) NOT NULL, '
     'FOREIGN KEY ("debt_id") REFERENCES "debt" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "debt_installment_debt_id" ON "debt_installment" ("debt_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debt_installment_debt_id_external_id" ON "debt_installment" '
     '("debt_id", "external_id")'),
    'CREATE INDEX IF NOT EXISTS "debt_installment_estado_vence" ON "debt_installment" ("estado", "vence")',
    ('CREATE TABLE IF NOT EXISTS "payment_allocation" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"payment_id" INTEGER NOT NULL, "installment_id" INTEGER NOT NULL, "monto" BIGINT NOT NULL, '
     'FOREIGN KEY ("payment_id") REFERENCES "debt_payment" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("installment_id") REFERENCES "debt_installment" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "payment_allocation_payment_id" ON "payment_allocation" ("payment_id")',
    ('CREATE INDEX IF NOT EXISTS "payment_allocation_installment_id" ON "payment_allocation" '
     '("installment_id")'),
    ('CREATE TABLE IF NOT EXISTS "debt_reminder" ("id" SERIAL NOT NULL PRIMARY KEY, '
     '"debt_id" INTEGER NOT NULL, "installment_id" INTEGER NOT NULL, "stage" VARCHAR(8) NOT NULL, '
     '"status" VARCHAR(16) NOT NULL, "campaign_id" VARCHAR(40), "created_at" TIMESTAMP NOT NULL, '
     'FOREIGN KEY ("debt_id") REFERENCES "debt" ("id") ON DELETE CASCADE, '
     'FOREIGN KEY ("installment_id") REFERENCES "debt_installment" ("id") ON DELETE CASCADE)'),
    'CREATE INDEX IF NOT EXISTS "debt_reminder_debt_id" ON "debt_reminder" ("debt_id")',
    'CREATE INDEX IF NOT EXISTS "debt_reminder_installment_id" ON "debt_reminder" ("installment_id")',
    ('CREATE UNIQUE INDEX IF NOT EXISTS "debt_reminder_installment_id_stage" ON "debt_reminder" '
     '("installment_id", "stage")'),
]


def up(migrator, db):
    for statement in POSTGRES if isinstance(db, PostgresqlDatabase) else SQLITE:
        db.execute_sql(statement)
