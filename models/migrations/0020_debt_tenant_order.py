"""An index on debt (tenant, id), so a page of a company's debts newest first is an index seek
from the last id shown (the portal's receivables pages by keyset). The index on tenant alone
leaves PostgreSQL to read every debt of the company and sort them for each page."""


def up(migrator, db):
    db.execute_sql('CREATE INDEX IF NOT EXISTS "debt_tenant_id_id" ON "debt" ("tenant_id", "id")')
