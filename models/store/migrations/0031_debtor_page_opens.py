"""Every time a debtor opens their page: what the collection report counts as "page opened"
(models/receivables/report.py). `debtor_link.opened_at` keeps only the last one.

A frozen copy of the table as this migration creates it, so later changes to the live model do
not change what it does."""

from peewee import DateTimeField, ForeignKeyField, Model


def up(migrator, db):
    class Base(Model):
        class Meta:
            database = db
            legacy_table_names = False

    class Tenant(Base):
        class Meta:
            table_name = "tenant"

    class Debtor(Base):
        class Meta:
            table_name = "debtor"

    class DebtorPageOpen(Base):
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE", index=False)
        debtor = ForeignKeyField(Debtor, on_delete="CASCADE", index=False)
        opened_at = DateTimeField()

        class Meta:
            table_name = "debtor_page_open"
            indexes = ((("tenant", "debtor", "opened_at"), False),)

    db.create_tables([DebtorPageOpen])
