"""Engine heartbeats keep their expiry in double precision: PostgreSQL's REAL (4 bytes) holds
unix seconds only to about two minutes. SQLite's REAL is already 8 bytes."""

from peewee import PostgresqlDatabase


def up(migrator, db):
    if isinstance(db, PostgresqlDatabase):
        db.execute_sql('ALTER TABLE "heartbeat" ALTER COLUMN "expires" TYPE DOUBLE PRECISION')
