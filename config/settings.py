"""The service's settings: every `SVC_*` environment variable, parsed strictly.

A value that does not parse stops start-up with one line naming the variable; nothing else in
the project reads `os.environ`.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

# The contract's cap on a request body (DECISIONS: 8 MiB), enforced by the API worker's reader
# and again by every endpoint.
MAX_BODY_BYTES = 8 * 1024 * 1024
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(Exception):
    """A setting that cannot be used; the message names the variable."""


def _bool(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ConfigError(f"{name}: expected true or false, got {raw!r}")


def _int(name: str, raw: str, minimum: int | None = None, maximum: int | None = None) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}: expected a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}: must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}: must be at most {maximum}, got {value}")
    return value


def _seconds(name: str, raw: str, minimum: float, maximum: float) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}: expected a number of seconds, got {raw!r}") from None
    if not minimum <= value <= maximum:  # NaN fails both
        raise ConfigError(f"{name}: must be from {minimum:g} to {maximum:g} seconds, got {raw.strip()!r}")
    return value


def _url(name: str, raw: str, schemes: tuple[str, ...]) -> str:
    value = raw.strip().rstrip("/")
    parts = urlsplit(value)
    if parts.scheme not in schemes or not parts.netloc:
        raise ConfigError(f"{name}: expected a {' or '.join(schemes)} URL, got {raw!r}")
    return value


def _networks(name: str, raw: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    networks = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(f"{name}: {item!r} is not an IP address or CIDR block") from None
    return tuple(networks)


def _hhmm(name: str, raw: str) -> tuple[int, int]:
    try:
        hours, minutes = (int(part) for part in raw.strip().split(":"))
    except ValueError:
        raise ConfigError(f"{name}: expected HH:MM, got {raw!r}") from None
    if not (0 <= hours <= 24 and 0 <= minutes < 60):
        raise ConfigError(f"{name}: expected HH:MM, got {raw!r}")
    return hours, minutes


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    database_url: str | None = None
    redis_url: str | None = None
    queue_name: str = "svc"
    graph_url: str = "http://127.0.0.1:8090"
    graph_version: str = "v26.0"  # messaging.client.GRAPH_VERSION
    public_url: str = "http://127.0.0.1:8080"
    secret_key: str = ""
    # Every key that may decrypt a secret at rest; the first (`secret_key`) encrypts.
    secret_keys: tuple[str, ...] = ()
    app_id: str = "sim-app"
    app_secret: str = ""
    verify_token: str = ""
    signup_config_id: str = ""
    webhook_allow_private: bool = False
    webhook_ca_bundle: str | None = None
    webhook_retention_days: int = 30
    trusted_proxies: tuple = field(default_factory=tuple)
    db_pool_size: int = 20
    # Section 8's limits per minute; raising them is for load tests and dedicated deployments.
    tenant_rate_limit: int = 1000
    read_rate_limit: int = 600
    write_rate_limit: int = 120
    # Failed authentications (401) per client address and minute before the address is blocked.
    failed_auth_limit: int = 30
    web_concurrency: int = 4
    web_threads: int = 8
    worker_threads: int = 16
    quiet_hours_start: tuple[int, int] = (8, 0)
    quiet_hours_end: tuple[int, int] = (20, 0)
    # The payment gateway (MercadoPago's API, or `svcctl payments sim`) and how links behave.
    payments_gateway_url: str = "http://127.0.0.1:8091"
    payments_link_ttl_hours: int = 72
    payments_notification_tolerance: int = 300  # seconds a signed notification stays acceptable
    payments_reconcile_hours: int = 72  # how far back reconciliation compares
    log_format: str = "text"
    log_level: str = "info"  # one of LOG_LEVELS
    access_log: bool = True
    metrics_token: str = ""
    metrics_bind: tuple[str, int] | None = None
    # How long a process may answer a balance from its copy of the wallet (models/tenancy/wallet_copies.py).
    wallet_copy_seconds: float = 1.0

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "service.db"

    @property
    def queue_path(self) -> Path:
        return self.data_dir / "queue.db"

    @property
    def simulator_mode(self) -> bool:
        host = urlsplit(self.graph_url).hostname or ""
        return host in {"127.0.0.1", "localhost", "::1"}


def _secret_keys(env: Mapping[str, str], data_dir: Path) -> tuple[str, ...]:
    """The Fernet keys for secrets at rest: SVC_SECRET_KEY (comma-separated, newest first while a
    rotation runs), else one key generated once into the data dir."""
    raw = env.get("SVC_SECRET_KEY", "").strip()
    if raw:
        keys = tuple(key.strip() for key in raw.split(",") if key.strip())
        for position, key in enumerate(keys, start=1):
            try:
                Fernet(key.encode())
            except ValueError:
                raise ConfigError(
                    f"SVC_SECRET_KEY: key {position} is not a urlsafe base64 32-byte key (Fernet)") from None
        if len(set(keys)) != len(keys):
            raise ConfigError("SVC_SECRET_KEY: a key is listed twice")
        return keys
    key_file = data_dir / "secret.key"
    if key_file.exists():
        return (key_file.read_text().strip(),)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = Fernet.generate_key().decode()
    # O_EXCL: two processes starting together must end up with the same key, not two.
    try:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return (key_file.read_text().strip(),)
    with os.fdopen(fd, "w") as handle:
        handle.write(key)
    return (key,)


def parse_bind(name: str, raw: str) -> tuple[str, int]:
    """`PORT` (on loopback) or `HOST:PORT`."""
    host, _, port = raw.strip().rpartition(":")
    return host or "127.0.0.1", _int(name, port, minimum=1, maximum=65535)


def private_data_file(path: Path) -> Path:
    """`path` in the data dir, readable by the service's user only: the directory is created 0700
    and the file 0600 (and an existing one closed up to 0600). SQLite gives its -wal and -shm
    files the mode of the database file, so they follow."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except PermissionError:  # another user's file: leave its mode to its owner
        pass
    finally:
        os.close(fd)
    return path


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    data_dir = Path(env.get("SVC_DATA_DIR", "./var")).expanduser().resolve()
    values: dict = {"data_dir": data_dir}

    if database_url := env.get("SVC_DATABASE_URL", "").strip():
        values["database_url"] = _url("SVC_DATABASE_URL", database_url, ("postgresql", "postgres"))
    if redis_url := env.get("SVC_REDIS_URL", "").strip():
        values["redis_url"] = _url("SVC_REDIS_URL", redis_url, ("redis", "rediss", "unix"))
    if queue_name := env.get("SVC_QUEUE_NAME", "").strip():
        values["queue_name"] = queue_name
    if graph_url := env.get("SVC_GRAPH_URL", "").strip():
        values["graph_url"] = _url("SVC_GRAPH_URL", graph_url, ("http", "https"))
    if graph_version := env.get("SVC_GRAPH_VERSION", "").strip():
        values["graph_version"] = graph_version
    if public_url := env.get("SVC_PUBLIC_URL", "").strip():
        values["public_url"] = _url("SVC_PUBLIC_URL", public_url, ("http", "https"))
    for name, attr in (
        ("SVC_APP_ID", "app_id"),
        ("SVC_APP_SECRET", "app_secret"),
        ("SVC_VERIFY_TOKEN", "verify_token"),
        ("SVC_SIGNUP_CONFIG_ID", "signup_config_id"),
    ):
        if name in env:
            values[attr] = env[name].strip()
    if "SVC_WEBHOOK_ALLOW_PRIVATE" in env:
        values["webhook_allow_private"] = _bool("SVC_WEBHOOK_ALLOW_PRIVATE", env["SVC_WEBHOOK_ALLOW_PRIVATE"])
    if ca_bundle := env.get("SVC_WEBHOOK_CA_BUNDLE", "").strip():
        if not Path(ca_bundle).is_file():
            raise ConfigError(f"SVC_WEBHOOK_CA_BUNDLE: no such file {ca_bundle!r}")
        values["webhook_ca_bundle"] = ca_bundle
    if "SVC_WEBHOOK_RETENTION_DAYS" in env:
        values["webhook_retention_days"] = _int(
            "SVC_WEBHOOK_RETENTION_DAYS", env["SVC_WEBHOOK_RETENTION_DAYS"], minimum=1
        )
    if "SVC_TRUSTED_PROXIES" in env:
        values["trusted_proxies"] = _networks("SVC_TRUSTED_PROXIES", env["SVC_TRUSTED_PROXIES"])
    for name, attr, low, high in (
        ("SVC_DB_POOL_SIZE", "db_pool_size", 1, 1000),
        ("SVC_WEB_CONCURRENCY", "web_concurrency", 1, 256),
        ("SVC_WEB_THREADS", "web_threads", 1, 256),
        ("SVC_WORKER_THREADS", "worker_threads", 1, 512),
        ("SVC_TENANT_RATE_LIMIT", "tenant_rate_limit", 1, 100_000_000),
        ("SVC_READ_RATE_LIMIT", "read_rate_limit", 1, 100_000_000),
        ("SVC_WRITE_RATE_LIMIT", "write_rate_limit", 1, 100_000_000),
        ("SVC_FAILED_AUTH_LIMIT", "failed_auth_limit", 1, 100_000_000),
    ):
        if name in env:
            values[attr] = _int(name, env[name], minimum=low, maximum=high)
    if payments_url := env.get("SVC_PAYMENTS_GATEWAY_URL", "").strip():
        values["payments_gateway_url"] = _url("SVC_PAYMENTS_GATEWAY_URL", payments_url, ("http", "https"))
    for name, attr, low, high in (
        ("SVC_PAYMENTS_LINK_TTL_HOURS", "payments_link_ttl_hours", 1, 24 * 90),
        ("SVC_PAYMENTS_NOTIFICATION_TOLERANCE", "payments_notification_tolerance", 10, 86400),
        ("SVC_PAYMENTS_RECONCILE_HOURS", "payments_reconcile_hours", 1, 24 * 90),
    ):
        if name in env:
            values[attr] = _int(name, env[name], minimum=low, maximum=high)
    if "SVC_WALLET_COPY_SECONDS" in env:
        values["wallet_copy_seconds"] = _seconds("SVC_WALLET_COPY_SECONDS", env["SVC_WALLET_COPY_SECONDS"], 0, 60)
    if "SVC_QUIET_HOURS_START" in env:
        values["quiet_hours_start"] = _hhmm("SVC_QUIET_HOURS_START", env["SVC_QUIET_HOURS_START"])
    if "SVC_QUIET_HOURS_END" in env:
        values["quiet_hours_end"] = _hhmm("SVC_QUIET_HOURS_END", env["SVC_QUIET_HOURS_END"])

    if "SVC_LOG_FORMAT" in env:
        log_format = env["SVC_LOG_FORMAT"].strip().lower()
        if log_format not in {"text", "json"}:
            raise ConfigError(f"SVC_LOG_FORMAT: expected text or json, got {env['SVC_LOG_FORMAT']!r}")
        values["log_format"] = log_format
    if "SVC_LOG_LEVEL" in env:
        log_level = env["SVC_LOG_LEVEL"].strip().lower()
        if log_level not in LOG_LEVELS:
            raise ConfigError(f"SVC_LOG_LEVEL: expected one of {', '.join(LOG_LEVELS)}, got {env['SVC_LOG_LEVEL']!r}")
        values["log_level"] = log_level
    if "SVC_ACCESS_LOG" in env:
        values["access_log"] = _bool("SVC_ACCESS_LOG", env["SVC_ACCESS_LOG"])
    if "SVC_METRICS_TOKEN" in env:
        values["metrics_token"] = env["SVC_METRICS_TOKEN"].strip()
    if metrics_port := env.get("SVC_METRICS_PORT", "").strip():
        values["metrics_bind"] = parse_bind("SVC_METRICS_PORT", metrics_port)

    values["secret_keys"] = _secret_keys(env, data_dir)
    values["secret_key"] = values["secret_keys"][0]
    # Derived rather than random so every process of one installation agrees on them, and derived
    # through a KDF so that neither value, nor both together, tells anything about the key.
    # Only the simulator shares the app secret's default; a real platform app always sets SVC_APP_SECRET.
    for name in DERIVED:
        if not values.get(name):
            values[name] = derived_default(values["secret_key"], name)
    return Settings(**values)


# The settings derived from the master key when they are not set: their prefix and HKDF label.
DERIVED = {"verify_token": ("vt_", "platform webhook verify token"),
           "app_secret": ("as_", "simulated platform app secret")}


def derived_default(secret_key: str, name: str) -> str:
    prefix, purpose = DERIVED[name]
    return prefix + derive_secret(secret_key, purpose)


def derive_secret(secret_key: str, purpose: str) -> str:
    """An independent secret for `purpose` from the master key: HKDF-SHA256 with the purpose as
    its label, so values derived for different purposes reveal nothing of the key or of each other."""
    kdf = HKDF(algorithm=hashes.SHA256(), length=24, salt=None, info=b"svc:" + purpose.encode())
    return base64.urlsafe_b64encode(kdf.derive(base64.urlsafe_b64decode(secret_key))).decode().rstrip("=")


_current: Settings | None = None


def get_settings() -> Settings:
    """The process-wide settings, loaded on first use."""
    global _current
    if _current is None:
        _current = load_settings()
    return _current


def use_settings(settings: Settings) -> Settings:
    """Install settings for this process (start-up and tests)."""
    global _current
    _current = settings
    return settings


def random_token(nbytes: int = 24) -> str:
    return secrets.token_urlsafe(nbytes)
