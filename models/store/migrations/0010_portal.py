"""The company portal: users, invitations, sessions, the company's portal policy, the audit log;
and when each API key was last used.

Frozen copies of the tables as this migration creates them, so later changes to models/portal.py
never alter what it does.
"""

from peewee import BooleanField, CharField, DateTimeField, ForeignKeyField, IntegerField, Model, TextField


def up(migrator, db):
    class Tenant(Model):
        class Meta:
            database = db
            table_name = "tenant"

    class Base(Model):
        class Meta:
            database = db
            legacy_table_names = False

    class PortalUser(Base):
        public_id = CharField(unique=True, max_length=40)
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        email = CharField(unique=True, max_length=254)
        role = CharField(max_length=16)
        password_hash = CharField(max_length=255)
        totp_ciphertext = TextField(null=True)
        totp_pending_ciphertext = TextField(null=True)
        totp_last_step = IntegerField(null=True)
        created_at = DateTimeField()
        last_sign_in_at = DateTimeField(null=True)

    class PortalInvitation(Base):
        public_id = CharField(unique=True, max_length=40)
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        email = CharField(max_length=254)
        role = CharField(max_length=16)
        token_hash = CharField(unique=True, max_length=64)
        invited_by = ForeignKeyField(PortalUser, null=True, on_delete="SET NULL")
        created_at = DateTimeField()
        expires_at = DateTimeField()
        accepted_at = DateTimeField(null=True)

    class PortalSession(Base):
        token_hash = CharField(unique=True, max_length=64)
        user = ForeignKeyField(PortalUser, on_delete="CASCADE")
        csrf_token = CharField(max_length=64)
        pending_totp = BooleanField(default=False)
        ip = CharField(max_length=64, null=True)
        user_agent = CharField(max_length=255, null=True)
        created_at = DateTimeField()
        last_seen_at = DateTimeField()
        expires_at = DateTimeField()

    class PortalPolicy(Base):
        tenant = ForeignKeyField(Tenant, unique=True, on_delete="CASCADE")
        require_totp = BooleanField(default=False)

    class AuditEntry(Base):
        tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
        user = ForeignKeyField(PortalUser, null=True, on_delete="SET NULL")
        actor = CharField(max_length=254)
        action = CharField(max_length=64)
        target = CharField(max_length=200, null=True)
        details = TextField(null=True)
        ip = CharField(max_length=64, null=True)
        created_at = DateTimeField()

        class Meta:
            table_name = "portal_audit_entry"
            indexes = ((("tenant", "id"), False),)

    db.create_tables([PortalUser, PortalInvitation, PortalSession, PortalPolicy, AuditEntry])
    # 0001 creates api_key from the live model, which has the column now: only a database made
    # before it needs it added.
    if "last_used_at" not in {column.name for column in db.get_columns("api_key")}:
        migrator.migrate(migrator.add_column("api_key", "last_used_at", DateTimeField(null=True)))
