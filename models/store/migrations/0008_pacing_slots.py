"""Send pacing by slots: each number's next free send slot replaces its token bucket."""

from peewee import BigIntegerField, CharField, DoubleField, Model


class PacingSlot(Model):
    """Frozen copy of models.counters.PacingSlot as this migration creates it."""

    key = CharField(max_length=200, primary_key=True)
    next_free = DoubleField()
    version = BigIntegerField(default=0)

    class Meta:
        table_name = "pacing_slot"


def up(migrator, db):
    with PacingSlot.bind_ctx(db):
        db.create_tables([PacingSlot])
    # The buckets only held the last second's pacing: nothing in them outlives a deploy.
    db.execute_sql('DROP TABLE IF EXISTS "pacing_bucket"')
