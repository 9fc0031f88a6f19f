"""Which webhook targets we are willing to connect to (server-side request forgery guard).

A company chooses the URL we POST to, so without this check it could make the service reach
into its own network (metadata services, databases, admin ports on loopback). A target is
acceptable only when every address its host resolves to is a global unicast address: one
private record among public ones is enough to refuse, since the connection could use it.

The check runs when an endpoint is created and again at every delivery; the delivery then
connects to the address vetted here (see `models.events.delivery.client`), so a DNS answer that
changes between the check and the connection cannot redirect it.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from requests.utils import requote_uri

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

RESOLVE_TIMEOUT = 5.0
# 64:ff9b::/96 (RFC 6052) carries an IPv4 address in its last 32 bits, reachable through NAT64.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Not covered by `is_private` in every Python version: shared address space (CGNAT, RFC 6598)
# and the IPv4 "this network" block.
_EXTRA_BLOCKED = (ipaddress.ip_network("100.64.0.0/10"), ipaddress.ip_network("0.0.0.0/8"))

# getaddrinfo has no timeout of its own; a few threads let a slow resolver be abandoned.
_resolver = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ssrf-resolve")


class UnsafeTarget(Exception):
    """The URL cannot be used as a webhook target; the message says why, for the caller."""


@dataclass(frozen=True)
class Target:
    """A parsed webhook URL: where to connect, and what to verify the certificate against."""

    hostname: str  # lower-case, without brackets for IPv6 literals
    port: int
    path: str  # path and query, as sent in the request line

    @property
    def host_header(self) -> str:
        host = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return host if self.port == 443 else f"{host}:{self.port}"


def parse_target(url: str) -> Target:
    parts = urlsplit(url)
    if parts.scheme != "https":
        raise UnsafeTarget("the URL must start with https://")
    if parts.username is not None or parts.password is not None:
        raise UnsafeTarget("the URL must not contain credentials")
    hostname = (parts.hostname or "").rstrip(".").lower()
    if not hostname:
        raise UnsafeTarget("the URL has no host")
    try:
        # An internationalized name travels as its ASCII (IDNA) form: in DNS, SNI and Host.
        hostname = hostname.encode("idna").decode("ascii")
    except UnicodeError:
        raise UnsafeTarget("the URL's host is not a valid name") from None
    try:
        port = parts.port if parts.port is not None else 443
    except ValueError:
        raise UnsafeTarget("the URL has an invalid port") from None
    if port == 0:
        raise UnsafeTarget("the URL has an invalid port")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    # Sent as written in the request line: spaces, control characters and non-ASCII percent-encoded,
    # as a browser or `requests` sends them.
    return Target(hostname, port, requote_uri(path))


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, Teredo, NAT64), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: IPAddress) -> bool:
    """True only for global unicast addresses: never private, loopback, link-local, multicast,
    reserved, unspecified, CGNAT, documentation or benchmarking ranges."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None and not is_public(embedded):
            return False
    if any(address in network for network in _EXTRA_BLOCKED if network.version == address.version):
        return False
    return not (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


def _getaddrinfo(hostname: str, port: int) -> list[IPAddress]:
    infos = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _canonname, sockaddr in infos:
        # Scoped IPv6 addresses come back as "fe80::1%eth0"; the scope is not part of the address.
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


def resolve(hostname: str, port: int, timeout: float = RESOLVE_TIMEOUT) -> list[IPAddress]:
    """Every address of `hostname`, IPv4 first (the order we try to connect in)."""
    try:
        literal = ipaddress.ip_address(hostname)
    except ValueError:
        literal = None
    if literal is not None:
        return [literal]
    future = _resolver.submit(_getaddrinfo, hostname, port)
    try:
        addresses = future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise UnsafeTarget(f"the host {hostname} could not be resolved in {timeout:g} s") from None
    except (OSError, UnicodeError, ValueError):
        raise UnsafeTarget(f"the host {hostname} cannot be resolved") from None
    if not addresses:
        raise UnsafeTarget(f"the host {hostname} has no address")
    return sorted(addresses, key=lambda address: address.version)


def vet(target: Target, allow_private: bool) -> list[IPAddress]:
    """The addresses we may connect to for `target`; UnsafeTarget when any of them is not public.

    With `allow_private` (local development and tests) every address is accepted.
    """
    addresses = resolve(target.hostname, target.port)
    if allow_private:
        return addresses
    refused = [address for address in addresses if not is_public(address)]
    if refused:
        raise UnsafeTarget(f"the host {target.hostname} resolves to a non-public address ({refused[0]}); "
                           "webhook targets must be reachable on the public internet")
    return addresses
