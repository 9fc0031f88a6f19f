"""How a campaign ends: cancelled while still queued, completed once nothing is left to send, or
failed when it cannot go on. Each is a conditional UPDATE of the campaign row (only one writer
wins) that releases, in the same transaction, the credits still reserved; a completed or failed
campaign also writes `campaign.completed` there.
"""

from __future__ import annotations

from collections.abc import Iterable

from models.clock import utcnow
from models.errors import Conflict
from models.events.outbox import emit_many
from models.numbers.tables import MessagingAccount
from models.sending.campaign_counters import campaign_credits, move_credits, release_withdrawn
from models.sending.campaign_events import campaign_event, message_event
from models.sending.campaign_reads import get_campaign
from models.sending.tables import ACTIVE_STATUSES, Campaign, CampaignCounters, CampaignRecipient
from models.store.db import after_commit, atomic, execute, is_postgres, placeholders


def cancel_campaign(tenant_id: int, public_id: str) -> Campaign:
    """Cancel a campaign that is still `queued` (the dispatcher has not claimed anything).

    The dispatcher moves a campaign to `processing` in the same transaction as its first claim,
    and both changes are conditional UPDATEs of the campaign row: whichever commits first wins,
    so a cancelled campaign is never sent and a started one is never cancelled.
    """
    campaign = get_campaign(tenant_id, public_id)
    now = utcnow()
    with atomic():
        changed = (Campaign.update(status="cancelled", finished_at=now, hold_reason=None)
                   .where((Campaign.id == campaign.id) & (Campaign.status == "queued")).execute())
        if changed != 1:
            current = Campaign.get_by_id(campaign.id)
            raise Conflict(f"the campaign is {current.status}; only a queued campaign can be cancelled",
                           code="campaign_not_cancellable", details={"status": current.status})
        cancelled = (CampaignRecipient.update(status="cancelled")
                     .where((CampaignRecipient.campaign == campaign.id) & (CampaignRecipient.status == "pending"))
                     .execute())
        campaign = Campaign.get_by_id(campaign.id)
        leftover = campaign_credits(campaign).leftover
        if leftover != cancelled:
            # Something was claimed although the campaign was queued: a broken invariant, not a race.
            raise Conflict("the campaign has messages in flight", code="campaign_not_cancellable")
        release_withdrawn({campaign.id: cancelled}, "pending", "cancelled", "campaign cancelled")
    return Campaign.get_by_id(campaign.id)


def unfinished(campaign_ids: Iterable[int]) -> set[int]:
    """Those of the campaigns that still have recipients waiting or in flight, by their counters."""
    ids = list(campaign_ids)
    if not ids:
        return set()
    # Hand-written: every sent batch asks this of its campaigns.
    return {campaign_id for (campaign_id,) in execute(
        f'SELECT campaign_id FROM "{CampaignCounters._meta.table_name}" '
        f'WHERE campaign_id IN ({placeholders(len(ids))}) AND "pending" + "queued" > 0', ids)}


def lock_still_active(campaign_ids: Iterable[int]) -> set[int]:
    """Those of the campaigns still active, their rows held against a change of state until
    commit (PostgreSQL's `FOR SHARE`, ascending id: the lock order's first place, so call it
    before locking any recipient row). A writer giving recipients back to `pending` asks this
    first: a campaign failed by another batch meanwhile then gets none back, and one failing
    after waits for the give-back and fails those recipients with the rest."""
    ids = sorted(set(campaign_ids))
    if not ids:
        return set()
    lock = " FOR SHARE" if is_postgres() else ""
    return {campaign_id for campaign_id, status in execute(
        f'SELECT id, status FROM "{Campaign._meta.table_name}" WHERE id IN ({placeholders(len(ids))}) '
        f"ORDER BY id{lock}", ids).fetchall() if status in ACTIVE_STATUSES}


def finish_if_done(campaign_ids: Iterable[int]) -> list[Campaign]:
    """Complete every active campaign with nothing left to send; returns those completed.

    1. Find those without pending or queued recipients.
    2. Move each to `completed` with a conditional UPDATE (only one caller wins), release any
       credit still reserved (none, when every recipient was accounted for), and write
       `campaign.completed`, all in one transaction.
    """
    ids = set(campaign_ids)
    done = ids - unfinished(ids)
    finished: list[Campaign] = []
    for campaign_id in sorted(done):
        with atomic():
            changed = (Campaign.update(status="completed", finished_at=utcnow(), hold_reason=None)
                       .where((Campaign.id == campaign_id) & Campaign.status.in_(ACTIVE_STATUSES)).execute())
            if changed != 1:
                continue
            campaign = Campaign.get_by_id(campaign_id)
            _close(campaign)
            finished.append(campaign)
    return finished


def finish_after_commit(campaign_ids: Iterable[int]) -> None:
    """`finish_if_done` once the current transaction commits, in a transaction of its own: it
    locks campaign rows, which come first in the lock order, so never after recipient rows."""
    ids = set(campaign_ids)
    if ids:
        after_commit(lambda: finish_if_done(ids))


def _close(campaign: Campaign) -> None:
    leftover = campaign_credits(campaign).leftover
    if leftover > 0:
        move_credits(campaign, release=leftover, description="campaign finished")
    account_public_id = MessagingAccount.get_by_id(campaign.account_id).public_id
    emit_many(campaign.tenant_id, "campaign.completed", [campaign_event(campaign, account_public_id)])


def fail_campaign(campaign_id: int, code: str, message: str) -> bool:
    """Stop a campaign that cannot go on (number disconnected, token revoked).

    Its waiting recipients fail with `code` and their credits are released; recipients in flight
    are settled by their batch. `campaign.completed` reports the `failed` status.
    """
    now = utcnow()
    with atomic():
        changed = (Campaign.update(status="failed", finished_at=now, hold_reason=None)
                   .where((Campaign.id == campaign_id) & Campaign.status.in_(ACTIVE_STATUSES)).execute())
        if changed != 1:
            return False
        campaign = Campaign.get_by_id(campaign_id)
        account_public_id = MessagingAccount.get_by_id(campaign.account_id).public_id
        failed = list(CampaignRecipient.update(status="failed", error_code=code, last_error=message[:1000],
                                               failed_at=now, claim_token=None)
                      .where((CampaignRecipient.campaign == campaign_id) & (CampaignRecipient.status == "pending"))
                      .returning(CampaignRecipient).execute())
        if failed:
            release_withdrawn({campaign_id: len(failed)}, "pending", "failed", message[:1000])
            error = {"code": code, "message": message}
            emit_many(campaign.tenant_id, "message.failed",
                      [message_event(campaign.public_id, account_public_id, r, "failed", now, error) for r in failed])
        emit_many(campaign.tenant_id, "campaign.completed", [campaign_event(campaign, account_public_id)])
    return True
