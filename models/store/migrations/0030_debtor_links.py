"""The debtor's page: one link per debtor and company, found by the SHA-256 of its token (the
token itself is never stored; models/receivables/debtor_links.py).

A frozen copy of the table as this migration creates it, so later changes to the live model do
not change what it does."""

from peewee import CharField, DateTimeField, ForeignKeyField, Model


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

    class DebtorLink(Base):
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        debtor = ForeignKeyField(Debtor, on_delete="CASCADE")
        nonce = CharField(max_length=64)
        token_hash = CharField(max_length=64, unique=True)
        expires_at = DateTimeField()
        opened_at = DateTimeField(null=True)
        created_at = DateTimeField()

        class Meta:
            table_name = "debtor_link"
            indexes = ((("tenant", "debtor"), True),)

    db.create_tables([DebtorLink])
