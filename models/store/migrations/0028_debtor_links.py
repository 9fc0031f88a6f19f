"""The debtor's page: one link per debtor and company, found by the SHA-256 of its token (the
token itself is never stored; models/receivables/debtor_links.py), and what a debtor says there:
promises to pay by a date, and disputes with a reason; and the debts a payment link for
everything a debtor owes pays (its parts).

A frozen copy of the table as this migration creates it, so later changes to the live model do
not change what it does."""

from peewee import BigIntegerField, CharField, DateField, DateTimeField, ForeignKeyField, IntegerField, Model


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

    class Debt(Base):
        class Meta:
            table_name = "debt"

    class DebtPromise(Base):
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        debt = ForeignKeyField(Debt, on_delete="CASCADE")
        promised_date = DateField()
        status = CharField(max_length=16, default="active")
        created_at = DateTimeField()

        class Meta:
            table_name = "debt_promise"
            indexes = ((("debt", "status"), False),)

    class DebtDispute(Base):
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        debt = ForeignKeyField(Debt, on_delete="CASCADE")
        reason = CharField(max_length=500)
        status = CharField(max_length=16, default="open")
        created_at = DateTimeField()
        resolved_at = DateTimeField(null=True)

        class Meta:
            table_name = "debt_dispute"
            indexes = ((("debt", "status"), False),)

    class PaymentLink(Base):
        class Meta:
            table_name = "payment_link"

    class PaymentLinkPart(Base):
        link = ForeignKeyField(PaymentLink, on_delete="CASCADE")
        debt = ForeignKeyField(Debt, on_delete="CASCADE")
        position = IntegerField()
        amount = BigIntegerField()

        class Meta:
            table_name = "payment_link_part"
            indexes = ((("link", "position"), True),)

    db.create_tables([DebtorLink, DebtPromise, DebtDispute, PaymentLinkPart])
