"""Debt's index on tenant becomes one on (tenant, id), so a page of a company's debts newest first
is an index seek from the last id shown (the portal's receivables pages by keyset): the index on
tenant alone left PostgreSQL to read every debt of the company and sort them for each page. The
index on tenant alone goes: every query on a company's debts is served by an index that starts
with the tenant, and the debt import would otherwise write one index more per debt."""


def up(migrator, db):
    db.execute_sql('CREATE INDEX IF NOT EXISTS "debt_tenant_id_id" ON "debt" ("tenant_id", "id")')
    db.execute_sql('DROP INDEX IF EXISTS "debt_tenant_id"')
