"""models/store/prepared.py: a statement built once answers every call as the query itself would,
on both engines."""

from __future__ import annotations

import datetime as dt

import pytest

from models.store.prepared import Prepared
from models.tenancy.tables import Tenant


@pytest.fixture
def tenants(alice, charlie) -> list[Tenant]:
    return [alice.tenant, charlie.tenant]


def test_each_call_binds_its_own_arguments_and_reads_rows_as_the_query_does(tenants):
    by_name = Prepared(lambda name, tenant_id: Tenant.select()
                       .where((Tenant.name == name) & (Tenant.id == tenant_id)).limit(1), "\0name", -7_000_000_001)
    for tenant in tenants:  # the second call reuses the first call's text, with its own arguments
        found = by_name.first(tenant.name, tenant.id)
        expected = Tenant.get_by_id(tenant.id)
        assert isinstance(found, Tenant) and found.__data__ == expected.__data__
        assert isinstance(found.created_at, dt.datetime)  # the fields' conversions, as peewee's own reads
    assert by_name.first(tenants[0].name, tenants[1].id) is None  # one company's name, the other's id
    names = Prepared(lambda low: Tenant.select(Tenant.id, Tenant.name).where(Tenant.id >= low).order_by(Tenant.id)
                     .tuples(), -7_000_000_001)
    assert names.rows(tenants[0].id) == [(tenant.id, tenant.name) for tenant in tenants]
    assert names.rows(tenants[1].id + 1) == []

