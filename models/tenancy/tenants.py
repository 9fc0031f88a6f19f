"""Tenants: the companies the service works for. A company is created with its wallet."""

from __future__ import annotations

from models.errors import Invalid, NotFound
from models.ids import new_id
from models.store.db import atomic
from models.tenancy.tables import Tenant, Wallet


def create_tenant(name: str, timezone: str = "UTC") -> Tenant:
    name = name.strip()
    if not name or len(name) > 255:
        raise Invalid("a tenant name is 1 to 255 characters")
    with atomic():
        tenant = Tenant.create(public_id=new_id("ten_"), name=name, timezone=timezone)
        Wallet.create(tenant=tenant)
    return tenant


def get_tenant(public_id: str) -> Tenant:
    tenant = Tenant.get_or_none(Tenant.public_id == public_id)
    if tenant is None:
        raise NotFound(f"no tenant {public_id}", code="tenant_not_found")
    return tenant
