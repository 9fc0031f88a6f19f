"""Indexes on a campaign's recipients by the time each was handed to the platform and by the time
each failed: the portal's chart of a campaign's sends counts them per interval from the first, and
the overview's count of today's sends reads only today's rows through both, instead of every
recipient of every campaign still running."""


def up(migrator, db):
    db.execute_sql('CREATE INDEX IF NOT EXISTS "campaign_recipient_campaign_id_sent_at" '
                   'ON "campaign_recipient" ("campaign_id", "sent_at")')
    db.execute_sql('CREATE INDEX IF NOT EXISTS "campaign_recipient_campaign_id_failed_at" '
                   'ON "campaign_recipient" ("campaign_id", "failed_at")')
