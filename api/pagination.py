"""The standard paginated envelope (`data`, `links`, `meta`) and the page parameters."""

from __future__ import annotations

import math
from collections.abc import Callable
from urllib.parse import urlencode

import falcon

from api.errors import validation_error
from config import get_settings
from models.store.prepared import Prepared

DEFAULT_PER_PAGE = 50
# Far past any list's end; a bound keeps page numbers inside what the database and JSON encoders
# hold (a page past the end is simply empty).
MAX_PAGE = 1_000_000_000


def _positive_int(req: falcon.Request, name: str, default: int, maximum: int | None) -> int:
    raw = req.get_param(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise validation_error({name: [f"{name} must be a whole number"]}) from None
    if value < 1 or (maximum is not None and value > maximum):
        bound = f"between 1 and {maximum}" if maximum else "at least 1"
        raise validation_error({name: [f"{name} must be {bound}"]})
    return value


def page_params(req: falcon.Request, max_per_page: int = 100) -> tuple[int, int]:
    return (_positive_int(req, "page", 1, MAX_PAGE),
            _positive_int(req, "per_page", DEFAULT_PER_PAGE, max_per_page))


def page_rows(query, page: int, per_page: int, total: int) -> list:
    """The rows of one page; a page past the end is empty without asking the database (whose
    OFFSET cannot hold an arbitrarily large page number)."""
    if (page - 1) * per_page >= total:
        return []
    return list(query.paginate(page, per_page))


def paginate(req: falcon.Request, query, serialize: Callable, max_per_page: int = 100) -> dict:
    """One page of `query` (already ordered) in the contract's envelope."""
    page, per_page = page_params(req, max_per_page)
    total = query.count()
    return page_envelope(req, page, per_page, total, [serialize(row) for row in page_rows(query, page, per_page,
                                                                                          total)])


def prepared_page(req: falcon.Request, count: Prepared, rows: Prepared, args: tuple, serialize: Callable,
                  max_per_page: int = 100, *, rows_args: tuple = (), driver_rows: bool = False) -> dict:
    """`paginate` for a list whose two statements are built once (models/store/prepared.py): `count`
    answers one row holding the list's total for `args`; `rows` takes `args`, then `rows_args`
    (arguments of the rows' statement alone), then the page's LIMIT and OFFSET, and answers the
    page's rows, serialized one by one: as the query returns them, or with `driver_rows` as the
    driver does (`Prepared.driver_rows`: no model object or field conversion per row)."""
    page, per_page = page_params(req, max_per_page)
    (total,) = count.first(*args)
    return _prepared_rows(req, page, per_page, total, rows, (*args, *rows_args), serialize, driver_rows)


def counted_page(req: falcon.Request, total: int, rows: Prepared, args: tuple, serialize: Callable,
                 max_per_page: int = 100, *, driver_rows: bool = False) -> dict:
    """`prepared_page` for a list whose total was read already (with the row it belongs to)."""
    page, per_page = page_params(req, max_per_page)
    return _prepared_rows(req, page, per_page, total, rows, args, serialize, driver_rows)


def _prepared_rows(req: falcon.Request, page: int, per_page: int, total: int, rows: Prepared, args: tuple,
                   serialize: Callable, driver_rows: bool) -> dict:
    offset = (page - 1) * per_page
    if offset >= total:  # past the end: empty without asking the database
        found: list = []
    elif driver_rows:
        found = rows.driver_rows(*args, per_page, offset)
    else:
        found = rows.rows(*args, per_page, offset)
    return page_envelope(req, page, per_page, total, [serialize(row) for row in found])


def page_envelope(req: falcon.Request, page: int, per_page: int, total: int, items: list) -> dict:
    """A page found by other means (an index seek on positions) in the contract's envelope."""
    last_page = max(1, math.ceil(total / per_page))
    first_index = (page - 1) * per_page + 1
    # From the configured public URL, never the request's Host header, which the client chooses:
    # links handed out must not point wherever a forged header says.
    path = get_settings().public_url + req.path
    other_params = {k: v for k, v in req.params.items() if k not in {"page"}}

    def link(number: int | None) -> str | None:
        if number is None:
            return None
        return f"{path}?{urlencode({**other_params, 'page': number})}"

    return {
        "data": items,
        "links": {
            "first": link(1),
            "last": link(last_page),
            "prev": link(page - 1 if page > 1 else None),
            "next": link(page + 1 if page < last_page else None),
        },
        "meta": {
            "current_page": page,
            "from": first_index if items else None,
            "last_page": last_page,
            "path": path,
            "per_page": per_page,
            "to": first_index + len(items) - 1 if items else None,
            "total": total,
        },
    }
