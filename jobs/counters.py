"""Rate-limit windows long past are deleted from the counter store (where it keeps them)."""

from jobs.queue import crontab, periodic_task
from models.store.counters import counters


@periodic_task(crontab(minute="*/5"))
def purge_old_rate_counters() -> int:
    return counters().purge()
