"""A parked platform webhook batch can be dropped by an operator (`svcctl inbox drop`).

- `dropped_at`: when it was dropped. A dropped batch counts as processed (`processed_at` is set
  with it), so no worker takes it and recovery no longer waits for it; its body is kept like any
  processed batch's, until the purge, and this column tells it from one whose statuses were applied."""

from peewee import PostgresqlDatabase


def up(migrator, db):
    timestamp = "TIMESTAMP" if isinstance(db, PostgresqlDatabase) else "DATETIME"
    db.execute_sql(f'ALTER TABLE "platform_webhook_batch" ADD COLUMN "dropped_at" {timestamp}')
