"""The one database: SQLite under the data dir by default, PostgreSQL when configured.

This module is the only place that knows which engine is in use. Nothing connects at import:
`install_engine` (called by `models.setup.init_db`) installs the engine behind the proxy, and
each request or task opens and closes its own connection with `connection()` (pooled, so that
is cheap).
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote, urlsplit

import peewee
from peewee import Database, DatabaseProxy, __exception_wrapper__
from playhouse.migrations import Runner
from playhouse.pool import MaxConnectionsExceeded, PooledPostgresqlDatabase, PooledSqliteDatabase

from config import Settings
from config.settings import private_data_file

log = logging.getLogger(__name__)
T = TypeVar("T")

db = DatabaseProxy()

MIGRATIONS_DIR = Path(__file__).with_name("migrations")

SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "synchronous": "normal",
    "foreign_keys": 1,
    "cache_size": -16000,
    "busy_timeout": 15000,
}


class _PostgresPool(PooledPostgresqlDatabase):
    """peewee's pool probes the server (`SELECT 1`, a round trip) every time it hands out an idle
    connection: on a short read that doubled the round trips. A connection given back to the pool
    idle less than PROBE_AFTER seconds ago is handed out without the probe; one idle longer is
    probed as before, so a server restart is noticed on the first use after a quiet spell."""

    PROBE_AFTER = 1.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._returned: dict[int, float] = {}  # connection key -> monotonic time it was given back idle
        # Connections in use when one of them was found cut off by the server (a restart cuts
        # them all): each is probed before it is handed out again.
        self.suspect: set[int] = set()

    def _is_closed(self, conn):
        returned = self._returned.pop(self.conn_key(conn), None)
        if (returned is not None and time.monotonic() - returned < self.PROBE_AFTER
                and not conn.closed and self._adapter.txn_status(conn) == self._adapter.txn_idle):
            return False
        return super()._is_closed(conn)

    def _close(self, conn, close_conn=False):
        key = self.conn_key(conn)
        super()._close(conn, close_conn)
        if key in self.suspect:
            self.suspect.discard(key)
        else:
            self._returned[key] = time.monotonic()

    def _execute_cursor(self, sql, params, **cursor_options):
        try:
            return super()._execute_cursor(sql, params, **cursor_options)
        except (peewee.OperationalError, peewee.InterfaceError):
            if self._state.conn is not None:
                self.after_failure(self._state.conn)
            raise

    def after_failure(self, conn) -> None:
        """A statement failed on `conn`. If the server cut it (a restart, its backends killed),
        every other connection of the pool is as dead: the idle ones are closed now and those in
        use are probed when given back, so one failed statement, not one per pooled connection,
        tells a process that the server went away."""
        if not conn.closed:
            return
        with self._pool_lock:
            self.suspect |= set(self._in_use) - {self.conn_key(conn)}
            self._returned.clear()
        self.close_idle()


def _postgres(url: str, pool_size: int) -> PooledPostgresqlDatabase:
    parts = urlsplit(url)
    return _PostgresPool(
        unquote(parts.path.lstrip("/")) or "postgres",
        user=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        max_connections=pool_size,
        stale_timeout=300,
        timeout=30,
        autoconnect=False,
    )


# How a statement that writes begins (a WITH that writes is run as any other statement: the
# writers' turn decides only who goes next, SQLite's own lock still keeps writers apart).
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class _SqlitePool(PooledSqliteDatabase):
    """SQLite admits one writer at a time, and its busy handler makes the others poll: a writer
    that finds the lock taken sleeps 1, 2, 5 … up to 100 ms between tries, so under a steady
    stream of writes a latecomer can wait hundreds of milliseconds while others barge in ahead of
    it (the writes' p99 of bench/load at 300 req/s).

    Writers therefore take turns on an exclusive `flock` of a file beside the database first: a
    write transaction from its BEGIN IMMEDIATE to its end, and a statement that writes outside a
    transaction (an Idempotency-Key's claim, a drain's lease) for that statement. A process's
    writers queue on a lock of the process first, and one of them at a time waits in the kernel,
    which hands the turn on the moment it is given back; SQLite's lock is free by the time it is
    taken.

    The lock is an open file per thread: peewee keeps a transaction per thread, and a `flock`
    belongs to an open file, so two threads of a process exclude each other too. Like a
    connection, it is never carried across a fork (api/gunicorn_settings.py), and the kernel lets
    it go when its process dies. A write transaction must not wait for another thread's write,
    which would now wait for ever (before, it failed after busy_timeout with "database is
    locked").
    """

    def __init__(self, database: str, **kwargs):
        super().__init__(database, **kwargs)
        self._writer_path = database + "-writer"
        self._writer = threading.local()
        # A process's writers queue here first, so one thread of each process waits on the file:
        # the kernel wakes every waiter of a `flock` when it is given back, and with dozens of
        # threads waiting, each hand-over woke them all to find it taken again.
        self._process_turn = threading.Lock()

    def begin(self, lock_type=None):
        self._take_turn()
        try:
            super().begin(lock_type)
        except BaseException:
            self._give_turn()
            raise
        self._writer.held = True

    def commit(self):
        try:
            super().commit()
        finally:
            self._let_writer_go()

    def rollback(self):
        try:
            super().rollback()
        finally:
            self._let_writer_go()

    def turn_for(self, sql: str) -> contextlib.AbstractContextManager:
        """What to hold while running `sql`: the writers' turn when it writes outside a
        transaction (a transaction holds it already), else nothing."""
        if self._state.transactions or not sql.lstrip()[:7].upper().startswith(_WRITES):
            return contextlib.nullcontext()
        return self._turn()

    def _execute_cursor(self, sql, params, **cursor_options):
        with self.turn_for(sql):
            return super()._execute_cursor(sql, params, **cursor_options)

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        self._take_turn()
        try:
            yield
        finally:
            self._give_turn()

    def _take_turn(self) -> None:
        lock = self._writer_file()
        self._process_turn.acquire()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except BaseException:
            self._process_turn.release()
            raise

    def _give_turn(self) -> None:
        fcntl.flock(self._writer.file, fcntl.LOCK_UN)
        self._process_turn.release()

    def _writer_file(self):
        writer = self._writer
        if not hasattr(writer, "file"):
            writer.file = open(private_data_file(Path(self._writer_path)), "rb")  # noqa: SIM115 (kept by the thread)
            writer.held = False
        return writer.file

    def _let_writer_go(self) -> None:
        writer = self._writer
        if getattr(writer, "held", False):
            writer.held = False
            self._give_turn()


def _sqlite(path: Path, pool_size: int) -> PooledSqliteDatabase:
    private_data_file(path)
    # lock_type IMMEDIATE: every transaction takes the write lock at BEGIN, so a second writer
    # waits (on the writers' lock, then busy_timeout) instead of failing mid-transaction with
    # "database is locked".
    return _SqlitePool(
        str(path),
        pragmas=SQLITE_PRAGMAS,
        lock_type="IMMEDIATE",
        returning_clause=True,
        timeout=15,
        max_connections=pool_size,
        stale_timeout=300,
        autoconnect=False,
        check_same_thread=False,
    )


def install_engine(settings: Settings) -> Database:
    """Install the configured engine behind `db` (no connection is opened); the previous one's
    pooled connections are closed."""
    if db.obj is not None:
        with contextlib.suppress(Exception):
            db.obj.close_all()
    if settings.database_url:
        engine = _postgres(settings.database_url, settings.db_pool_size)
    else:
        engine = _sqlite(settings.sqlite_path, settings.db_pool_size)
    db.initialize(engine)
    return engine


def is_postgres() -> bool:
    return isinstance(db.obj, PooledPostgresqlDatabase)


def execute(sql: str, params: tuple | list = ()):
    """Run SQL written once by hand for a hot path (peewee builds a query's SQL anew on every
    call, which costs more than the query itself there). Write `?` placeholders and quoted
    identifiers; the SQL must be valid on both engines."""
    cursor = db.connection().cursor()
    _execute_on(cursor, sql, params)
    return cursor


def placeholders(count: int, width: int = 1) -> str:
    """`count` placeholders for `execute`'s SQL, each a row of `width` when wider than one:
    `?, ?` or `(?, ?), (?, ?)`."""
    row = "(" + ", ".join("?" * width) + ")" if width > 1 else "?"
    return ", ".join([row] * count)


def unindexed(column: str) -> str:
    """`column` for a condition beside `"id" IN (...)`, written so that no index is chosen for it.

    Without statistics (nothing here runs ANALYZE), SQLite takes an equality on an indexed column
    for a few rows: given `"id" IN (four ids or more) AND "status" = ?`, it walks every row of that
    status by the status index (every recipient delivered and never read, every open webhook
    delivery) rather than look the ids up by key, so a batch's cost grew with the table. SQLite
    looks no expression up in an index, and `column || ''` is the column's own text on both
    engines; PostgreSQL plans by its statistics and looks the ids up by key either way."""
    return f"({column} || '')"


def unindexed_field(field):
    """`unindexed` for a query peewee builds: the field as an expression that no index serves."""
    return field.concat("")


def fetch_one(sql: str, params: tuple | list = ()) -> tuple | None:
    """`execute` for a statement read at once: its first row, or None. The statement runs on a
    cursor the thread keeps with its connection rather than one made and dropped per call, which
    is safe because nothing else holds it: its row is read before this returns."""
    engine = db.obj
    conn = engine.connection()
    state = engine._state
    cursor = getattr(state, "row_cursor", None)
    if cursor is None or cursor.connection is not conn:
        cursor = state.row_cursor = conn.cursor()
    _execute_on(cursor, sql, params)
    return cursor.fetchone()


def _execute_on(cursor, sql: str, params: tuple | list) -> None:
    postgres = is_postgres()
    if postgres:
        spelled = _POSTGRES_SPELLING.get(sql)
        if spelled is None:
            spelled = sql.replace("?", "%s")
            if len(_POSTGRES_SPELLING) < _POSTGRES_SPELLINGS_KEPT:
                _POSTGRES_SPELLING[sql] = spelled
        sql = spelled
        inlined = _with_whole_numbers(sql, params)
        if inlined is not None:
            sql, params = inlined, None
    try:
        with contextlib.nullcontext() if postgres else db.obj.turn_for(sql):
            cursor.execute(sql, params)
    except Exception:
        if postgres:
            db.obj.after_failure(cursor.connection)
        with __exception_wrapper__:  # the driver's error as peewee's, as every query raises it
            raise


def _with_whole_numbers(spelled: str, params: tuple | list) -> str | None:
    """The statement with its parameters written in, when every one is a whole number (the ids of
    the hot reads), else None. psycopg2 writes parameters into the text on the client anyway; for
    whole numbers this gives the same text (a negative one after a space, as psycopg2 writes it,
    so that `-` never meets another) without its adaptation machinery, which costs more than the
    rest of a one-row read's client work."""
    literals = []
    for value in params:
        if type(value) is not int:
            return None
        literals.append(str(value) if value >= 0 else f" {value}")
    return spelled % tuple(literals)


def bound_datetime(value):
    """A datetime as the driver binds it, for hot statements that bind one time several times
    (once per row and column): converted once here instead of at each binding. SQLite's driver
    binds a datetime as `isoformat(" ")` text through a Python adapter (about a microsecond a
    value), so this is that text, stored byte for byte the same; PostgreSQL's driver takes the
    object as it is."""
    if value is None or is_postgres():
        return value
    return value.isoformat(" ")


# Each hand-written statement of `execute` in PostgreSQL's placeholders, spelled once. Most are
# fixed strings; the multi-row INSERTs vary with their batch, hence the cap.
_POSTGRES_SPELLING: dict[str, str] = {}
_POSTGRES_SPELLINGS_KEPT = 512


@contextlib.contextmanager
def connection() -> Iterator[None]:
    """Hold a connection for the duration of a request, task or command; nested uses share it."""
    opened = db.connect(reuse_if_open=True)
    try:
        yield
    finally:
        if opened and not db.is_closed():
            db.close()


class RequestConnections:
    """The connection of a request thread (api/app.py), kept by the thread between requests.

    Handing a connection back to the pool and taking it again (the pool's locks, the probe,
    peewee's per-thread state) cost more than the balance read itself. A thread that finished a
    request cleanly keeps its connection checked out for its next request instead, within bounds
    that leave the pool's own checks in force:

    1. A connection idle longer than IDLE_AT_MOST, or kept longer than KEPT_AT_MOST in all, goes
       back to the pool before the next request, which then takes one as usual (the pool probes
       a connection idle for a while and recycles stale ones).
    2. After a request that failed, left a transaction open or swapped its connection, the
       connection goes back to the pool at once, which drops a broken one and rolls back an
       open transaction.
    3. At most half the pool is kept by threads, so other threads and tasks of the process still
       find connections when a process runs more request threads than the pool holds.
    4. A connection the pool no longer counts as in use (`close_all` closed it) is forgotten, and
       one the pool suspects (the server cut another of its connections) goes back to be probed.

    A thread that already holds a connection it did not take here (a test's `connection()`
    block) keeps managing it itself: `take` answers False and `give_back` does nothing.
    """

    IDLE_AT_MOST = 1.0
    KEPT_AT_MOST = 60.0

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._kept_by_engine: dict[int, int] = {}  # id of the engine -> connections kept by threads

    def take(self) -> bool:
        """Make sure this thread holds a connection for its request; True when it is ours to give back."""
        engine, local = db.obj, self._local
        now = time.monotonic()
        if not engine.is_closed():
            if getattr(local, "engine", None) is not engine or local.conn is not engine._state.conn:
                return False
            key = engine.conn_key(local.conn)
            if (now - local.used > self.IDLE_AT_MOST or now - local.since > self.KEPT_AT_MOST
                    or key not in engine._in_use or key in getattr(engine, "suspect", ())):
                self._release(engine, local)
            else:
                return True
        engine.connect()
        local.engine, local.conn, local.since, local.used, local.counted = engine, engine._state.conn, now, now, False
        return True

    def set_aside(self) -> None:
        """For a request that takes no connection here (a health check opens its own, so that a
        stopped database cannot stop it): the connection this thread kept goes back to the pool
        first, or the check would run on it unvetted, and a dead one would fail every check the
        thread answers."""
        engine, local = db.obj, self._local
        if getattr(local, "engine", None) is engine and not engine.is_closed() and local.conn is engine._state.conn:
            self._release(engine, local)

    def give_back(self, succeeded: bool) -> None:
        """The request is done: keep the connection for the next one, or hand it back to the pool."""
        engine, local = db.obj, self._local
        if getattr(local, "engine", None) is not engine:
            return
        if engine.is_closed():  # closed by the request itself
            self._forget(engine, local)
            return
        if (not succeeded or engine.in_transaction() or local.conn is not engine._state.conn
                or not self._count_in(engine, local)):
            self._release(engine, local)
            return
        local.used = time.monotonic()

    def _count_in(self, engine, local) -> bool:
        if local.counted:
            return True
        with self._lock:
            kept = self._kept_by_engine.get(id(engine), 0)
            if kept >= engine._max_connections // 2:
                return False
            self._kept_by_engine[id(engine)] = kept + 1
        local.counted = True
        return True

    def _release(self, engine, local) -> None:
        if engine.conn_key(local.conn) in engine._in_use or engine._state.conn is not local.conn:
            engine.close()
        else:  # close_all took it: this thread's state still names it
            engine._state.reset()
        self._forget(engine, local)

    def _forget(self, engine, local) -> None:
        if local.counted:
            with self._lock:
                self._kept_by_engine[id(engine)] -= 1
        local.engine = local.conn = None
        local.counted = False


request_connections = RequestConnections()


_commit_hooks: contextvars.ContextVar[tuple[Callable[[], None], ...]] = contextvars.ContextVar(
    "commit_hooks", default=())
# Peewee keeps a transaction per thread; so are the hooks waiting for it to commit.
_committed = threading.local()


@contextlib.contextmanager
def atomic() -> Iterator[None]:
    """A write transaction (BEGIN IMMEDIATE on SQLite, a savepoint when nested).

    The outermost one runs the `before_commit` hooks of its context as its last statements, so
    what they write commits with the change or not at all, and the `after_commit` hooks added
    inside it once it has committed.
    """
    outermost = not db.in_transaction()
    try:
        with db.atomic():
            yield
            if outermost:
                for hook in _commit_hooks.get():
                    hook()
    except BaseException:
        if outermost:
            _pending_after_commit().clear()
        raise
    if outermost:
        _run_after_commit()


@contextlib.contextmanager
def before_commit(hook: Callable[[], None]) -> Iterator[None]:
    """Run `hook` inside every outermost transaction committed in this block (this thread or
    task's context only), just before it commits."""
    token = _commit_hooks.set((*_commit_hooks.get(), hook))
    try:
        yield
    finally:
        _commit_hooks.reset(token)


def after_commit(hook: Callable[[], None]) -> None:
    """Run `hook` once the current transaction has committed (at once outside a transaction;
    never if it rolls back). A hook added several times in one transaction runs once.

    For work that must see the change committed, such as asking the queue for a prompt fan-out
    of new events: the change is done by then, so a hook that fails is logged, not raised.
    """
    if not db.in_transaction():
        _run([hook])
        return
    pending = _pending_after_commit()
    if hook not in pending:
        pending.append(hook)


def _pending_after_commit() -> list[Callable[[], None]]:
    if not hasattr(_committed, "hooks"):
        _committed.hooks = []
    return _committed.hooks


def _run_after_commit() -> None:
    pending = _pending_after_commit()
    hooks = list(pending)
    pending.clear()
    _run(hooks)


def _run(hooks: list[Callable[[], None]]) -> None:
    for hook in hooks:
        try:
            hook()
        except Exception:
            log.exception("an after-commit hook failed; what it follows up is committed")


# SQLite reports a bad query as OperationalError too ("no such table"): only these mean the file
# is busy or out of reach.
_SQLITE_UNAVAILABLE = ("locked", "busy", "unable to open", "disk i/o")


def storage_unavailable(error: BaseException) -> bool:
    """The database or Redis could not be reached (a restart, a network blip, a lock held past
    the timeout), as opposed to a bug in a query."""
    # Imported here, not at the top: redis takes a third of a second to import, which every
    # process (a one-shot `svcctl` command too) would pay whether or not it uses Redis.
    import redis

    if isinstance(error, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError | MaxConnectionsExceeded):
        return True
    if not isinstance(error, peewee.OperationalError | peewee.InterfaceError):
        return False
    if isinstance(_driver_error(error), sqlite3.Error):
        return any(marker in str(error).lower() for marker in _SQLITE_UNAVAILABLE)
    return True


def outlast_outage(action: Callable[[], T], seconds: float = 60.0, what: str = "a write") -> T:
    """Run `action`; while the database or Redis cannot be reached, reconnect and run it again,
    for up to `seconds` (then the error is raised). A transaction the database rolled back to
    break a lock conflict (a deadlock: some writer broke the lock order of docs/reliability.md)
    runs again too, after a jittered pause so that two victims do not meet again; it is logged
    with the database's words, since it should not happen.

    For the record of work already done outside (a webhook POSTed, a message handed to the
    platform, a lease to give back, a platform's status batch): neither a restart of the storage
    nor a conflict must make that work look undone, or drop it. `action` runs whole again after a
    failure, so it must be one transaction of its own: calling this inside a transaction only
    runs it once.
    """
    deadline = time.monotonic() + seconds
    delay = 0.2
    conflict_delay = 0.05
    while True:
        try:
            return action()
        except Exception as error:
            if not storage_unavailable(error) or db.in_transaction() or time.monotonic() + delay > deadline:
                raise
            if lock_conflict(error):
                log.warning("%s was rolled back by a lock conflict, trying again: %s", what,
                            str(error).strip()[:300])
                time.sleep(random.uniform(conflict_delay / 2, conflict_delay))
                conflict_delay = min(conflict_delay * 2, 2.0)
                continue
            log.warning("%s waits for the storage to come back: %s", what, str(error).strip()[:200])
        time.sleep(delay)
        delay = min(delay * 2, 2.0)
        # This thread's connection is broken: give it back (the pool drops it) and take a new one.
        with contextlib.suppress(Exception):
            if not db.is_closed():
                db.close()
        with contextlib.suppress(Exception):
            db.connect(reuse_if_open=True)


# PostgreSQL's answers when it rolled a transaction back to break a conflict: a deadlock, a
# serialization failure, a lock it could not take.
_CONFLICT_CODES = frozenset({"40P01", "40001", "55P03"})


def lock_conflict(error: BaseException) -> bool:
    return (isinstance(error, peewee.OperationalError)
            and getattr(_driver_error(error), "pgcode", None) in _CONFLICT_CODES)


def _driver_error(error: BaseException) -> BaseException | None:
    """The driver's exception that peewee's wraps: peewee keeps it as `orig` (its message alone in
    `args`), so the driver's error code is read there, never from the message."""
    return getattr(error, "orig", None)


def upgrade() -> list[str]:
    """Apply pending schema migrations; returns the names applied (none when up to date)."""
    with connection():
        return _migrations().up()


def pending_migrations() -> list[str]:
    """The schema migrations not applied to this database yet, oldest first."""
    with connection():
        return [migration.name for migration in _migrations().status()
                if migration.path is not None and not migration.applied]


def _migrations() -> Runner:
    return Runner(db.obj, directory=str(MIGRATIONS_DIR))


def skip_locked(query):
    """A work-claim subquery: on PostgreSQL it locks the rows it picks and skips rows another
    claimer holds, so concurrent claimers take disjoint work instead of queueing on each other.
    SQLite runs one writer at a time, so it needs no lock (and has no FOR UPDATE)."""
    return query.for_update(skip_locked=True) if is_postgres() else query


def lock_rows(model, ids) -> None:
    """Lock these rows of `model` in ascending id order until commit (PostgreSQL), before a
    transaction writes several of them with statements of its own: two such transactions then
    wait for each other instead of deadlocking (docs/reliability.md, the lock order)."""
    if not ids or not is_postgres():
        return
    ordered = sorted(set(ids))
    table = model._meta.table_name
    for start in range(0, len(ordered), 500):
        chunk = ordered[start:start + 500]
        # Hand-written: every sent batch locks its rows, and peewee would build a node per id.
        execute(f'SELECT "id" FROM "{table}" WHERE "id" IN ({placeholders(len(chunk))}) ORDER BY "id" '
                "FOR UPDATE", chunk).fetchall()


def lock_in_order(query):
    """Lock the rows a SELECT returns, in the order it returns them, until commit (PostgreSQL).

    Writers that update several shared rows lock them first in one agreed order, so two of them
    wait for each other instead of deadlocking. SQLite runs one writer at a time: nothing to do.
    """
    return query.for_update() if is_postgres() else query
