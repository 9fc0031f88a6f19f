"""Each ledger entry gets its position in its company's ledger (1, 2, ...) and the wallet the
number of entries, so a ledger page is an index seek on (tenant, position) and its total a
column read: neither grows with the ledger (a COUNT and an OFFSET over a million rows did).
Existing rows are numbered in id order, the order they were written in."""


def up(migrator, db):
    db.execute_sql('ALTER TABLE "ledger_entry" ADD COLUMN "position" INTEGER')
    db.execute_sql('ALTER TABLE "wallet" ADD COLUMN "ledger_entries" INTEGER NOT NULL DEFAULT 0')
    db.execute_sql('UPDATE "ledger_entry" SET "position" = numbered."n" FROM '
                   '(SELECT "id", ROW_NUMBER() OVER (PARTITION BY "tenant_id" ORDER BY "id") AS "n" '
                   'FROM "ledger_entry") AS numbered WHERE numbered."id" = "ledger_entry"."id"')
    db.execute_sql('UPDATE "wallet" SET "ledger_entries" = (SELECT COUNT(*) FROM "ledger_entry" AS e '
                   'WHERE e."tenant_id" = "wallet"."tenant_id")')
    db.execute_sql('CREATE UNIQUE INDEX IF NOT EXISTS "ledger_entry_tenant_position" '
                   'ON "ledger_entry" ("tenant_id", "position")')
