"""The languages of the portal: each company's locale (the language its pages fall back to, and
the country its numbers, money and dates are written for) and each portal user's own language.

Existing companies get `en_US`, the portal's language until now; a user's language starts
unset: the browser's decides."""


def up(migrator, db):
    db.execute_sql('ALTER TABLE "tenant" ADD COLUMN "locale" VARCHAR(16) NOT NULL DEFAULT \'en_US\'')
    db.execute_sql('ALTER TABLE "portal_user" ADD COLUMN "language" VARCHAR(8)')
