"""Fixtures shared by every test: a real database per test (SQLite, and PostgreSQL + Redis when
reachable), the real Falcon app, the queue in immediate mode, and personas.

Each storage test gets its own database: a copy of a migrated template (a file copy on SQLite,
CREATE DATABASE .. TEMPLATE on PostgreSQL) and its own Redis key prefix. PostgreSQL copies are
made ahead of the tests that take them and dropped behind them (`PostgresCopies`), so no test
waits for the server to write a whole database.

Under pytest-xdist every worker is a session of its own: its own temporary directory, templates
and simulators; ports come from `tests.live.free_port`, which hands each worker ports of its own.
"""

from __future__ import annotations

import os
import queue
import shutil
import tempfile
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="svc-tests-"))
# Before any project import: the queue and settings read the environment once.
os.environ["SVC_DATA_DIR"] = str(_SESSION_DIR / "default")
os.environ.setdefault("SVC_SECRET_KEY", "qVnZ0D4K7wSxg8Yb8w8i3bq0Zp9dfqg3zB5Qk0Yp2pM=")
for _name in ("SVC_DATABASE_URL", "SVC_REDIS_URL"):
    os.environ.pop(_name, None)

import psycopg2  # noqa: E402
import pytest  # noqa: E402
import redis  # noqa: E402
from falcon import testing  # noqa: E402

from config import Settings, load_settings, use_settings  # noqa: E402
from models import setup  # noqa: E402
from models.store import db as database  # noqa: E402
from tests.campaigns_fixtures import counters_disagreeing  # noqa: E402

PG_DSN = os.environ.get("SVC_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
REDIS_URL = os.environ.get("SVC_TEST_REDIS", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() == "true"


def _pg_admin():
    connection = psycopg2.connect(PG_DSN + "/postgres", connect_timeout=2)
    connection.autocommit = True
    return connection


def drop_pg_database(name: str) -> None:
    """DROP DATABASE, even with connections left open to it; it waits for a checkpoint."""
    admin = _pg_admin()
    try:
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


def _reachable(kind: str) -> bool:
    try:
        if kind == "postgres":
            _pg_admin().close()
        else:
            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
        return True
    except Exception:
        return False


def _require(kind: str) -> None:
    if not _reachable(kind):
        if IN_CI:
            pytest.fail(f"{kind} must be reachable in CI")
        pytest.skip(f"{kind} is not reachable")


def pytest_collection_modifyitems(items) -> None:
    """The order files are handed to the workers in (scripts/test, `--dist loadfile` in the order
    collected): the `slow` files first, then the files with the most tests, so that no worker is
    left running a long file alone at the end of the run.

    The timing tests run in lines side by side (scripts/test, `--dist loadgroup`): those that
    time the cores one after another in one line, and beside it those that only wait on the wall
    clock for a deadline, a line per file, which leave the cores to the first line."""
    per_file = Counter(item.path for item in items)
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (item.path not in slow, -per_file[item.path], str(item.path)))
    for item in items:
        timing = item.get_closest_marker("timing")
        if timing is not None:
            line = "cores" if timing.kwargs.get("cores", True) else f"deadlines-{item.path.stem}"
            item.add_marker(pytest.mark.xdist_group(line))


def pytest_terminal_summary(terminalreporter, config) -> None:
    """scripts/test runs the suite in two parts and sums them: each part leaves its counts
    ("passed failed skipped", errors counted as failed) in the file TEST_COUNTS_FILE names."""
    path = os.environ.get("TEST_COUNTS_FILE")
    if not path or hasattr(config, "workerinput"):  # a pytest-xdist worker: its controller counts
        return

    def count(*categories: str) -> int:
        return sum(1 for category in categories for report in terminalreporter.stats.get(category, ())
                   if getattr(report, "count_towards_summary", True))

    Path(path).write_text(f"{count('passed')} {count('failed', 'error')} {count('skipped')}\n")


def base_env(data_dir: Path) -> dict[str, str]:
    return {
        "SVC_DATA_DIR": str(data_dir),
        "SVC_SECRET_KEY": os.environ["SVC_SECRET_KEY"],
        "SVC_APP_SECRET": "test-app-secret",
        "SVC_VERIFY_TOKEN": "test-verify-token",
        "SVC_WEBHOOK_ALLOW_PRIVATE": "true",
    }


@pytest.fixture(scope="session")
def sqlite_template() -> Path:
    directory = _SESSION_DIR / "sqlite-template"
    settings = use_settings(load_settings(base_env(directory)))
    setup.init_db(settings)
    database.upgrade()
    database.db.close_all()
    return settings.sqlite_path


class PostgresCopies:
    """Copies of the template database, made by a thread of their own a few ahead of the tests
    that take them, and dropped (with their Redis keys) by another once a test is done with them.

    A copy is a CREATE DATABASE .. TEMPLATE, which waits for the server to write the whole
    template to its log: a tenth of a second on a quiet machine, half a second or more on a busy
    one, for each of hundreds of tests. Made meanwhile, it costs the tests nothing."""

    AHEAD = 2

    def __init__(self, template: str):
        self.template = template
        self._ready: queue.Queue = queue.Queue(maxsize=self.AHEAD)
        self._done: queue.Queue = queue.Queue()
        self._closing = threading.Event()
        self.failures: list[str] = []
        self._maker = threading.Thread(target=self._make, name="pg-copies-maker", daemon=True)
        self._dropper = threading.Thread(target=self._drop, name="pg-copies-dropper", daemon=True)
        self._maker.start()
        self._dropper.start()

    def take(self) -> str:
        """A fresh copy's name (a failure to make one is raised here, in the test)."""
        made = self._ready.get(timeout=120)
        if isinstance(made, BaseException):
            raise made
        return made

    def give_back(self, name: str, queue_name: str) -> None:
        """The test is done with the copy, and every process it started has stopped."""
        self._done.put((name, queue_name))

    def close(self) -> None:
        """Drop every copy, taken or made ahead; return once they are gone."""
        self._closing.set()
        self._maker.join()
        while not self._ready.empty():
            made = self._ready.get_nowait()
            if isinstance(made, str):
                self._done.put((made, None))
        self._done.put(None)
        self._dropper.join()
        assert not self.failures, f"copies not dropped: {self.failures}"

    def _make(self) -> None:
        admin = _pg_admin()
        try:
            while not self._closing.is_set():
                name = f"svc_t_{uuid.uuid4().hex[:12]}"
                try:
                    admin.cursor().execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
                    made = name
                except Exception as error:  # raised in the test that takes it
                    made = error
                while not self._closing.is_set():
                    try:
                        self._ready.put(made, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                else:
                    if isinstance(made, str):
                        self._done.put((made, None))
        finally:
            admin.close()

    def _drop(self) -> None:
        """Drops what tests gave back, all that is waiting at once: each DROP DATABASE waits for a
        checkpoint, and drops running side by side share one (eight dropped one after another took
        1.5 s on a quiet machine, side by side 0.09 s), so a loaded run's backlog never piles up
        behind the last test."""
        client = redis.Redis.from_url(REDIS_URL)
        try:
            with ThreadPoolExecutor(max_workers=8, thread_name_prefix="pg-copies-drop") as pool:
                closing = False
                while not closing:
                    waiting = [self._done.get()]
                    while True:
                        try:
                            waiting.append(self._done.get_nowait())
                        except queue.Empty:
                            break
                    closing = None in waiting
                    list(pool.map(lambda item: self._drop_one(client, *item), [w for w in waiting if w]))
        finally:
            client.close()

    def _drop_one(self, client: redis.Redis, name: str, queue_name: str | None) -> None:
        try:
            if queue_name:
                for key in client.scan_iter(f"{queue_name}*"):
                    client.delete(key)
            drop_pg_database(name)
        except Exception as error:  # reported when the session closes the copies
            self.failures.append(f"{name}: {error}")


@pytest.fixture(scope="session")
def pg_template():
    _require("postgres")
    name = f"svc_tpl_{uuid.uuid4().hex[:10]}"
    admin = _pg_admin()
    admin.cursor().execute(f'CREATE DATABASE "{name}"')
    settings = use_settings(load_settings({**base_env(_SESSION_DIR / "pg-template"),
                                           "SVC_DATABASE_URL": f"{PG_DSN}/{name}"}))
    setup.init_db(settings)
    database.upgrade()
    database.db.close_all()
    yield name
    admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture(scope="session")
def pg_copies(pg_template):
    copies = PostgresCopies(pg_template)
    yield copies
    copies.close()


def _sqlite_settings(tmp_path: Path, template: Path) -> Settings:
    env = base_env(tmp_path / "data")
    settings = load_settings(env)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(template, settings.sqlite_path)
    return settings


@pytest.fixture(params=["sqlite", "postgres+redis"])
def storage(request, tmp_path):
    """Settings for a fresh, migrated database of each kind, installed for this process."""
    if request.param == "sqlite":
        settings = _sqlite_settings(tmp_path, request.getfixturevalue("sqlite_template"))
        cleanup = None
    else:
        copies = request.getfixturevalue("pg_copies")
        _require("redis")
        name = copies.take()
        settings = load_settings({**base_env(tmp_path / "data"), "SVC_DATABASE_URL": f"{PG_DSN}/{name}",
                                  "SVC_REDIS_URL": REDIS_URL, "SVC_QUEUE_NAME": f"svc-test-{name}"})

        def cleanup():
            copies.give_back(name, settings.queue_name)

    use_settings(settings)
    setup.init_db(settings)
    with database.connection():
        yield settings
    with database.connection():
        # Whatever the test did, every campaign's counters agree with its recipients.
        disagreeing = counters_disagreeing()
    database.db.close_all()
    if cleanup:
        cleanup()
    assert not disagreeing, f"campaigns whose counters differ from their recipients: {disagreeing}"


@pytest.fixture
def sqlite_storage(tmp_path, sqlite_template):
    """SQLite only: for tests about the embedded default itself."""
    settings = use_settings(_sqlite_settings(tmp_path, sqlite_template))
    setup.init_db(settings)
    with database.connection():
        yield settings
    database.db.close_all()


@pytest.fixture(autouse=True)
def immediate_queue():
    """The queue runs its tasks in the test's thread: a dispatch runs to the end, and new events
    are fanned out at once rather than through the queue's per-second coalescing."""
    from jobs import sending, webhooks
    from jobs.queue import huey
    from models.events import outbox
    from models.sending.engine import Settings

    huey.immediate = True
    running = sending.engine_settings
    sending.engine_settings = Settings(session=None, linger=0)
    try:
        with outbox.listening([webhooks.fan_out_task]):
            yield huey
    finally:
        sending.engine_settings = running
        huey.immediate = False


@pytest.fixture
def app(storage):
    from api.app import create_app

    return create_app(storage)


@pytest.fixture
def client(app):
    return testing.TestClient(app)


class Persona:
    """A company with a key: `headers` authenticate as it."""

    def __init__(self, name: str, credits: int = 0, scopes=("all",), **key_options):
        from models.tenancy import credits as wallet
        from models.tenancy.keys import create_key
        from models.tenancy.tenants import create_tenant

        self.tenant = create_tenant(name)
        self.key, self.key_string = create_key(self.tenant, list(scopes), **key_options)
        if credits:
            wallet.grant(self.tenant.id, credits)

    @property
    def id(self) -> int:
        return self.tenant.id

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key_string}"}

    def with_key(self, scopes, **key_options) -> dict[str, str]:
        from models.tenancy.keys import create_key

        _key, key_string = create_key(self.tenant, list(scopes), **key_options)
        return {"Authorization": f"Bearer {key_string}"}


@pytest.fixture
def alice(storage) -> Persona:
    """Owns the resources under test; every scope, 1000 credits."""
    return Persona("Alice Corp", credits=1000)


@pytest.fixture
def charlie(storage) -> Persona:
    """An outsider: another company whose ids must never reach alice's data."""
    return Persona("Charlie Ltd", credits=1000)
