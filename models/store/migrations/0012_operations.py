"""Operations: the heartbeats of the API workers and queue consumers."""

from peewee import CharField, DoubleField, IntegerField, Model


class ProcessHeartbeat(Model):
    name = CharField(max_length=200, primary_key=True)
    kind = CharField(max_length=16)
    host = CharField(max_length=200)
    pid = IntegerField()
    threads = IntegerField()
    periodic = IntegerField(default=0)
    started = DoubleField()
    last_beat = DoubleField()
    stopped = DoubleField(null=True)

    class Meta:
        table_name = "process_heartbeat"


def up(migrator, db):
    with db.bind_ctx([ProcessHeartbeat]):
        db.create_tables([ProcessHeartbeat])
