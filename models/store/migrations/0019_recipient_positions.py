"""Each campaign recipient gets its position in its campaign (1, 2, ... in the order the request
listed them), so a page of `GET /campaigns/{id}/recipients` is an index seek on (campaign,
position) instead of an OFFSET that walks every row before it. Existing rows are numbered in id
order, the order they were inserted in."""


def up(migrator, db):
    db.execute_sql('ALTER TABLE "campaign_recipient" ADD COLUMN "position" INTEGER')
    db.execute_sql('UPDATE "campaign_recipient" SET "position" = numbered."n" FROM '
                   '(SELECT "id", ROW_NUMBER() OVER (PARTITION BY "campaign_id" ORDER BY "id") AS "n" '
                   'FROM "campaign_recipient") AS numbered WHERE numbered."id" = "campaign_recipient"."id"')
    db.execute_sql('CREATE UNIQUE INDEX IF NOT EXISTS "campaign_recipient_campaign_position" '
                   'ON "campaign_recipient" ("campaign_id", "position")')
