"""Tenants: the companies the service works for. A company is created with its wallet."""

from __future__ import annotations

from config.i18n import company_locale, time_zone
from models.errors import Invalid, NotFound
from models.ids import new_id
from models.store.db import atomic
from models.tenancy.tables import DEFAULT_LOCALE, Tenant, Wallet


def check_timezone(name: str) -> str:
    try:
        return time_zone(name).key
    except ValueError as error:
        raise Invalid(str(error), details={"errors": {"timezone": [str(error)]}}) from None


def check_locale(value: str) -> str:
    try:
        return company_locale(value)
    except ValueError as error:
        raise Invalid(str(error), details={"errors": {"locale": [str(error)]}}) from None


def create_tenant(name: str, timezone: str = "UTC", locale: str = DEFAULT_LOCALE) -> Tenant:
    name = name.strip()
    if not name or len(name) > 255:
        raise Invalid("a tenant name is 1 to 255 characters")
    timezone, locale = check_timezone(timezone), check_locale(locale)
    with atomic():
        tenant = Tenant.create(public_id=new_id("ten_"), name=name, timezone=timezone, locale=locale)
        Wallet.create(tenant=tenant)
    return tenant


def get_tenant(public_id: str) -> Tenant:
    tenant = Tenant.get_or_none(Tenant.public_id == public_id)
    if tenant is None:
        raise NotFound(f"no tenant {public_id}", code="tenant_not_found")
    return tenant


def update_tenant(public_id: str, timezone: str | None = None, locale: str | None = None) -> Tenant:
    """Change what is given of a company's time zone and locale."""
    tenant = get_tenant(public_id)
    changes = {}
    if timezone is not None:
        changes[Tenant.timezone] = check_timezone(timezone)
    if locale is not None:
        changes[Tenant.locale] = check_locale(locale)
    if changes:
        Tenant.update(changes).where(Tenant.id == tenant.id).execute()
    return get_tenant(public_id)
