"""Payments through the gateway: credentials, links, notifications, reversals and the ERP export.

Frozen copies of the tables as this migration creates them, so later changes to the live models
do not change what it does.
"""

from peewee import BigIntegerField, CharField, DateTimeField, ForeignKeyField, IntegerField, Model, TextField


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

    class Installment(Base):
        class Meta:
            table_name = "debt_installment"

    class Payment(Base):
        class Meta:
            table_name = "debt_payment"

    class PaymentGateway(Base):
        tenant = ForeignKeyField(Tenant, unique=True, on_delete="CASCADE")
        provider = CharField(max_length=32, default="mercadopago")
        access_token_ciphertext = TextField()
        webhook_secret_ciphertext = TextField()
        created_at = DateTimeField()
        updated_at = DateTimeField()

        class Meta:
            table_name = "payment_gateway"

    class PaymentLink(Base):
        public_id = CharField(max_length=40, unique=True)
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        debt = ForeignKeyField(Debt, on_delete="CASCADE")
        installment = ForeignKeyField(Installment, null=True, on_delete="CASCADE")
        monto = BigIntegerField()
        moneda = CharField(max_length=3)
        origin = CharField(max_length=16)
        checkout_id = CharField(max_length=255, null=True)
        checkout_url = TextField(null=True)
        status = CharField(max_length=16, default="active")
        expires_at = DateTimeField()
        paid_at = DateTimeField(null=True)
        created_at = DateTimeField()

        class Meta:
            table_name = "payment_link"
            indexes = ((("tenant", "debt"), False),)

    class GatewayNotification(Base):
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        request_id = CharField(max_length=255)
        topic = CharField(max_length=64)
        action = CharField(max_length=64, null=True)
        resource_id = CharField(max_length=255, null=True)
        claimed_amount = CharField(max_length=64, null=True)
        claimed_currency = CharField(max_length=3, null=True)
        status = CharField(max_length=16, default="received")
        outcome = CharField(max_length=500, null=True)
        attempts = IntegerField(default=0)
        received_at = DateTimeField()
        processed_at = DateTimeField(null=True)

        class Meta:
            table_name = "gateway_notification"
            indexes = ((("tenant", "request_id"), True), (("status", "received_at"), False))

    class PaymentReversal(Base):
        public_id = CharField(max_length=40, unique=True)
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        payment = ForeignKeyField(Payment, on_delete="CASCADE")
        kind = CharField(max_length=16)
        monto = BigIntegerField()
        moneda = CharField(max_length=3)
        unassigned = BigIntegerField(default=0)
        saldo_after = BigIntegerField()
        reversed_at = DateTimeField()
        created_at = DateTimeField()

        class Meta:
            table_name = "payment_reversal"

    class PaymentExport(Base):
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        seq = BigIntegerField()
        payment = ForeignKeyField(Payment, on_delete="CASCADE")
        reversal = ForeignKeyField(PaymentReversal, null=True, on_delete="CASCADE")
        created_at = DateTimeField()

        class Meta:
            table_name = "payment_export"
            indexes = ((("tenant", "seq"), True), (("payment", "reversal"), True))

    class PaymentExportSequence(Base):
        tenant = ForeignKeyField(Tenant, primary_key=True, on_delete="CASCADE")
        last = BigIntegerField(default=0)

        class Meta:
            table_name = "payment_export_sequence"

    db.create_tables([PaymentGateway, PaymentLink, GatewayNotification, PaymentReversal, PaymentExport,
                      PaymentExportSequence])
