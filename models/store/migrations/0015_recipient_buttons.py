"""Campaign recipients keep the parameters of their template's buttons (a dynamic URL button's
suffix, a quick-reply button's payload), sent by button index with their message. Null for a
recipient without any: every recipient stored before has none."""


def up(migrator, db):
    db.execute_sql('ALTER TABLE "campaign_recipient" ADD COLUMN "buttons" TEXT')
