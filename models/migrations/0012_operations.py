"""Operations: the queue consumers' heartbeats."""

from peewee import CharField, DoubleField, IntegerField, Model


class ConsumerHeartbeat(Model):
    name = CharField(max_length=200, primary_key=True)
    host = CharField(max_length=200)
    pid = IntegerField()
    threads = IntegerField()
    periodic = IntegerField(default=0)
    started = DoubleField()
    last_beat = DoubleField()
    stopped = DoubleField(null=True)

    class Meta:
        table_name = "consumer_heartbeat"


def up(migrator, db):
    with db.bind_ctx([ConsumerHeartbeat]):
        db.create_tables([ConsumerHeartbeat])
