"""The sending core: campaigns and single messages, and the one engine that sends both.

- `tables.py`: the tables: campaigns, their credit counters and recipients, single messages.
- `campaigns.py`: a campaign created (credits reserved, recipients inserted), from the request as
  `campaign_inputs.py` checks it; `sendable.py`: the number and template a send may use;
  `campaign_counters.py`: a campaign's credits and recipients per status, moved with the wallet;
  `campaign_events.py`: the fields of its `message.*` and `campaign.*` events;
  `campaign_reads.py`: what a client reads; `campaign_ends.py`: cancelled, completed or failed.
- `messages.py`: a single message inside the 24-hour customer window, created and read.
- `statuses.py`: the platform's status updates applied to recipients and messages.
- `audiences.py`: a campaign's audience read from a CSV or XLSX file and checked against a
  template's phone, variables and URL buttons; `audience_drafts.py` keeps one between the
  portal form's steps.
- `recipient_export.py`: a campaign's recipients written as CSV while they are read.

The engine has the shape of listmonk's manager: an engine loop (`engine.py`) pulls work from
stores (`work.py`'s `Store`: `campaign_store.py` for campaign recipients, `message_store.py` for
single messages), paces every number through its shared schedule of send slots (`slots.py`:
each send started at its slot), hands each message to the messenger (`messenger.py`: the
payloads and the error policy) and records the outcomes back through the store; `recovery.py`
settles claims nobody will answer, and `fairness.py` shares an engine's capacity between
companies and numbers.

The queue only triggers it: `work_arrived()` runs after the commit that created work and calls
what the queue registered with `on_work` (jobs/sending.py: wake the process's engine, or start
one). This module imports none of its submodules, so importing any of them stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable

from models.store.db import after_commit

# The error code of a send nobody can confirm reached the platform: failed, never sent again.
UNCONFIRMED = "send_unconfirmed"
UNCONFIRMED_TEXT = "the platform never confirmed this send; it was not retried, to avoid a duplicate"
# The error code of a recipient whose send came back unsent after its campaign failed.
CAMPAIGN_FAILED = "campaign_failed"
CAMPAIGN_FAILED_TEXT = "its campaign failed before this message could be sent"

_wakers: list[Callable[[], None]] = []


def on_work(waker: Callable[[], None]) -> None:
    """Call `waker` after every commit that created work for the engine."""
    if waker not in _wakers:
        _wakers.append(waker)


def _wake() -> None:
    for waker in list(_wakers):
        waker()


def work_arrived() -> None:
    """New work is being committed in the current transaction: wake the engine once it is."""
    after_commit(_wake)
