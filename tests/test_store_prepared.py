"""models/store/prepared.py: a statement built once answers every call as the query itself would,
on both engines."""

from __future__ import annotations

import datetime as dt

import pytest

from models.clock import isoformat, stored_isoformat
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



def test_driver_rows_are_the_columns_as_stored_and_their_times_read_as_the_model_writes_them(tenants):
    """A page made from the driver's rows: no conversion but the ones its dicts ask for, and the
    timestamps written as `isoformat` writes the model's datetime, with or without a fraction."""
    Tenant.update(created_at=dt.datetime(2026, 11, 28, 9, 30)).where(Tenant.id == tenants[0].id).execute()
    Tenant.update(created_at=dt.datetime(2026, 11, 28, 9, 30, 5, 120)).where(Tenant.id == tenants[1].id).execute()
    since = Prepared(lambda low, limit: Tenant.select(Tenant.id, Tenant.name, Tenant.created_at)
                     .where(Tenant.id >= low).order_by(Tenant.id).limit(limit).tuples(), -7_000_000_001, -7_000_000_002)
    rows = since.driver_rows(tenants[0].id, 10)
    assert [row[:2] for row in rows] == [(tenant.id, tenant.name) for tenant in tenants]
    models = [Tenant.get_by_id(tenant.id) for tenant in tenants]
    assert [stored_isoformat(row[2]) for row in rows] == [isoformat(model.created_at) for model in models] == [
        "2026-11-28T09:30:00Z", "2026-11-28T09:30:05.000120Z"]
    assert since.driver_row(tenants[1].id, 1)[0] == tenants[1].id
    assert since.driver_row(tenants[1].id + 1, 1) is None and since.driver_rows(tenants[0].id, 1) == rows[:1]
    assert stored_isoformat(None) is None
    aware = dt.datetime(2026, 11, 28, 6, 30, tzinfo=dt.timezone(dt.timedelta(hours=-3)))
    assert stored_isoformat(aware) == isoformat(aware) == "2026-11-28T09:30:00Z"


@pytest.mark.parametrize("stored", ["2026-11-28 09:30:05", "2026-11-28 09:30:05.000120", "2026-11-28 09:30:05.000000",
                                    "2026-11-28 09:30:05.12", "2026-11-28T09:30:05", "2026-11-28",
                                    "2026-11-28 06:30:05-03:00"])
def test_a_stored_time_in_any_of_its_spellings_is_written_as_the_models_datetime(stored):
    read = Tenant.created_at.python_value(stored)  # as the model reads SQLite's text
    model = dt.datetime.fromisoformat(stored) if isinstance(read, str) else read  # peewee leaves others as text
    assert stored_isoformat(stored) == isoformat(model)
