"""The client's address, as the API and the portal both see it: the socket peer, or the address
the nearest trusted proxy (SVC_TRUSTED_PROXIES) says it forwarded for."""

from __future__ import annotations

import ipaddress

import falcon

from config.settings import get_settings


def client_ip(req: falcon.Request) -> str:
    """The socket peer, or the X-Forwarded-For hop set by the nearest trusted proxy."""
    peer = req.remote_addr or ""
    trusted = get_settings().trusted_proxies
    if not trusted:
        return peer
    hops = [hop.strip() for hop in (req.get_header("X-Forwarded-For") or "").split(",") if hop.strip()]
    candidate = peer
    # Walk from the nearest hop outwards while each hop is a proxy we trust to have set the next one.
    for hop in reversed(hops):
        try:
            if not any(ipaddress.ip_address(candidate) in network for network in trusted):
                break
        except ValueError:
            break
        candidate = hop
    return candidate
