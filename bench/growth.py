"""bench/growth: how the cost of a read grows with the size of what it reads.

    .venv/bin/python -m bench.growth [--ledger 1000000] [--recipients 5000] [--reads 200] [--postgres URL]
                                     [--campaigns 100,1000,5000] [--imports 10000,100000] [--skip-reads]

In one process, through the whole API stack (Falcon app, key, rate limits, the database), on a
fresh database: a company with `--ledger` ledger rows reading its balance and its ledger's first
and last pages, and a campaign of `--recipients` recipients listed at its first and last page
(200 a page). Then the same two lists in the company portal, signed in as one of the company's
users: the credits page and the campaign's page (its counters, chart and recipients), first and
last page (50 a page). Each figure is the median of `--reads` requests: CPU milliseconds (this
process's; the database runs in-process on SQLite) and wall milliseconds. A cost that stays flat
from the small company to the big one, or from page 1 to the last page, grows no faster than
the work of the page itself.

Then work against its size, through real processes: campaigns of `--campaigns` recipients each
created with `POST /campaigns` (gunicorn) and dispatched to completion by a `svcctl worker`
against the simulator (one number at 1000 messages/s, so the pace does not bound it), SQLite:
CPU per recipient of the API's process group for the create, of the worker and the simulator for
the dispatch. And `bench.import_debts` for each of `--imports` debts: import and floor CPU per
debt. A cost per unit that does not rise from the small to the large grows no faster than the work.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNLIMITED = "100000000"


def build(env: dict[str, str], ledger_rows: int, recipients: int):
    from config import load_settings, use_settings
    from models.ids import new_id
    from models.numbers.tables import MessagingAccount
    from models.sending.tables import Campaign, CampaignCounters
    from models.setup import init_db
    from models.store.db import atomic, connection, execute, upgrade
    from models.tenancy import credits
    from models.tenancy.keys import create_key
    from models.tenancy.portal import create_user, start_session
    from models.tenancy.tenants import create_tenant

    settings = use_settings(load_settings(env))
    init_db(settings)
    upgrade()
    with connection():
        keys = {}
        for name, rows in (("small", 100), ("big", ledger_rows)):
            tenant = create_tenant(f"{name} company")
            credits.grant(tenant.id, 1000)
            keys[name] = create_key(tenant, ["all"], rate_limit=1_000_000)[1]
            now = time.strftime("%Y-%m-%d %H:%M:%S")
            for start in range(0, rows, 50_000):
                with atomic():
                    count = min(50_000, rows - start)
                    for chunk in range(0, count, 500):
                        size = min(500, count - chunk)
                        first = start + chunk + 2  # after the grant's entry, which is the first
                        execute('INSERT INTO "ledger_entry" ("tenant_id", "type", "amount", "balance_after", '
                                '"reserved_after", "created_at", "position") VALUES '
                                + ", ".join(["(?, 'manual_grant', 0, 1000, 0, ?, ?)"] * size),
                                [value for index in range(size) for value in (tenant.id, now, first + index)])
            execute('UPDATE "wallet" SET "ledger_entries" = ? WHERE "tenant_id" = ?', (rows + 1, tenant.id))
            if name == "big":
                account = MessagingAccount.create(public_id=new_id("wacc_"), tenant=tenant.id)
                campaign = Campaign.create(public_id=new_id("cmp_"), tenant=tenant.id, account=account.id,
                                           template_name="hello_world", template_language="en_US",
                                           total_recipients=recipients, status="completed")
                # Every campaign has its counters (the campaign's page shows them).
                CampaignCounters.create(campaign=campaign.id, reserved=recipients, consumed=recipients, sent=recipients)
                with atomic():
                    for chunk in range(0, recipients, 500):
                        size = min(500, recipients - chunk)
                        execute('INSERT INTO "campaign_recipient" ("public_id", "campaign_id", "wa_id", "status", '
                                '"attempts", "throttled", "retries", "created_at", "position") VALUES '
                                + ", ".join(["(?, ?, ?, 'sent', 1, 0, 0, ?, ?)"] * size),
                                [value for index in range(chunk, chunk + size)
                                 for value in (new_id("rcp_"), campaign.id, f"5215{index:08d}", now, index + 1)])
                campaign_id = campaign.public_id
                _session, portal_token = start_session(
                    create_user(tenant.id, "owner@big.example.com", "owner", "bench growth password"), None, None)
    return keys, portal_token, campaign_id


def cost(client, path: str, reads: int, **credentials) -> tuple[float, float]:
    """Median CPU and wall milliseconds of one request (`credentials`: its headers or cookies)."""
    for _ in range(5):
        response = client.simulate_get(path, **credentials)
        assert response.status_code == 200, response.text
    cpu, wall = [], []
    for _ in range(reads):
        started, clock = time.process_time(), time.perf_counter()
        client.simulate_get(path, **credentials)
        cpu.append((time.process_time() - started) * 1000)
        wall.append((time.perf_counter() - clock) * 1000)
    return statistics.median(cpu), statistics.median(wall)


def campaign_costs(sizes: list[int]) -> None:
    """Create and dispatch one campaign of each size; print CPU per recipient of each side."""
    from bench.common import group_cpu_seconds
    from bench.dispatch import (
        Stack,
        make_company,
        make_number,
        post_campaign,
        prepare,
        recipients,
        storage_env,
        wait_finished,
    )

    env, cleanup = storage_env(use_sqlite=True)
    stack = Stack(env, Path(tempfile.mkdtemp(prefix="bench-growth-logs-")), webhooks=False)
    try:
        stack.start()
        connection = prepare(stack.env)
        with connection():
            tenant_id, key = make_company(0, sum(max(1, 2000 // size) * size for size in sizes) + 1000)
            account = make_number(stack, tenant_id, 1000, "internal")
            post_campaign(stack, key, account.public_id, recipients("55", 10))  # warm-up: the API's imports
            stack.start_workers(1)
            worker, sim, api = stack.workers[0], stack.others[0], stack.others[1]
            print(f"{'campaign':<40}{'create API CPU ms/rcpt':>24}{'dispatch worker CPU ms/rcpt':>30}"
                  f"{'simulator ms/rcpt':>20}{'wall s':>9}")
            for index, size in enumerate([10, *sizes]):  # the first, 10, warms the worker up
                # Small campaigns run several times, one after another: CPU time is counted in
                # 10 ms ticks, coarse against a 100-recipient campaign.
                runs = max(1, 2000 // size) if index else 1
                created = dispatched = simulated = wall = 0.0
                for run in range(runs):
                    before = {name: group_cpu_seconds(process.pid) for name, process in
                              (("api", api), ("worker", worker), ("sim", sim))}
                    started = time.perf_counter()
                    _elapsed, campaign_id = post_campaign(stack, key, account.public_id,
                                                          recipients(f"56{index:02d}{run:02d}", size))
                    created += group_cpu_seconds(api.pid) - before["api"]
                    wait_finished([campaign_id], timeout=600)
                    wall += time.perf_counter() - started
                    dispatched += group_cpu_seconds(worker.pid) - before["worker"]
                    simulated += group_cpu_seconds(sim.pid) - before["sim"]
                if index == 0:
                    continue
                sent = size * runs
                print(f"{f'campaign of {size} recipients (x{runs})':<40}{created / sent * 1000:>24.3f}"
                      f"{dispatched / sent * 1000:>30.3f}{simulated / sent * 1000:>20.3f}{wall / runs:>9.1f}",
                      flush=True)
    finally:
        stack.stop()
        cleanup()


def import_costs(sizes: list[int]) -> None:
    """bench.import_debts at each size; print import and floor CPU per debt."""
    print(f"{'import':<40}{'import CPU us/debt':>24}{'floor CPU us/debt':>20}{'ratio':>8}{'peak RSS MB':>13}")
    for size in sizes:
        result = subprocess.run([sys.executable, "-m", "bench.import_debts", "--debts", str(size)],
                                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                                text=True, check=True)
        report = json.loads(result.stdout)
        print(f"{f'{size} debts x 3 installments':<40}{report['import']['cpu_us_per_debt']:>24.1f}"
              f"{report['floor']['cpu_us_per_debt']:>20.1f}{report['ratio_vs_floor']['cpu']:>8.2f}"
              f"{report['import']['peak_rss_mb']:>13.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", type=int, default=1_000_000)
    parser.add_argument("--recipients", type=int, default=5000)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--postgres", help="PostgreSQL URL (default: SQLite in a temp dir)")
    parser.add_argument("--campaigns", default="100,1000,5000", help="campaign sizes, comma-separated ('' skips)")
    parser.add_argument("--imports", default="10000,100000", help="debt import sizes, comma-separated ('' skips)")
    parser.add_argument("--skip-reads", action="store_true", help="only the campaign and import rows")
    args = parser.parse_args()
    if not args.skip_reads:
        reads(args)
    if args.campaigns:
        campaign_costs([int(size) for size in args.campaigns.split(",")])
    if args.imports:
        import_costs([int(size) for size in args.imports.split(",")])


def reads(args: argparse.Namespace) -> None:
    env = {"SVC_DATA_DIR": tempfile.mkdtemp(prefix="bench-growth-"), "SVC_TENANT_RATE_LIMIT": UNLIMITED,
           "SVC_READ_RATE_LIMIT": UNLIMITED}
    if args.postgres:
        env["SVC_DATABASE_URL"] = args.postgres
    started = time.perf_counter()
    keys, portal_token, campaign_id = build(env, args.ledger, args.recipients)
    print(f"built in {time.perf_counter() - started:.0f}s ({'PostgreSQL' if args.postgres else 'SQLite'})")

    from falcon import testing

    from api.app import create_app
    from config import get_settings
    from portal.web import COOKIE, PER_PAGE

    client = testing.TestClient(create_app(get_settings()))
    ledger_last = -(-args.ledger // 100)
    rows = [
        ("GET /credits/balance, 100 ledger rows", "/api/v1/credits/balance", "small"),
        (f"GET /credits/balance, {args.ledger} ledger rows", "/api/v1/credits/balance", "big"),
        ("GET /credits/ledger page 1 (100), 100 rows", "/api/v1/credits/ledger?per_page=100", "small"),
        (f"GET /credits/ledger page 1 (100), {args.ledger} rows", "/api/v1/credits/ledger?per_page=100", "big"),
        (f"GET /credits/ledger page {ledger_last} (last), {args.ledger} rows",
         f"/api/v1/credits/ledger?per_page=100&page={ledger_last}", "big"),
        (f"GET recipients page 1 (200) of {args.recipients}",
         f"/api/v1/campaigns/{campaign_id}/recipients?per_page=200", "big"),
        (f"GET recipients last page (200) of {args.recipients}",
         f"/api/v1/campaigns/{campaign_id}/recipients?per_page=200&page={-(-args.recipients // 200)}", "big"),
    ]
    # The deepest full page: the big company's ledger also holds its first grant, alone on the
    # last page when the ledger is a whole number of pages, and a page of one row renders less.
    portal_ledger_deepest = (args.ledger + 1) // PER_PAGE
    portal_recipients_last = -(-args.recipients // PER_PAGE)
    portal_rows = [
        (f"portal credits page 1 ({PER_PAGE}), {args.ledger} rows", "/portal/credits"),
        (f"portal credits page {portal_ledger_deepest} (last full), {args.ledger} rows",
         f"/portal/credits?page={portal_ledger_deepest}"),
        (f"portal campaign page, recipients page 1 ({PER_PAGE}) of {args.recipients}",
         f"/portal/campaigns/{campaign_id}"),
        (f"portal campaign page, recipients page {portal_recipients_last} (last) of {args.recipients}",
         f"/portal/campaigns/{campaign_id}?page={portal_recipients_last}"),
    ]
    print(f"{'read':<72}{'CPU ms':>10}{'wall ms':>10}")
    for label, path, who in rows:
        cpu, wall = cost(client, path, args.reads, headers={"Authorization": f"Bearer {keys[who]}"})
        print(f"{label:<72}{cpu:>10.3f}{wall:>10.3f}", flush=True)
    for label, path in portal_rows:
        cpu, wall = cost(client, path, args.reads, cookies={COOKIE: portal_token})
        print(f"{label:<72}{cpu:>10.3f}{wall:>10.3f}", flush=True)


if __name__ == "__main__":
    main()
