"""Tenants, keys, access requests, credits, the event outbox, idempotency and rate counters."""

from models.access_requests import AccessRequest
from models.counters import RateCounter
from models.credits import LedgerEntry, Wallet
from models.events import Event
from models.idempotency import IdempotencyRecord
from models.tenants import ApiKey, Tenant


def up(migrator, db):
    db.create_tables([Tenant, ApiKey, AccessRequest, Wallet, LedgerEntry, Event,
                      IdempotencyRecord, RateCounter])
