"""A send-started mark on campaign recipients and single messages: when the engine was about to
hand the claimed row to the platform. Recovery tells a claim whose HTTP call may have been in
flight (started: only the platform's status webhook can say whether it arrived) from one that was
only claimed (never started: safe to send again).

A claim an earlier release left unanswered may have been on the wire: it counts as started, so
recovery settles it as before and never sends it again."""

from peewee import PostgresqlDatabase


def up(migrator, db):
    kind = "TIMESTAMP" if isinstance(db, PostgresqlDatabase) else "DATETIME"
    for table in ("campaign_recipient", "message"):
        db.execute_sql(f'ALTER TABLE "{table}" ADD COLUMN "send_started_at" {kind}')
        db.execute_sql(f'UPDATE "{table}" SET "send_started_at" = "claimed_at" '
                       "WHERE \"status\" = 'queued' AND \"claim_token\" IS NOT NULL")
