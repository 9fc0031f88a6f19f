"""Portal housekeeping: sessions that ended by time and invitations long expired are deleted."""

from jobs.queue import crontab, periodic_task
from models.tenancy import portal


@periodic_task(crontab(minute="23"))
def prune_portal_sessions() -> tuple[int, int]:
    return portal.prune()
