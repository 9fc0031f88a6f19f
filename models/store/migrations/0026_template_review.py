"""Templates authored through the service and their review: why the platform rejected one, what
it said when it paused or paced one, and the category it had before the platform moved it.

Existing templates have none of these: they were synced, never reviewed here."""


def up(migrator, db):
    db.execute_sql('ALTER TABLE "template" ADD COLUMN "rejected_reason" VARCHAR(255)')
    db.execute_sql('ALTER TABLE "template" ADD COLUMN "status_detail" VARCHAR(512)')
    db.execute_sql('ALTER TABLE "template" ADD COLUMN "previous_category" VARCHAR(32)')
