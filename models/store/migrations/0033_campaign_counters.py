"""A campaign's recipients counted per status in the row of its credit counters, renamed
`campaign_counters`: every move of a recipient adds to them in its own transaction, so the API,
the portal and the metrics read a campaign's counts from one row instead of counting its
recipients. Existing campaigns are counted once here."""

STATUSES = ("pending", "queued", "sent", "delivered", "read", "failed", "cancelled", "skipped")


def up(migrator, db):
    db.execute_sql('ALTER TABLE "campaign_credits" RENAME TO "campaign_counters"')
    for status in STATUSES:
        db.execute_sql(f'ALTER TABLE "campaign_counters" ADD COLUMN "{status}" INTEGER NOT NULL DEFAULT 0')
    counted = ", ".join(
        f'"{status}" = (SELECT COUNT(*) FROM "campaign_recipient" AS r '
        f"WHERE r.\"campaign_id\" = \"campaign_counters\".\"campaign_id\" AND r.\"status\" = '{status}')"
        for status in STATUSES)
    db.execute_sql(f'UPDATE "campaign_counters" SET {counted}')
