"""What debtors answer in WhatsApp: each reply attached to the debts it concerns (free text, or a
reminder's quick-reply button pressed), and the ERP's feed of what debtors said (promises,
disputes and payments they claim), numbered per tenant like the payments' export.

A frozen copy of the tables as this migration creates them, so later changes to the live models
do not change what it does."""

from peewee import BigIntegerField, CharField, DateTimeField, ForeignKeyField, Model, TextField


def up(migrator, db):
    class Base(Model):
        class Meta:
            database = db
            legacy_table_names = False

    class Tenant(Base):
        class Meta:
            table_name = "tenant"

    class Debt(Base):
        class Meta:
            table_name = "debt"

    class DebtPromise(Base):
        class Meta:
            table_name = "debt_promise"

    class DebtDispute(Base):
        class Meta:
            table_name = "debt_dispute"

    class DebtReply(Base):
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        debt = ForeignKeyField(Debt, on_delete="CASCADE")
        wam_id = CharField(max_length=255)
        sender = CharField(max_length=160)
        kind = CharField(max_length=16)
        action = CharField(max_length=16, null=True)
        body = TextField(null=True)
        received_at = DateTimeField()

        class Meta:
            table_name = "debt_reply"
            indexes = ((("debt", "wam_id"), True), (("tenant", "received_at"), False))

    class DebtorResponseExport(Base):
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        seq = BigIntegerField()
        debt = ForeignKeyField(Debt, on_delete="CASCADE")
        promise = ForeignKeyField(DebtPromise, null=True, on_delete="CASCADE")
        dispute = ForeignKeyField(DebtDispute, null=True, on_delete="CASCADE")
        reply = ForeignKeyField(DebtReply, null=True, on_delete="CASCADE")
        origin = CharField(max_length=16)
        created_at = DateTimeField()

        class Meta:
            table_name = "debtor_response_export"
            indexes = ((("tenant", "seq"), True),)

    class DebtorResponseExportSequence(Base):
        tenant = ForeignKeyField(Tenant, primary_key=True, on_delete="CASCADE")
        last = BigIntegerField(default=0)

        class Meta:
            table_name = "debtor_response_export_sequence"

    db.create_tables([DebtReply, DebtorResponseExport, DebtorResponseExportSequence])
