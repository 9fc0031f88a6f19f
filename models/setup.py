"""Wiring a process to its storage: the database engine, the counter store and the wallet copies.

Every process that serves or works calls `init_db` once it has its settings (the API app, the
queue consumer, `svcctl`, the tests); nothing in models/ imports this module, and nothing
connects here: each request or task opens its own connection (models/store/db.py).
"""

from __future__ import annotations

import psycopg2
from peewee import Database
from playhouse.pool import PooledPostgresqlDatabase

from config import Settings
from models.store import counters
from models.store.counters import DatabaseCounters, RedisCounters, SharedMemoryCounters
from models.store.db import db, execute, install_engine
from models.tenancy.wallet_copies import CHANNEL as WALLET_CHANNEL
from models.tenancy.wallet_copies import WalletCopies
from models.tenancy.wallet_copies import use as use_wallet_copies

_installed_for: Settings | None = None


def init_db(settings: Settings) -> Database:
    """Install the configured engine behind `models.store.db.db`, the counter store and the wallet
    copies that go with it (no connection is opened); idempotent per settings."""
    global _installed_for
    if db.obj is not None and settings is _installed_for:
        return db.obj
    engine = install_engine(settings)
    _installed_for = settings
    if settings.redis_url:
        # Imported only when configured: redis takes a third of a second to import.
        import redis

        counters.use(RedisCounters(redis.Redis.from_url(settings.redis_url), settings.queue_name))
    elif settings.database_url:
        counters.use(DatabaseCounters())
    else:
        # SQLite is one host's database: a shared-memory table next to it counts for every process.
        counters.use(SharedMemoryCounters(settings.sqlite_path.with_name(settings.sqlite_path.name + ".counters")))
    # Copies of another database's wallets must not answer for this one's.
    use_wallet_copies(WalletCopies(settings.data_dir / "wallet-versions", settings.wallet_copy_seconds,
                                   **(_postgres_wallet_feed(engine) if settings.database_url else {})))
    return engine


def _postgres_wallet_feed(engine: PooledPostgresqlDatabase) -> dict:
    """How a process tells other hosts that a wallet changed, and hears what they tell
    (models/tenancy/wallet_copies.py): NOTIFY after the change's commit, and a connection of its own that
    LISTENs, outside the pool."""

    def announce(tenant_id: int) -> None:
        execute("SELECT pg_notify(?, ?)", (WALLET_CHANNEL, str(tenant_id)))

    def listen():
        return psycopg2.connect(dbname=engine.database, **engine.connect_params)

    return {"announce": announce, "listen": listen}
