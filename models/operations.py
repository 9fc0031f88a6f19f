"""What an operator watches: each process's heartbeat (written by every API worker and
consumer), and the service's state read from the database at the moment it is asked for: work
in flight, backlogs and their age, per-number pace, credits held.

Nothing here is counted on the hot path: the metrics that describe state (as opposed to events
such as a request or a send) are these queries, run at scrape time or by `svcctl status`.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

from peewee import Case, CharField, DoubleField, IntegerField, fn

from models.clock import isoformat, to_utc_naive, utcnow
from models.store.base import BaseModel
from models.store.db import MIGRATIONS_DIR, connection, db

log = logging.getLogger("operations")

HEARTBEAT_SECONDS = 5.0
# A process that has not beaten for this long is dead (three beats missed).
DEAD_AFTER_SECONDS = 3 * HEARTBEAT_SECONDS
# A process stopped or dead for this long is forgotten: long enough to be noticed (and alerted
# on), short enough that one crash does not read as a lasting fault.
FORGET_AFTER_SECONDS = 3600
PACE_WINDOW_SECONDS = 10
API, WORKER = "api", "worker"


class ProcessHeartbeat(BaseModel):
    """One API worker or queue consumer: written every HEARTBEAT_SECONDS, and at a clean stop.

    (The counters' `beat` / `alive` answer "is this key alive" but cannot list who beats, nor
    tell when a dead one last did, which is what an operator asks.)
    """

    name = CharField(max_length=200, primary_key=True)  # host:pid
    kind = CharField(max_length=16)  # api or worker
    host = CharField(max_length=200)
    pid = IntegerField()
    threads = IntegerField()
    periodic = IntegerField(default=0)  # 1 for the consumer that schedules the periodic tasks
    started = DoubleField()  # unix seconds
    last_beat = DoubleField()
    stopped = DoubleField(null=True)  # a clean stop; a dead process never writes it


TABLES = [ProcessHeartbeat]


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def beat(name: str, kind: str, threads: int, periodic: bool, started: float) -> None:
    """The process is alive now (the row is written whole, so a first beat that failed, during a
    storage restart say, costs nothing)."""
    now = time.time()
    host, _, pid = name.rpartition(":")
    (ProcessHeartbeat.insert(name=name, kind=kind, host=host, pid=int(pid), threads=threads,
                             periodic=int(periodic), started=started, last_beat=now, stopped=None)
     .on_conflict(conflict_target=[ProcessHeartbeat.name],
                  update={ProcessHeartbeat.kind: kind, ProcessHeartbeat.started: started,
                          ProcessHeartbeat.last_beat: now, ProcessHeartbeat.stopped: None,
                          ProcessHeartbeat.threads: threads, ProcessHeartbeat.periodic: int(periodic)})
     .execute())


def stopped(name: str) -> None:
    ProcessHeartbeat.update(stopped=time.time()).where(ProcessHeartbeat.name == name).execute()


def forget_old_processes() -> int:
    return ProcessHeartbeat.delete().where(ProcessHeartbeat.last_beat < time.time() - FORGET_AFTER_SECONDS).execute()


@dataclass
class Process:
    name: str
    kind: str
    state: str  # alive, dead, stopped
    threads: int
    periodic: bool
    started: float
    last_beat: float

    def as_dict(self, now: float) -> dict:
        return {"name": self.name, "kind": self.kind, "state": self.state, "threads": self.threads,
                "periodic": self.periodic, "started_at": _iso(self.started), "last_beat_at": _iso(self.last_beat),
                "seconds_since_beat": round(now - self.last_beat, 1)}


def _iso(unix: float) -> str:
    return isoformat(dt.datetime.fromtimestamp(unix, dt.UTC))


def processes(now: float | None = None) -> list[Process]:
    """The processes heard from in the last FORGET_AFTER_SECONDS: consumers first, then API workers."""
    now = time.time() if now is None else now
    found = []
    recent = ProcessHeartbeat.last_beat > now - FORGET_AFTER_SECONDS
    rows = ProcessHeartbeat.select().where(recent).order_by(ProcessHeartbeat.kind.desc(), ProcessHeartbeat.started)
    for row in rows:
        if row.stopped is not None:
            state = "stopped"
        elif now - row.last_beat > DEAD_AFTER_SECONDS:
            state = "dead"
        else:
            state = "alive"
        found.append(Process(row.name, row.kind, state, row.threads, bool(row.periodic), row.started, row.last_beat))
    return found


class Heartbeat:
    """Writes this process's heartbeat every HEARTBEAT_SECONDS from a thread of its own, so a dead
    or wedged API worker or consumer shows in `svcctl status` and `svc_processes{state="dead"}`."""

    def __init__(self, kind: str, threads: int, periodic: bool = False):
        self.name = process_name()
        self.kind = kind
        self.threads = threads
        self.periodic = periodic
        self.started = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._beat()
        try:
            with connection():
                forget_old_processes()
        except Exception as error:
            log.warning("old heartbeats not pruned: %s", str(error).strip()[:200])
        self._thread.start()
        return self

    def _beat(self) -> None:
        try:
            with connection():
                beat(self.name, self.kind, self.threads, self.periodic, self.started)
        except Exception as error:  # a storage restart: the next beat tries again
            log.warning("heartbeat not written: %s", str(error).strip()[:200])

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            self._beat()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            with connection():
                stopped(self.name)
        except Exception as error:
            log.warning("clean stop not recorded: %s", str(error).strip()[:200])


def migrations_pending() -> list[str]:
    """Migration files not applied to the database yet."""
    from playhouse.migrations import Runner

    return [migration.name for migration in Runner(db.obj, directory=str(MIGRATIONS_DIR)).status()
            if migration.applied is None]


# --- state, counted at the moment it is asked for ------------------------------------------


def _age_seconds(oldest: dt.datetime | str | None, now: dt.datetime) -> float:
    """Seconds since `oldest`: an aggregate (MIN) of a timestamp, which SQLite returns as text."""
    if oldest is None:
        return 0.0
    if isinstance(oldest, str):
        oldest = dt.datetime.fromisoformat(oldest)
    return max(0.0, (to_utc_naive(now) - to_utc_naive(oldest)).total_seconds())


def campaigns_by_status() -> dict[str, int]:
    from models.sending.tables import Campaign

    rows = Campaign.select(Campaign.status, fn.COUNT(Campaign.id)).group_by(Campaign.status).tuples()
    return dict(rows)


def active_recipients_by_status() -> dict[str, int]:
    """Recipients of campaigns still running, by status (finished campaigns no longer move)."""
    from models.sending.tables import ACTIVE_STATUSES, Campaign, CampaignRecipient

    active = Campaign.select(Campaign.id).where(Campaign.status.in_(ACTIVE_STATUSES))
    rows = (CampaignRecipient.select(CampaignRecipient.status, fn.COUNT(CampaignRecipient.id))
            .where(CampaignRecipient.campaign.in_(active)).group_by(CampaignRecipient.status).tuples())
    return dict(rows)


def messages_in_flight() -> dict[str, int]:
    """Single messages not handed to the platform yet: waiting, or claimed by a sender."""
    from models.sending.tables import Message

    rows = (Message.select(Message.claim_token.is_null(), fn.COUNT(Message.id)).where(Message.status == "queued")
            .group_by(Message.claim_token.is_null()).tuples())
    counts = {"waiting": 0, "sending": 0}
    for unclaimed, count in rows:
        counts["waiting" if unclaimed else "sending"] += count
    return counts


def credits_reserved_by_tenant() -> dict[str, int]:
    from models.tenancy.tables import Tenant, Wallet

    rows = (Wallet.select(Tenant.public_id, Wallet.reserved).join(Tenant)
            .where(Wallet.reserved > 0).order_by(Wallet.reserved.desc()).tuples())
    return dict(rows)


def outbox() -> dict[str, float]:
    """Events not fanned out yet, and deliveries not delivered yet, with the age of the oldest."""
    from models.events.tables import OPEN_STATUSES, Event, WebhookDelivery

    now = utcnow()
    events, oldest_event = (Event.select(fn.COUNT(Event.id), fn.MIN(Event.created_at))
                            .where(Event.fanned_out_at.is_null()).tuples().get())
    deliveries, oldest_delivery = (WebhookDelivery.select(fn.COUNT(WebhookDelivery.id),
                                                          fn.MIN(WebhookDelivery.created_at))
                                   .where(WebhookDelivery.status.in_(OPEN_STATUSES)).tuples().get())
    return {"events_pending": events or 0, "oldest_event_age_seconds": _age_seconds(oldest_event, now),
            "deliveries_pending": deliveries or 0,
            "oldest_delivery_age_seconds": _age_seconds(oldest_delivery, now)}


def webhook_backlog_by_endpoint() -> list[dict]:
    """Each endpoint with open deliveries: how many, how many failed at least once, the oldest."""
    from models.events.tables import OPEN_STATUSES, WebhookDelivery, WebhookEndpoint
    from models.tenancy.tables import Tenant

    now = utcnow()
    failing = fn.SUM(Case(None, [(WebhookDelivery.status == "failed", 1)], 0))
    rows = (WebhookDelivery
            .select(WebhookEndpoint.public_id, Tenant.public_id, WebhookEndpoint.url,
                    fn.COUNT(WebhookDelivery.id), failing, fn.MIN(WebhookDelivery.created_at),
                    WebhookEndpoint.last_failure_at)
            .join(WebhookEndpoint).switch(WebhookDelivery).join(Tenant)
            .where(WebhookDelivery.status.in_(OPEN_STATUSES))
            .group_by(WebhookEndpoint.public_id, Tenant.public_id, WebhookEndpoint.url,
                      WebhookEndpoint.last_failure_at)
            .order_by(fn.COUNT(WebhookDelivery.id).desc()).tuples())
    return [{"endpoint": endpoint, "tenant": tenant, "url": url, "pending": pending, "failing": int(failed or 0),
             "oldest_age_seconds": round(_age_seconds(oldest, now), 1),
             "last_failure_at": isoformat(last_failure) if last_failure else None}
            for endpoint, tenant, url, pending, failed, oldest, last_failure in rows]


def number_caps() -> dict[str, int]:
    """Each connected number's send cap (messages per second), by its platform phone number id."""
    from models.numbers.tables import MessagingAccount

    return dict(MessagingAccount.select(MessagingAccount.phone_id, MessagingAccount.mps)
                .where(MessagingAccount.phone_id.is_null(False) & (MessagingAccount.status == "active")).tuples())


def number_pace(window_seconds: int = PACE_WINDOW_SECONDS) -> list[dict]:
    """Each number sending a running campaign: messages per second over the last window against
    its cap. (Running campaigns only, so the read stays on the recipients' campaign index.)"""
    from models.numbers.tables import MessagingAccount
    from models.sending.tables import ACTIVE_STATUSES, Campaign, CampaignRecipient

    since = utcnow() - dt.timedelta(seconds=window_seconds)
    active = Campaign.select(Campaign.id).where(Campaign.status.in_(ACTIVE_STATUSES))
    rows = (CampaignRecipient
            .select(MessagingAccount.public_id, MessagingAccount.phone_id, MessagingAccount.mps,
                    fn.COUNT(CampaignRecipient.id))
            .join(Campaign, on=(CampaignRecipient.campaign == Campaign.id))
            .join(MessagingAccount, on=(Campaign.account == MessagingAccount.id))
            .where(CampaignRecipient.campaign.in_(active) & (CampaignRecipient.sent_at >= since))
            .group_by(MessagingAccount.public_id, MessagingAccount.phone_id, MessagingAccount.mps)
            .order_by(MessagingAccount.public_id).tuples())
    return [{"number": number, "phone_id": phone_id, "rate": round(sent / window_seconds, 2), "cap": cap}
            for number, phone_id, cap, sent in rows]


def running_campaigns(window_seconds: int = PACE_WINDOW_SECONDS) -> list[dict]:
    from models.sending.tables import Campaign, CampaignRecipient
    from models.tenancy.tables import Tenant

    since = utcnow() - dt.timedelta(seconds=window_seconds)
    recent = (CampaignRecipient.select(fn.COUNT(CampaignRecipient.id))
              .where((CampaignRecipient.campaign == Campaign.id) & (CampaignRecipient.sent_at >= since)))
    done = (CampaignRecipient.select(fn.COUNT(CampaignRecipient.id))
            .where((CampaignRecipient.campaign == Campaign.id)
                   & CampaignRecipient.status.not_in(("pending", "queued"))))
    rows = (Campaign.select(Campaign.public_id, Tenant.public_id, Campaign.status, Campaign.total_recipients,
                            done.alias("done"), recent.alias("recent"))
            .join(Tenant).where(Campaign.status == "processing").order_by(Campaign.id).tuples())
    return [{"campaign": campaign, "tenant": tenant, "status": status, "total": total, "done": done_count,
             "rate": round(recent_count / window_seconds, 2)}
            for campaign, tenant, status, total, done_count, recent_count in rows]


def platform_webhooks() -> dict[str, float]:
    from models.numbers.tables import PlatformWebhookBatch

    now = utcnow()
    pending, oldest = (PlatformWebhookBatch.select(fn.COUNT(PlatformWebhookBatch.id),
                                                   fn.MIN(PlatformWebhookBatch.received_at))
                       .where(PlatformWebhookBatch.processed_at.is_null()).tuples().get())
    return {"batches_pending": pending or 0, "oldest_batch_age_seconds": _age_seconds(oldest, now)}


def debts_by_status() -> dict[str, int]:
    from models.receivables.tables import Debt

    return dict(Debt.select(Debt.status, fn.COUNT(Debt.id)).group_by(Debt.status).tuples())
