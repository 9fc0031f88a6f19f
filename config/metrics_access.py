"""Who may read the metrics: the API's `/metrics` and a consumer's metrics port follow one rule.

- With SVC_METRICS_TOKEN set, a scrape sends it (`Authorization: Bearer <token>`), else 401.
- Without it, the metrics are served only to loopback clients of a process that listens on
  loopback only. A process that listens beyond loopback (0.0.0.0, ::, an interface's address)
  refuses them with 403 until a token is set: they show per-number caps and company-wide counts,
  and a wildcard bind, a load balancer or a proxy in front would show them to anyone.

"Listens" is what the process is bound to, not what it was asked for: gunicorn's listeners, every
`--bind` included (each worker records them after the fork, api/gunicorn_settings.py), or the
consumer's bound metrics socket. A process that recorded none (the app served some other way) is
taken as listening beyond loopback. A Unix socket counts as loopback: only this host reaches it.
Each process says at start-up, in one log line, which case it is in.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str


TOKEN_NEEDED = Refusal(401, "unauthorized", "the metrics need SVC_METRICS_TOKEN as `Authorization: Bearer <token>`")
LOOPBACK_ONLY = Refusal(403, "metrics_loopback_only",
                        "without SVC_METRICS_TOKEN the metrics are served on loopback only; set it and send it "
                        "as `Authorization: Bearer <token>`")

_listening: tuple[str, ...] = ()


def host_of(address: Any) -> str:
    """A socket's address (`getsockname()`) as a host: an IP, or `unix:PATH`."""
    if isinstance(address, tuple | list):
        return str(address[0])
    if isinstance(address, bytes):
        address = address.decode(errors="replace")
    return f"unix:{address}"


def is_loopback(host: str) -> bool:
    if host.startswith("unix:"):
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # without an IPv6 scope
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def listening_on(addresses: Iterable[Any]) -> None:
    """Record the addresses this process serves the API on (its sockets' `getsockname()`)."""
    global _listening
    _listening = tuple(host_of(address) for address in addresses)


def listening() -> tuple[str, ...]:
    return _listening


def beyond_loopback(hosts: Iterable[str]) -> list[str]:
    return [host for host in hosts if not is_loopback(host)]


def _loopback_only(hosts: tuple[str, ...]) -> bool:
    return bool(hosts) and not beyond_loopback(hosts)


def refusal(token: str, authorization: str | None, client: str, hosts: Iterable[str]) -> Refusal | None:
    """Why a scrape from `client` with this Authorization header is refused, or None to serve it."""
    if token:
        given = (authorization or "").encode()
        return None if hmac.compare_digest(given, f"Bearer {token}".encode()) else TOKEN_NEEDED
    if _loopback_only(tuple(hosts)) and is_loopback(client):
        return None
    return LOOPBACK_ONLY


def startup_line(what: str, token: str, hosts: Iterable[str]) -> tuple[int, str]:
    """The log level and line that say how `what` is served."""
    hosts = tuple(hosts)
    if token:
        return logging.INFO, f"{what}: served with SVC_METRICS_TOKEN only (Authorization: Bearer)"
    if _loopback_only(hosts):
        return logging.INFO, (f"{what}: served without a token to loopback clients only (listening on "
                              f"{', '.join(hosts)}); set SVC_METRICS_TOKEN to scrape it from elsewhere")
    beyond = ", ".join(beyond_loopback(hosts)) or "an address not recorded"
    return logging.WARNING, (f"{what}: refused (403) until SVC_METRICS_TOKEN is set, since this process "
                             f"listens beyond loopback ({beyond})")
