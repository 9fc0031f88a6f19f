"""Time in one convention: naive UTC datetimes in storage, ISO 8601 with offset on the wire."""

from __future__ import annotations

import datetime as dt


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def isoformat(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:  # naive values are UTC
        return value.isoformat() + "Z"
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def stored_isoformat(value: dt.datetime | str | None) -> str | None:
    """`isoformat` of a naive UTC timestamp as the driver hands it over: SQLite's text (what its
    adapter wrote, `isoformat(" ")`: `2026-11-28 10:33:36.123456`) or PostgreSQL's naive datetime.
    The same text as the model's value through `isoformat`, for a fraction of the work: hot reads
    write many timestamps a page."""
    if value is None:
        return None
    if type(value) is str:
        # The adapter writes a fraction only when there is one, of six digits: that text is the
        # answer but for the separator and the zone.
        if value[10:11] == " " and (len(value) == 19 or (len(value) == 26 and value[19] == "."
                                                         and value[20:] != "000000")):
            return f"{value[:10]}T{value[11:]}Z"
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is not None:
        return isoformat(value)
    return value.isoformat() + "Z"


def to_utc_naive(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        return value
    return value.astimezone(dt.UTC).replace(tzinfo=None)
