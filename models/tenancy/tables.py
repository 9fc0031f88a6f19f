"""Tenancy's tables: companies and their keys, wallets and ledgers, access requests, idempotency
records, and the company portal's people."""

from __future__ import annotations

import ipaddress

from peewee import SQL, BooleanField, CharField, DateTimeField, ForeignKeyField, IntegerField, TextField

from models.clock import isoformat, utcnow
from models.store.base import BaseModel, JSONField
from models.store.secrets import EncryptedText

# Companies and their API keys (keys.py).

DEFAULT_KEY_RATE_LIMIT = 120
# The portal's source language: what a company without a locale of its own was always shown.
DEFAULT_LOCALE = "en_US"


class Tenant(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    name = CharField(max_length=255)
    timezone = CharField(max_length=64, default="UTC")
    # Its pages' language when the reader's is unknown, and the country numbers, money and dates
    # are written for (config/i18n.py).
    locale = CharField(max_length=16, default=DEFAULT_LOCALE)
    status = CharField(max_length=16, default="active")
    created_at = DateTimeField(default=utcnow)


class ApiKey(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    tenant = ForeignKeyField(Tenant, backref="keys", on_delete="CASCADE")
    secret_hash = CharField(max_length=64)
    scopes = JSONField()
    allowed_ips = JSONField(null=True)
    rate_limit = IntegerField(default=DEFAULT_KEY_RATE_LIMIT)
    created_at = DateTimeField(default=utcnow)
    rotated_at = DateTimeField(null=True)
    revoked_at = DateTimeField(null=True)
    last_used_at = DateTimeField(null=True)

    def allows_ip(self, address: str | None) -> bool:
        if not self.allowed_ips:
            return True
        if not address:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in ipaddress.ip_network(block, strict=False) for block in self.allowed_ips)


# The wallet and its ledger (credits.py).

class Wallet(BaseModel):
    tenant = ForeignKeyField(Tenant, unique=True, backref="wallet", on_delete="CASCADE")
    balance = IntegerField(default=0)
    reserved = IntegerField(default=0)
    status = CharField(max_length=16, default="active")
    low_balance_threshold = IntegerField(default=0)
    updated_at = DateTimeField(default=utcnow)
    # Entries in the company's ledger: counted under the wallet's row lock as each is written,
    # so the ledger's total is read here rather than counted.
    ledger_entries = IntegerField(default=0)

    class Meta:
        constraints = [SQL("CHECK (reserved >= 0)"), SQL("CHECK (balance >= reserved)")]

    @property
    def available(self) -> int:
        return self.balance - self.reserved

    def as_dict(self) -> dict:
        return wallet_dict(self.balance, self.reserved, self.status, self.low_balance_threshold)


def wallet_dict(balance: int, reserved: int, status: str, low_balance_threshold: int) -> dict:
    """A wallet as the API and svcctl show it."""
    return {
        "balance": balance,
        "reserved_balance": reserved,
        "available_balance": balance - reserved,
        "status": status,
        "low_balance_threshold": low_balance_threshold,
    }


class LedgerEntry(BaseModel):
    tenant = ForeignKeyField(Tenant, backref="ledger", on_delete="CASCADE")
    type = CharField(max_length=16)
    amount = IntegerField()
    balance_after = IntegerField()
    reserved_after = IntegerField()
    reference = CharField(max_length=255, null=True)
    description = CharField(max_length=1000, null=True)
    campaign_id = IntegerField(null=True)
    messaging_account_id = IntegerField(null=True)
    created_at = DateTimeField(default=utcnow, index=True)
    position = IntegerField(null=True)  # 1, 2, ... within the tenant's ledger: its pages are index seeks

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "type": self.type,
            "amount": self.amount,
            "balance_after": self.balance_after,
            "reserved_after": self.reserved_after,
            "reference": self.reference,
            "description": self.description,
            "campaign_id": self.campaign_id,
            "messaging_account_id": self.messaging_account_id,
            "created_at": isoformat(self.created_at),
        }


# Access requests (access_requests.py).

class AccessRequest(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    company_name = CharField(max_length=255)
    contact_name = CharField(max_length=255)
    contact_email = CharField(max_length=255)
    tax_id = CharField(max_length=80, null=True)
    country = CharField(max_length=120, null=True)
    contact_phone = CharField(max_length=60, null=True)
    estimated_monthly_messages = IntegerField(null=True)
    estimated_numbers_count = IntegerField(null=True)
    use_case = TextField(null=True)
    webhook_url = CharField(max_length=1000, null=True)
    source_ip = CharField(max_length=64, null=True)
    status = CharField(max_length=16, default="pending")
    tenant = ForeignKeyField(Tenant, null=True, on_delete="SET NULL")
    decision_reason = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    reviewed_at = DateTimeField(null=True)

    def as_dict(self) -> dict:
        return {
            "id": self.public_id,
            "company_name": self.company_name,
            "contact_name": self.contact_name,
            "contact_email": self.contact_email,
            "tax_id": self.tax_id,
            "country": self.country,
            "contact_phone": self.contact_phone,
            "estimated_monthly_messages": self.estimated_monthly_messages,
            "estimated_numbers_count": self.estimated_numbers_count,
            "use_case": self.use_case,
            "webhook_url": self.webhook_url,
            "status": self.status,
            "tenant_id": self.tenant.public_id if self.tenant_id else None,
            "decision_reason": self.decision_reason,
            "created_at": isoformat(self.created_at),
            "reviewed_at": isoformat(self.reviewed_at),
        }


# Idempotency records (idempotency.py).

class IdempotencyRecord(BaseModel):
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    key = CharField(max_length=255)
    method = CharField(max_length=8)
    path = CharField(max_length=1000)
    body_hash = CharField(max_length=64)
    state = CharField(max_length=16, default="in_progress")
    status = IntegerField(null=True)
    # Encrypted for operations whose response shows a secret, plain JSON for the rest.
    body = EncryptedText(null=True)
    headers = JSONField(null=True)
    created_at = DateTimeField(default=utcnow, index=True)

    class Meta:
        indexes = ((("tenant", "key"), True),)


# The company portal's people (portal.py).

ROLES = ("owner", "developer", "viewer")
# What each role may do beyond reading; `owner` may do everything.
WRITES = {"owner": {"keys", "webhooks", "numbers", "campaigns", "receivables", "users", "security"},
          "developer": {"keys", "webhooks", "numbers", "campaigns"},
          "viewer": set()}
MAX_EMAIL = 254


class PortalUser(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    tenant = ForeignKeyField(Tenant, backref="portal_users", on_delete="CASCADE")
    email = CharField(unique=True, max_length=MAX_EMAIL)
    role = CharField(max_length=16)
    password_hash = CharField(max_length=255)
    totp_ciphertext = EncryptedText(null=True)  # encrypted base32 secret, once confirmed
    totp_pending_ciphertext = EncryptedText(null=True)  # being set up, not yet confirmed
    totp_last_step = IntegerField(null=True)  # the last time step accepted: a code works once
    created_at = DateTimeField(default=utcnow)
    last_sign_in_at = DateTimeField(null=True)
    language = CharField(max_length=8, null=True)  # the pages' language; None: the browser's

    @property
    def has_totp(self) -> bool:
        return self.totp_ciphertext is not None

    def may(self, area: str) -> bool:
        return area in WRITES.get(self.role, set())


class PortalInvitation(BaseModel):
    public_id = CharField(unique=True, max_length=40)
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    email = CharField(max_length=MAX_EMAIL)
    role = CharField(max_length=16)
    token_hash = CharField(unique=True, max_length=64)
    invited_by = ForeignKeyField(PortalUser, null=True, on_delete="SET NULL")
    created_at = DateTimeField(default=utcnow)
    expires_at = DateTimeField()
    accepted_at = DateTimeField(null=True)


class PortalSession(BaseModel):
    token_hash = CharField(unique=True, max_length=64)
    user = ForeignKeyField(PortalUser, backref="sessions", on_delete="CASCADE")
    csrf_token = CharField(max_length=64)
    pending_totp = BooleanField(default=False)
    ip = CharField(max_length=64, null=True)
    user_agent = CharField(max_length=255, null=True)
    created_at = DateTimeField(default=utcnow)
    last_seen_at = DateTimeField(default=utcnow)
    expires_at = DateTimeField()


class PortalPolicy(BaseModel):
    """A company's portal settings."""

    tenant = ForeignKeyField(Tenant, unique=True, on_delete="CASCADE")
    require_totp = BooleanField(default=False)


class AuditEntry(BaseModel):
    tenant = ForeignKeyField(Tenant, on_delete="CASCADE")
    user = ForeignKeyField(PortalUser, null=True, on_delete="SET NULL")
    actor = CharField(max_length=MAX_EMAIL)  # kept when the user is removed
    action = CharField(max_length=64)
    target = CharField(max_length=200, null=True)
    details = JSONField(null=True)
    ip = CharField(max_length=64, null=True)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "portal_audit_entry"
        indexes = ((("tenant", "id"), False),)
