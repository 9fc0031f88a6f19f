"""Dunning plans: each company's collection schedule per segment of its debts, and the debts a
plan escalated (`debt.escalated` sent once per debt; models/receivables/dunning_plans.py).

A frozen copy of the tables as this migration creates them, so later changes to the live models
do not change what it does."""

from peewee import (
    BigIntegerField,
    BooleanField,
    CharField,
    DateTimeField,
    ForeignKeyField,
    IntegerField,
    Model,
    TextField,
)


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

    class DunningPlan(Base):
        public_id = CharField(max_length=40, unique=True)
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        name = CharField(max_length=100)
        currency = CharField(max_length=3, null=True)
        amount_from = BigIntegerField(null=True)
        amount_to = BigIntegerField(null=True)
        steps = TextField(default="[]")
        quiet_hours_start = CharField(max_length=5, null=True)
        quiet_hours_end = CharField(max_length=5, null=True)
        weekly_cap = IntegerField(null=True)
        pause_on_promise = BooleanField(default=True)
        pause_on_dispute = BooleanField(default=True)
        escalate = BooleanField(default=True)
        created_at = DateTimeField()
        updated_at = DateTimeField()

        class Meta:
            table_name = "dunning_plan"
            indexes = ((("tenant", "name"), True),)

    class DebtEscalation(Base):
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        debt = ForeignKeyField(Debt, unique=True, on_delete="CASCADE")
        plan_public_id = CharField(max_length=40)
        stage = CharField(max_length=8)
        created_at = DateTimeField()

        class Meta:
            table_name = "debt_escalation"

    db.create_tables([DunningPlan, DebtEscalation])
