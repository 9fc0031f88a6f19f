"""Periodic housekeeping that belongs to no single area."""

from jobs.queue import crontab, periodic_task
from models.store.counters import counters
from models.tenancy import idempotency


@periodic_task(crontab(minute="*/10"))
def purge_expired_idempotency_keys() -> int:
    return idempotency.purge_expired()


@periodic_task(crontab(minute="*/5"))
def purge_old_rate_counters() -> int:
    return counters().purge()
