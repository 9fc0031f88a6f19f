"""Tenancy: the companies the service works for, and what each one holds on its own.

- `tables.py`: the tables: tenants, API keys, wallets and ledger entries, access requests,
  idempotency records, and the portal's users, invitations, sessions, policies and audit log.
- `tenants.py`: creating and finding a company (with its wallet).
- `keys.py`: API keys: created, rotated and revoked; a request's key authenticated.
- `credits.py`: the wallet and its ledger: reserve, consume, release, refund, grants.
- `wallet_copies.py`: each process's copies of the wallets it read, and what tells it they changed.
- `access_requests.py`: a company asks for access; an administrator approves or rejects.
- `idempotency.py`: Idempotency-Key claims and the responses stored for replay.
- `portal.py`: the company portal's people: users, invitations, sign-in, two-factor, the audit log.
- `sign_in_throttle.py`: how fast a portal email may be tried, per address and per email.

This module imports none of them, so importing one stays cheap.
"""
