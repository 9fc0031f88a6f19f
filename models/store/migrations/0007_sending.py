"""The sending core: a campaign's credit counters move from the campaign row to a row of their
own (added to, so recording sends and status updates never lock the campaign row), and single
messages get the retry columns campaign recipients have (a wait until `not_before`, pair-rate
throttles). Frozen copies of what it touches: later model changes do not change it."""

from peewee import DateTimeField, ForeignKeyField, IntegerField, Model
from playhouse.migrate import migrate

CREDIT_COLUMNS = ("reserved", "consumed", "released", "refunded")


class Campaign(Model):
    class Meta:
        table_name = "campaign"


class CampaignCredits(Model):
    campaign = ForeignKeyField(Campaign, primary_key=True, on_delete="CASCADE")
    reserved = IntegerField(default=0)
    consumed = IntegerField(default=0)
    released = IntegerField(default=0)
    refunded = IntegerField(default=0)

    class Meta:
        table_name = "campaign_credits"


def up(migrator, db):
    with db.bind_ctx([Campaign, CampaignCredits]):
        db.create_tables([CampaignCredits])
    columns = ", ".join(CREDIT_COLUMNS)
    old = ", ".join(f"{column}_credits" for column in CREDIT_COLUMNS)
    db.execute_sql(f'INSERT INTO "campaign_credits" (campaign_id, {columns}) SELECT id, {old} FROM "campaign"')
    migrate(*(migrator.drop_column("campaign", f"{column}_credits") for column in CREDIT_COLUMNS),
            migrator.add_column("message", "throttled", IntegerField(default=0)),
            migrator.add_column("message", "not_before", DateTimeField(null=True)))
