"""Platform users: a WhatsApp user known to a number by business-scoped id, phone number or both
(with username, profile and business-app contact names and the marketing opt-out), the
coexistence sync's progress on the number, the message that last opened a window (marked read
when the business answers), and room for business-scoped ids (up to 131
characters) wherever a user is keyed. Frozen copies of what it touches."""

from peewee import (
    BooleanField,
    CharField,
    DateTimeField,
    ForeignKeyField,
    IntegerField,
    Model,
    PostgresqlDatabase,
)
from playhouse.migrate import migrate

USER_KEY_COLUMNS = (("contact_window", "wa_id"), ("business_initiated", "wa_id"),
                    ("campaign_recipient", "wa_id"), ("message", "to"))


class MessagingAccount(Model):
    class Meta:
        table_name = "messaging_account"


class PlatformUser(Model):
    account = ForeignKeyField(MessagingAccount, on_delete="CASCADE", index=False)
    user_id = CharField(max_length=160, null=True)
    wa_id = CharField(max_length=32, null=True)
    parent_user_id = CharField(max_length=160, null=True)
    username = CharField(max_length=160, null=True)
    profile_name = CharField(max_length=255, null=True)
    contact_name = CharField(max_length=255, null=True)
    marketing_opt_out = BooleanField(default=False)
    updated_at = DateTimeField()

    class Meta:
        table_name = "platform_user"
        indexes = ((("account", "user_id"), True), (("account", "wa_id"), True))


def up(migrator, db):
    with db.bind_ctx([MessagingAccount, PlatformUser]):
        db.create_tables([PlatformUser])
    migrate(migrator.add_column("contact_window", "last_inbound_wamid", CharField(max_length=255, null=True)),
            migrator.add_column("messaging_account", "contacts_imported", IntegerField(default=0)),
            migrator.add_column("messaging_account", "history_threads", IntegerField(default=0)),
            migrator.add_column("messaging_account", "history_progress", IntegerField(null=True)))
    if isinstance(db, PostgresqlDatabase):  # SQLite does not enforce VARCHAR lengths
        for table, column in USER_KEY_COLUMNS:
            db.execute_sql(f'ALTER TABLE "{table}" ALTER COLUMN "{column}" TYPE VARCHAR(160)')
