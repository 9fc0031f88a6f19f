"""The columns the service works out or invented get English names; the ones that store a field
of the contract as the ERP sends it keep the contract's (docs/development.md, "Names"). An
installment's derived `estado` becomes `status` (the API still answers it as `estado`), what the
ERP declared `declared_status`, what payments covered `amount_paid`; a payment's unallocated
part `unassigned` and the balance it left `balance_after`, as a reversal's already were; the
gateway's tables (allocations, links, reversals) name their amount and currency in English.
Renamed in place, so every row keeps its values; the index on the installment's status and due
date is renamed with its column."""

from peewee import PostgresqlDatabase

RENAMES = (
    ("debt_installment", "estado", "status"),
    ("debt_installment", "declared_estado", "declared_status"),
    ("debt_installment", "pagado", "amount_paid"),
    ("debt_payment", "monto_sin_asignar", "unassigned"),
    ("debt_payment", "saldo_after", "balance_after"),
    ("payment_allocation", "monto", "amount"),
    ("payment_link", "monto", "amount"),
    ("payment_link", "moneda", "currency"),
    ("payment_reversal", "monto", "amount"),
    ("payment_reversal", "moneda", "currency"),
    ("payment_reversal", "saldo_after", "balance_after"),
)


def up(migrator, db):
    for table, old, new in RENAMES:
        db.execute_sql(f'ALTER TABLE "{table}" RENAME COLUMN "{old}" TO "{new}"')
    # SQLite has already pointed the index at the renamed column; only its name is left.
    if isinstance(db, PostgresqlDatabase):
        db.execute_sql('ALTER INDEX "debt_installment_estado_vence" RENAME TO "debt_installment_status_vence"')
    else:
        db.execute_sql('DROP INDEX "debt_installment_estado_vence"')
        db.execute_sql('CREATE INDEX "debt_installment_status_vence" ON "debt_installment" ("status", "vence")')
