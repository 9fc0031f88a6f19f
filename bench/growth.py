"""bench/growth: how the cost of a read grows with the size of what it reads.

    .venv/bin/python -m bench.growth [--ledger 1000000] [--recipients 5000] [--reads 200] [--postgres URL]

In one process, through the whole API stack (Falcon app, key, rate limits, the database), on a
fresh database: a company with `--ledger` ledger rows reading its balance and its ledger's first
and last pages, and a campaign of `--recipients` recipients listed at its first and last page
(200 a page). Each figure is the median of `--reads` requests: CPU milliseconds (this process's; the
database runs in-process on SQLite) and wall milliseconds. A cost that stays flat
from the small company to the big one, or from page 1 to the last page, grows no faster than
the work of the page itself.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

UNLIMITED = "100000000"


def build(env: dict[str, str], ledger_rows: int, recipients: int):
    from config import load_settings, use_settings
    from models import credits
    from models.accounts import MessagingAccount
    from models.campaigns import Campaign
    from models.db import atomic, connection, execute, init_db, upgrade
    from models.ids import new_id
    from models.tenants import create_key, create_tenant

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
                with atomic():
                    for chunk in range(0, recipients, 500):
                        size = min(500, recipients - chunk)
                        execute('INSERT INTO "campaign_recipient" ("public_id", "campaign_id", "wa_id", "status", '
                                '"attempts", "throttled", "retries", "created_at", "position") VALUES '
                                + ", ".join(["(?, ?, ?, 'sent', 1, 0, 0, ?, ?)"] * size),
                                [value for index in range(chunk, chunk + size)
                                 for value in (new_id("rcp_"), campaign.id, f"5215{index:08d}", now, index + 1)])
                campaign_id = campaign.public_id
    return keys, campaign_id


def cost(client, path: str, key: str, reads: int) -> tuple[float, float]:
    """Median CPU and wall milliseconds of one request."""
    headers = {"Authorization": f"Bearer {key}"}
    for _ in range(5):
        response = client.simulate_get(path, headers=headers)
        assert response.status_code == 200, response.text
    cpu, wall = [], []
    for _ in range(reads):
        started, clock = time.process_time(), time.perf_counter()
        client.simulate_get(path, headers=headers)
        cpu.append((time.process_time() - started) * 1000)
        wall.append((time.perf_counter() - clock) * 1000)
    return statistics.median(cpu), statistics.median(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", type=int, default=1_000_000)
    parser.add_argument("--recipients", type=int, default=5000)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--postgres", help="PostgreSQL URL (default: SQLite in a temp dir)")
    args = parser.parse_args()
    env = {"SVC_DATA_DIR": tempfile.mkdtemp(prefix="bench-growth-"), "SVC_TENANT_RATE_LIMIT": UNLIMITED,
           "SVC_READ_RATE_LIMIT": UNLIMITED}
    if args.postgres:
        env["SVC_DATABASE_URL"] = args.postgres
    started = time.perf_counter()
    keys, campaign_id = build(env, args.ledger, args.recipients)
    print(f"built in {time.perf_counter() - started:.0f}s ({'PostgreSQL' if args.postgres else 'SQLite'})")

    from falcon import testing

    from api.app import create_app
    from config import get_settings

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
    print(f"{'read':<58}{'CPU ms':>10}{'wall ms':>10}")
    for label, path, who in rows:
        cpu, wall = cost(client, path, keys[who], args.reads)
        print(f"{label:<58}{cpu:>10.3f}{wall:>10.3f}", flush=True)


if __name__ == "__main__":
    main()
