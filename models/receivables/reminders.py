"""What collection will no longer send: the reminders of a debt that settled or resolved.

Called in the transaction that settles the debt (debts.py, snapshots.py): reminders already
handed to a campaign and not sent yet are withdrawn from it, and the stages an installment was
not reminded of yet are recorded as cancelled, so collection (collection.py) never sends them.
"""

from __future__ import annotations

from models.clock import utcnow
from models.receivables.tables import STAGES, Debt, Reminder
from models.sending.campaign_counters import release_withdrawn
from models.sending.campaign_ends import finish_after_commit
from models.sending.tables import Campaign, CampaignRecipient


def stop_collection(debt_ids: list[int]) -> None:
    """The debts are settled: withdraw their reminders not yet sent."""
    if debt_ids:
        withdraw_reminders(debt_ids)


def cancel_reminders(debt_id: int, installment_ids: list[int]) -> int:
    """Record every stage these installments have not been reminded of as `cancelled`.

    The unique (installment, stage) key then refuses those reminders for good, and the debt's
    history shows what collection will no longer send.
    """
    if not installment_ids:
        return 0
    now = utcnow()
    rows = [{"debt": debt_id, "installment": installment_id, "stage": stage, "status": "cancelled",
             "created_at": now} for installment_id in installment_ids for stage, _offset in STAGES]
    return (Reminder.insert_many(rows).on_conflict_ignore().as_rowcount().execute())


def withdraw_reminders(debt_ids: list[int]) -> int:
    """Take back the reminders of these debts that their campaign has not sent yet (the debt was
    paid or resolved); returns how many messages were withdrawn. Call inside the transaction.

    The recipient moves `pending → cancelled` with a conditional UPDATE: the dispatcher claims
    with `pending → queued` the same way, so a message is either withdrawn or sent, never both.
    The withdrawn messages' reserved credits are released, and a campaign left with nothing to
    send completes once the transaction commits (campaign rows come first in the lock order).
    """
    if not debt_ids:
        return 0
    queued = list(Reminder.select(Reminder.campaign_id, Debt.external_id).join(Debt)
                  .where(Reminder.debt.in_(debt_ids) & (Reminder.status == "queued")).distinct().tuples())
    if not queued:
        return 0
    by_campaign: dict[str, list[str]] = {}
    for campaign_public_id, debt_external_id in queued:
        by_campaign.setdefault(campaign_public_id, []).append(debt_external_id)
    withdrawn = 0
    for campaign_public_id, external_ids in by_campaign.items():
        campaign = Campaign.get_or_none(Campaign.public_id == campaign_public_id)
        if campaign is None:
            continue
        cancelled = list(CampaignRecipient.update(status="cancelled")
                         .where((CampaignRecipient.campaign == campaign.id)
                                & CampaignRecipient.external_contact_id.in_(external_ids)
                                & (CampaignRecipient.status == "pending"))
                         .returning(CampaignRecipient.external_contact_id).tuples().execute())
        if not cancelled:
            continue
        withdrawn += len(cancelled)
        release_withdrawn({campaign.id: len(cancelled)}, "pending", "cancelled",
                          "payment reminder withdrawn: debt settled")
        (Reminder.update(status="cancelled")
         .where((Reminder.campaign_id == campaign_public_id) & (Reminder.status == "queued")
                & Reminder.debt.in_(Debt.select(Debt.id).where(
                    Debt.id.in_(debt_ids) & Debt.external_id.in_([row[0] for row in cancelled]))))
         .execute())
        finish_after_commit([campaign.id])
    return withdrawn
