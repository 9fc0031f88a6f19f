"""The store: the one database, and what every package keeps in it or beside it.

- `db.py`: the database (SQLite or PostgreSQL), each request's or task's connection,
  transactions and their commit hooks, hand-written SQL, the lock helpers, outlasting a storage
  outage, and the schema migrations (`migrations/`, each the frozen SQL of its change).
- `prepared.py`: hot reads whose SQL is built once per process and engine, bound per call.
- `base.py`: the base model every table derives from, and JSON columns.
- `tables.py`: the store's own tables (the counters kept in the database).
- `counters.py`: counters every process shares (rate-limit windows, send slots, engine
  heartbeats) in Redis, the database or shared memory, and the process's store of them.
- `secrets.py`: secrets at rest: the `EncryptedText` column, encrypting and decrypting.

This module imports none of them, so importing one stays cheap.
"""
