"""bench/statuses: the worker's cost of the platform's status webhooks, per status and per batch.

    python -m bench.statuses [--sqlite] [--postgres URL] [--numbers 20] [--messages 4000]
                             [--batch 100] [--rounds 3] [--profile FILE]

In one process against a fresh database (SQLite, or one made on the `--postgres` server and
dropped at the end): `--numbers` numbers of 5 companies with one campaign each, `--messages`
recipients in all, every one `sent` with its wamid as the dispatcher leaves it. Their statuses
are then posted as the simulator posts them (`delivered` and `read` for each send, both naming
the user by phone and business-scoped id, grouped per business account, `--batch` a POST, each
`read` a couple of batches after its `delivered`) and applied batch by batch:

1. intake: the POST's body stored as the API stores it (`models.inbox.batches.store_batch`);
2. apply: the worker's run (`models.inbox.batches.process_batch`), from the stored batch to the
   recipient rows, the counters, the ledger and the `message.*` events.

Printed for each round (a fresh set of campaigns): the CPU of each phase per status and per
message (two statuses), and the statements each phase hands the driver per batch. `--profile`
writes a cProfile of the apply phase of the last round to FILE.
"""

from __future__ import annotations

import argparse
import cProfile
import time

from bench.dispatch import PG_ADMIN, TEMPLATE, make_company, prepare, storage_env
from bench.reads import statements_captured

TENANTS = 5


def make_number(tenant_id: int, serial: int):
    from models.clock import utcnow
    from models.ids import new_id
    from models.numbers.tables import MessagingAccount, Template
    from models.store.secrets import encrypt

    account = MessagingAccount.create(
        public_id=new_id("wacc_"), tenant=tenant_id, status="active", connection_mode="coexistence",
        business_account_id=f"2{serial:014d}", phone_id=f"1{serial:014d}", access_token=encrypt("token"),
        subscribed_to_webhooks=True, daily_limit=None, mps=20, connected_at=utcnow(),
        phone_number=f"+1555{serial:07d}")
    Template.create(account=account.id, **TEMPLATE)
    return account


def sent_campaigns(companies, numbers, per_number: int, round_no: int) -> list[tuple]:
    """A campaign per number, every recipient `sent` with a wamid; returns (number, recipient) pairs."""
    from messaging.simulator.users import new_wamid
    from models.clock import utcnow
    from models.sending.campaign_counters import count_moved, move_credits_many
    from models.sending.campaigns import create_campaign
    from models.sending.tables import CampaignRecipient
    from models.store.db import atomic

    sends = []
    for index, account in enumerate(numbers):
        tenant_id = companies[index % TENANTS][0]
        wa_ids = [f"57{round_no:02d}{index:03d}{n:05d}7" for n in range(per_number)]
        campaign = create_campaign(tenant_id, {"account_id": account.public_id, "template_name": "hello_world",
                                               "recipients": [{"wa_id": wa_id} for wa_id in wa_ids]})
        rows = list(CampaignRecipient.select(CampaignRecipient.id, CampaignRecipient.wa_id)
                    .where(CampaignRecipient.campaign == campaign.id).order_by(CampaignRecipient.id))
        now = utcnow()
        with atomic():
            for row in rows:
                wamid = new_wamid(row.wa_id)
                CampaignRecipient.update(status="sent", wam_id=wamid, sent_at=now, message_id=f"msg_{row.id}",
                                         attempts=1).where(CampaignRecipient.id == row.id).execute()
                sends.append((account, row.wa_id, wamid))
            moves: dict[int, dict[str, int]] = {}
            count_moved(moves, campaign.id, "pending", "sent", len(rows))
            move_credits_many({campaign.id: {**moves[campaign.id], "consume": len(rows)}})
    return sends


def webhook_bodies(sends: list[tuple], batch: int) -> list[bytes]:
    """The simulator's POSTs for these sends: each send's `delivered`, and its `read` two flushes
    later, grouped per business account, `batch` statuses a POST."""
    from messaging.simulator.users import contact_entry, user_id_for
    from messaging.simulator.webhook_sender import status_notification
    from messaging.simulator.webhook_values import delivered_and_read

    per_flush = max(1, batch // 2)
    flushes: list[list] = [[] for _ in range((len(sends) + per_flush - 1) // per_flush + 2)]
    for n, (account, wa_id, wamid) in enumerate(sends):
        metadata = {"display_phone_number": account.phone_number.lstrip("+"), "phone_number_id": account.phone_id}
        delivered, read = delivered_and_read(wamid, contact_entry(wa_id, user_id_for(wa_id)), None, "utility")
        flushes[n // per_flush].append((account.business_account_id, metadata, delivered))
        flushes[n // per_flush + 2].append((account.business_account_id, metadata, read))
    return [status_notification(items[start:start + batch])
            for items in flushes for start in range(0, len(items), batch) if items]


def run_round(companies, numbers, per_number: int, batch: int, round_no: int,
              profile: cProfile.Profile | None) -> dict:
    import orjson

    from models.inbox import batches
    from models.store.db import atomic

    bodies = webhook_bodies(sent_campaigns(companies, numbers, per_number, round_no), batch)
    statuses = 2 * per_number * len(numbers)
    intake_cpu = apply_cpu = 0.0
    intake_statements = apply_statements = 0
    for body in bodies:
        started = time.process_time()
        with statements_captured() as ran, atomic():
            stored = batches.store_batch(body, orjson.loads(body))
        intake_cpu += time.process_time() - started
        intake_statements += len(ran)
        started = time.process_time()
        if profile is not None:
            profile.enable()
        with statements_captured() as ran:
            outcome = batches.process_batch(stored.id)
        if profile is not None:
            profile.disable()
        apply_cpu += time.process_time() - started
        apply_statements += len(ran)
        if not outcome.statuses_applied:
            raise SystemExit(f"batch {stored.id} was not applied: see the log")
    return {"statuses": statuses, "batches": len(bodies), "intake_cpu": intake_cpu, "apply_cpu": apply_cpu,
            "intake_statements": intake_statements, "apply_statements": apply_statements}


def check(numbers) -> None:
    """Every recipient read, with one `message.delivered` and one `message.read` each."""
    from models.events.tables import Event
    from models.sending.tables import Campaign, CampaignRecipient

    ids = [account.id for account in numbers]
    left = (CampaignRecipient.select().join(Campaign)
            .where(Campaign.account.in_(ids) & (CampaignRecipient.status != "read")).count())
    total = CampaignRecipient.select().join(Campaign).where(Campaign.account.in_(ids)).count()
    delivered = Event.select().where(Event.name == "message.delivered").count()
    read = Event.select().where(Event.name == "message.read").count()
    if left or delivered != total or read != total:
        raise SystemExit(f"wrong outcome: {left} recipients not read, {delivered} delivered and {read} read "
                         f"events for {total} recipients")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sqlite", action="store_true", help="SQLite instead of PostgreSQL")
    parser.add_argument("--postgres", default=PG_ADMIN, help=f"PostgreSQL server (default {PG_ADMIN})")
    parser.add_argument("--numbers", type=int, default=20)
    parser.add_argument("--messages", type=int, default=4000, help="sends per round, spread over the numbers")
    parser.add_argument("--batch", type=int, default=100, help="statuses per POST (the simulator's default)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", help="write a cProfile of the last round's apply phase here")
    args = parser.parse_args()

    env, cleanup = storage_env(args.sqlite, args.postgres)
    env.pop("SVC_REDIS_URL", None)  # the queue is not used: batches are applied in this process
    try:
        connection = prepare(env)
        from models.store.db import upgrade

        upgrade()
        with connection():
            per_number = max(1, args.messages // args.numbers)
            companies = [make_company(i, args.rounds * args.messages + 10) for i in range(TENANTS)]
            numbers = [make_number(companies[i % TENANTS][0], i) for i in range(args.numbers)]
            print(f"storage: {'SQLite' if args.sqlite else 'PostgreSQL'}; {args.numbers} numbers x {per_number} "
                  f"sends a round, {args.batch} statuses a POST", flush=True)
            for round_no in range(args.rounds):
                profile = cProfile.Profile() if args.profile and round_no == args.rounds - 1 else None
                figures = run_round(companies, numbers, per_number, args.batch, round_no, profile)
                statuses, count = figures["statuses"], figures["batches"]
                print(f"round {round_no + 1}: {statuses} statuses in {count} batches; apply "
                      f"{figures['apply_cpu'] / statuses * 1000:.3f} ms CPU a status "
                      f"({figures['apply_cpu'] / statuses * 2000:.3f} a message), "
                      f"{figures['apply_statements'] / count:.1f} statements a batch; intake "
                      f"{figures['intake_cpu'] / statuses * 1000:.3f} ms a status, "
                      f"{figures['intake_statements'] / count:.1f} statements a batch", flush=True)
                if profile is not None:
                    profile.dump_stats(args.profile)
            check(numbers)
    finally:
        cleanup()


if __name__ == "__main__":
    main()
