"""Periodic receivables work: overdue statuses and collection reminders."""

from __future__ import annotations

from jobs.queue import crontab, periodic_task
from models.receivables import debts
from models.receivables.collection import send_due_reminders


# Hourly rather than daily: each tenant's day starts at its own midnight, which this then
# catches within the hour. Every debt write applies the same rule, so this only covers days
# that pass without a write.
@periodic_task(crontab(minute="5"))
def refresh_overdue_debts() -> int:
    return debts.refresh_overdue()


# Every 15 minutes: reminders wait for the tenant's sending window, and a run finds each
# (installment, stage) once thanks to the reminders table's unique key.
@periodic_task(crontab(minute="*/15"))
def send_payment_reminders() -> list[str]:
    return send_due_reminders()
