"""Gateway work: processing stored notifications, and the periodic reconciliation."""

from __future__ import annotations

import logging

from gateway import GatewayError
from jobs.queue import crontab, periodic_task, task
from models.errors import DomainError
from models.receivables import payments

log = logging.getLogger(__name__)


# A gateway that cannot be reached is asked again on this curve; past it, reconciliation still
# finds the transaction in the gateway's own list.
@task(retries=5, retry_delay=30)
def process_gateway_notification(notification_id: int) -> str:
    return payments.process_notification(notification_id)


# Every 30 minutes, over the last SVC_PAYMENTS_RECONCILE_HOURS: a notification lost while the
# service was down (the gateway gives up on a receiver that does not answer) is found here, and
# stored notifications whose task was lost are processed.
@periodic_task(crontab(minute="*/30"))
def reconcile_payments() -> int:
    for notification_id in payments.unprocessed_notifications():
        try:
            payments.process_notification(notification_id)
        except GatewayError as error:
            log.warning("gateway notification %s still not processed: %s", notification_id, error.message)
    recorded = 0
    for tenant_id in payments.tenants_with_gateway():
        try:
            recorded += len(payments.reconcile(tenant_id))
        except DomainError as error:
            log.warning("reconciliation of tenant %s not done: %s", tenant_id, error.message)
    return recorded
