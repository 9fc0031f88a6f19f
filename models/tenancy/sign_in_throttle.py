"""How fast a portal email may be tried: passwords and two-factor codes, throttled the way OWASP's
authentication guidance advises, so that guessing is slowed and nobody can lock a user out.

Counted in the counters the API's rate limits use (the database, shared memory or Redis), per
15-minute window:

- an address: LOGIN_ATTEMPTS_PER_ADDRESS attempts, whatever the emails, then 429;
- one email from one address: LOGIN_ATTEMPTS_PER_ADDRESS_EMAIL attempts, then 429 for that email
  from that address only;
- one email from anywhere: past LOGIN_FREE_FAILURES failures, every attempt on it waits before its
  password is checked (LOGIN_FIRST_DELAY, doubling with each further failure, at most
  LOGIN_MAX_DELAY). It is slowed, never refused: the right password from an address that has not
  used up its own attempts still signs in, so strangers guessing at an email cannot keep its user out.

An IPv6 client counts by its /64, the block one host is usually given.
Failures of a user's email and first refusals are written to the company's audit log.
"""

from __future__ import annotations

import hashlib
import ipaddress
import time
from dataclasses import dataclass

from models.store.counters import counters, window_start
from models.tenancy.portal import audit
from models.tenancy.tables import PortalUser

LOGIN_WINDOW = 900
LOGIN_ATTEMPTS_PER_ADDRESS = 50
LOGIN_ATTEMPTS_PER_ADDRESS_EMAIL = 10
LOGIN_FREE_FAILURES = 10
LOGIN_FIRST_DELAY = 1.0
LOGIN_MAX_DELAY = 8.0
# Who a failed attempt is written as: before the password, nobody is known.
ANONYMOUS = "anonymous"
STEPS = ("password", "two_factor", "password_change")


@dataclass(frozen=True)
class Verdict:
    """What the throttle says of one attempt."""

    refused: str | None  # "address" or "address_email": that limit is used up, answer 429 unchecked
    delay: float  # seconds to wait before checking: the email is being guessed at
    retry_after: int  # seconds until the window's counts start again


def _email_key(email: str) -> str:
    return hashlib.sha256(email.strip().lower().encode()).hexdigest()


def _address_key(ip: str | None) -> str:
    try:
        address = ipaddress.ip_address(ip or "")
    except ValueError:
        return ip or "unknown"
    if address.version == 6:
        if address.ipv4_mapped:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def _failures_key(email: str) -> str:
    return f"portal-login:failures:{_email_key(email)}"


def delay_after(failures: int) -> float:
    """The wait before checking an email that failed `failures` times in this window."""
    if failures <= LOGIN_FREE_FAILURES:
        return 0.0
    return min(LOGIN_MAX_DELAY, LOGIN_FIRST_DELAY * 2 ** min(failures - LOGIN_FREE_FAILURES - 1, 16))


def check(email: str, ip: str | None, step: str, now: float | None = None) -> Verdict:
    """Count one attempt of `email` from `ip` at `step` (one of STEPS) and say whether it is
    refused or how long it waits.

    Every attempt counts against the address's limits, not only failures: the counter store only
    counts up, and a check that did not count would let a burst of parallel guesses through before
    any failure landed. The email's own count is of failures (`failed`), and only slows.
    """
    now = time.time() if now is None else now
    address = _address_key(ip)
    limits = {f"portal-login:address:{address}": ("address", LOGIN_ATTEMPTS_PER_ADDRESS),
              f"portal-login:address-email:{address}:{_email_key(email)}": ("address_email",
                                                                            LOGIN_ATTEMPTS_PER_ADDRESS_EMAIL)}
    failures = _failures_key(email)
    counts = counters().incr([*limits, failures], LOGIN_WINDOW, now, amounts={failures: 0})
    retry_after = max(1, int(window_start(LOGIN_WINDOW, now) + LOGIN_WINDOW - now))
    for key, (limit_name, limit) in limits.items():
        if counts[key] > limit:
            if counts[key] == limit + 1:  # the first refusal of the window, not every one
                _audit_attempt(email, ip, step, "session.sign_in_throttled", {"limit": limit_name})
            return Verdict(limit_name, 0.0, retry_after)
    return Verdict(None, delay_after(counts[failures]), retry_after)


def failed(email: str, ip: str | None, step: str, now: float | None = None) -> None:
    """A wrong password or code for `email` at `step` (one of STEPS): counted against the email,
    which slows its next attempts, and written to its company's audit log when it is a user's."""
    counters().incr([_failures_key(email)], LOGIN_WINDOW, now)
    _audit_attempt(email, ip, step, "session.sign_in_failed", {})


def _audit_attempt(email: str, ip: str | None, step: str, action: str, details: dict) -> None:
    user = PortalUser.get_or_none(PortalUser.email == email.strip().lower())
    if user is None:
        return
    # Past the password step the caller has shown the user's password: the attempt is theirs.
    by_user = step != "password"
    audit(user.tenant_id, user if by_user else None, action, user.email, {**details, "step": step}, ip,
          actor=None if by_user else ANONYMOUS)
