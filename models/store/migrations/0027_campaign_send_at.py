"""A campaign can be scheduled: `send_at` is when it starts (null: as soon as it is created).

A scheduled campaign stays `queued`, its credits reserved, until then; the sending engine leaves
it alone before that time (models/sending/campaign_store.py) and the queue starts it on time
(jobs/campaigns.py). Existing campaigns have none: they were all sent at once."""

from peewee import PostgresqlDatabase


def up(migrator, db):
    timestamp = "TIMESTAMP" if isinstance(db, PostgresqlDatabase) else "DATETIME"
    db.execute_sql(f'ALTER TABLE "campaign" ADD COLUMN "send_at" {timestamp}')
