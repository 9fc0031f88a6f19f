"""Idempotency records past their 48 hours are deleted."""

from jobs.queue import crontab, periodic_task
from models.tenancy import idempotency


@periodic_task(crontab(minute="*/10"))
def purge_expired_idempotency_keys() -> int:
    return idempotency.purge_expired()
