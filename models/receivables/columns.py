"""A block of CSV debts checked a column at a time: the import's road for plainly valid files.

`plain_csv_spec` checks a debt cell by cell in Python, some fifty cells a debt. For a block of
debts this module makes each check one pass of a built-in over a whole column (a length, a
`str.isdigit` of the joined cells, a set of the distinct values, a `map` of a conversion), so
the interpreter runs a few statements a column instead of a few a cell (bench/import_debts.py).

Like the other plain roads (models/receivables/inputs.py) it may give up but never decides: it
accepts a block only when every debt in it is one `plain_csv_spec` accepts, and
`DebtColumns.specs()` are the specs `plain_csv_spec` builds (tests/test_receivables_columns.py).
Anything else, a blank line, a bad cell, a debt without installments, gives None, and the
block is read debt by debt as before.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from itertools import chain, compress, count, repeat
from operator import add, eq, itemgetter, lt, mul, ne, sub

from models.receivables.inputs import (
    CSV_BOOLEANS,
    DEBT_TYPES,
    INSTALLMENT_STATES,
    MAX_INSTALLMENTS,
    MAX_VERSION,
    MINOR_SCALE,
    PLAIN_CURRENCIES,
    PLAIN_DATES,
    DebtorSpec,
    DebtSpec,
    InstallmentSpec,
    plain_cells_text,
    plain_currency,
    plain_date,
    plain_minor,
    plain_phone,
    plain_timestamp,
)
from models.receivables.money import MAX_MINOR

_KINDS = frozenset(("", *DEBT_TYPES))
_STATUSES = frozenset(("", *INSTALLMENT_STATES))
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
# Columns of free text, stripped here; every other column's check refuses a cell with spaces around it.
_STRIPPED = frozenset(("external_id", "account_id", "deudor_nombre", "deudor_documento", "referencia",
                       "external_updated_at"))


@dataclass(slots=True)
class DebtColumns:
    """Debts read from a CSV block, every one plainly valid, as columns: one entry per debt in the
    first group, one per installment row (in file order) in the second."""

    starts: list[int]  # each debt's first row
    counts: list[int]  # each debt's rows
    external_ids: list[str]
    account_ids: list[str]
    names: list[str]
    documents: list[str | None]
    phones: list[str | None]  # as stored
    currencies: list[str]
    original_amounts: list[int]  # minor units
    balances: list[int]
    versions: list[int | None]
    updated_ats: list[dt.datetime | None]  # naive UTC
    references: list[str | None]
    kinds: list[str | None]
    auto_sends: list[bool | None]

    row_debts: list[str]  # the external_id of the row's debt
    installment_ids: list[str]
    numbers: list[int]
    amounts: list[int]
    due_dates: list[dt.date]
    statuses: list[str]  # as declared, "" when the cell is empty

    # Where the rows end in the file, for `lines`: the line each row ends on, and the line before.
    ends: list[int]
    before: int

    @property
    def row_count(self) -> int:
        return len(self.row_debts)

    @property
    def lines(self) -> list[int]:
        """Each debt's first line."""
        return [(self.ends[start - 1] if start else self.before) + 1 for start in self.starts]

    def specs(self) -> list[DebtSpec]:
        """Each debt's spec, as `plain_csv_spec` builds it from the debt's cells."""
        installments = list(map(InstallmentSpec, self.installment_ids, self.numbers, self.amounts, self.due_dates,
                                [status or None for status in self.statuses]))
        specs, start = [], 0
        for (external_id, account_id, name, document, phone, currency, original, balance, version, updated_at,
             reference, kind, auto_send, rows) in zip(
                self.external_ids, self.account_ids, self.names, self.documents, self.phones, self.currencies,
                self.original_amounts, self.balances, self.versions, self.updated_ats, self.references, self.kinds,
                self.auto_sends, self.counts, strict=True):
            specs.append(DebtSpec(external_id, account_id, DebtorSpec(name, document, phone), currency, original,
                                  balance, version, updated_at, reference, True, kind, auto_send,
                                  installments[start:start + rows]))
            start += rows
        return specs


def csv_columns(rows: list[list[str]], ends: list[int], before: int, index: dict[str, int], limit: int, *,
                plain_text: bool = False) -> DebtColumns | None:
    """The first debts of `rows` (at most `limit`, each whole) as columns, or None when any of
    them is not plainly valid.

    `rows` are a CSV's rows as the reader gives them, starting with a debt's first row and
    ending with a debt's last; `ends[i]` is the line row i ends on and `before` the line before
    the first row; `index` is where each column sits in a row. The debts taken are
    `DebtColumns.row_count` rows. `plain_text` says the rows hold only ASCII without NUL (their
    bytes were), which spares looking.

    Only the text columns are stripped. A number, date, code or flag with spaces around it
    fails its column's check, and the block is left to the reader that strips every cell.
    """
    width = len(index)
    if not rows or set(map(len, rows)) != {width}:
        return None
    # A debt is its consecutive rows with the same external_id (stripped, as the reader compares
    # them: a debt whose rows differ in spaces only is caught below, by its debt columns).
    external_ids = list(map(str.strip, map(itemgetter(index["external_id"]), rows)))
    if "" in external_ids:  # a row of blank cells, which belongs to no debt (or a bad row)
        return None
    starts = [0, *compress(count(1), map(ne, external_ids[1:], external_ids))]
    if len(starts) > limit:
        rows, external_ids, starts = rows[:starts[limit]], external_ids[:starts[limit]], starts[:limit]
    size, debts = len(rows), len(starts)
    # same[i]: row i + 1 belongs to the debt of row i.
    same = list(map(eq, external_ids[1:], external_ids))
    if not plain_text and not plain_cells_text("".join(map("".join, rows))):
        return None

    # The debt's columns agree on every row of a debt: its rows' debt cells change exactly where
    # the external_id does.
    head_names = [name for name in index if not name.startswith("cuota_")]
    head_of = itemgetter(*map(index.__getitem__, head_names))
    heads = list(map(head_of, rows))
    if sum(map(ne, heads[1:], heads)) != debts - 1 or len(set(external_ids)) != debts:
        return None
    debt = dict(zip(head_names, map(list, zip(*map(heads.__getitem__, starts), strict=True)), strict=True))
    for name in _STRIPPED & debt.keys():
        debt[name] = list(map(str.strip, debt[name]))
    counts = list(map(sub, [*starts[1:], size], starts))
    if max(counts) > MAX_INSTALLMENTS:
        return None

    if not (_lengths_within(debt["external_id"], 1, 160) and _lengths_within(debt["account_id"], 1, 64)
            and _lengths_within(debt["deudor_nombre"], 1, 255) and _lengths_within(debt["deudor_documento"], 0, 64)
            and _lengths_within(debt["deudor_telefono"], 0, 32) and _lengths_within(debt["referencia"], 0, 500)):
        return None
    documents, phone_cells = debt["deudor_documento"], debt["deudor_telefono"]
    if "" in documents and "" in map(add, documents, phone_cells):  # a debtor needs a document or a phone
        return None
    phones = _phones(phone_cells)
    currencies = _currencies(debt["moneda"])
    kinds = debt["tipo"]
    if phones is None or currencies is None or not _KINDS.issuperset(kinds):
        return None
    if "single" in kinds and any(kind == "single" and rows > 1 for kind, rows in zip(kinds, counts, strict=True)):
        return None
    auto_sends = _auto_sends(debt["auto_send"])
    versions = _versions(debt["external_version"])
    updated_ats = _updated_ats(debt.get("external_updated_at"), debts)
    if auto_sends is None or versions is None or updated_ats is None:
        return None
    codes = list(map(_FIRST, currencies))
    one_currency = len(set(codes)) == 1
    if one_currency:  # a block's usual case: one currency scales every amount alike
        code, decimals = currencies[0]
        originals = _minor_units(debt["monto_original"], code, decimals, 1)
        balances = _minor_units(debt["saldo_pendiente"], code, decimals, 0)
    else:
        digits = list(map(_SECOND, currencies))
        originals = _minor_units(debt["monto_original"], codes, digits, 1)
        balances = _minor_units(debt["saldo_pendiente"], codes, digits, 0)
    if originals is None or balances is None:
        return None

    # Installments: every row is one, and none repeats its debt's external_id or number.
    def column(name: str) -> list[str]:
        return list(map(itemgetter(index[name]), rows))

    installment_ids, statuses = list(map(str.strip, column("cuota_external_id"))), column("cuota_estado")
    numbers = _numbers(column("cuota_numero"))
    if not _lengths_within(installment_ids, 1, 160) or numbers is None or not _STATUSES.issuperset(statuses) \
            or not (_rising_within(installment_ids, same)
                    or len(set(zip(external_ids, installment_ids, strict=True))) == size) \
            or not (_rising_within(numbers, same) or len(set(zip(external_ids, numbers, strict=True))) == size):
        return None
    if one_currency:
        amounts = _minor_units(column("cuota_monto"), code, decimals, 1)
    else:
        amounts = _minor_units(column("cuota_monto"), list(chain.from_iterable(map(repeat, codes, counts))),
                               list(chain.from_iterable(map(repeat, digits, counts))), 1)
    due_dates = _days(column("cuota_vence"))
    if amounts is None or due_dates is None:
        return None
    return DebtColumns(starts, counts, debt["external_id"], debt["account_id"], debt["deudor_nombre"],
                       _or_none(documents), phones, codes, originals, balances, versions, updated_ats,
                       _or_none(debt["referencia"]), _or_none(kinds), auto_sends, external_ids, installment_ids,
                       numbers, amounts, due_dates, statuses, ends[:size], before)


def _or_none(cells: list[str]) -> list[str | None]:
    """The cells, None for each empty one."""
    return [cell or None for cell in cells] if "" in cells else cells


def _rising_within(values: list, same: list[bool]) -> bool:
    """Each debt's values rise from row to row (so none repeats): the usual order of a schedule."""
    return all(compress(map(lt, values, values[1:]), same))


def _lengths_within(cells: list[str], low: int, high: int) -> bool:
    lengths = set(map(len, cells))
    return low <= min(lengths) and max(lengths) <= high


def _plain_digits(cells: list[str], most: int) -> bool:
    """Every cell 1 to `most` ASCII digits."""
    text = "".join(cells)
    return text.isdigit() and text.isascii() and _lengths_within(cells, 1, most)


def _phones(cells: list[str]) -> list[str | None] | None:
    """The phones as stored (None for an empty cell), or None when one is no phone number."""
    numbers = [cell for cell in cells if cell] if "" in cells else cells
    if not numbers or (_plain_digits(numbers, 15) and min(map(len, numbers)) >= 8):
        return _or_none(cells)
    stored = [plain_phone(cell) if cell else None for cell in cells]
    if sum(map(bool, stored)) != len(numbers):
        return None
    return stored


def _currencies(cells: list[str]) -> list[tuple[str, int]] | None:
    found = {cell: PLAIN_CURRENCIES.get(cell) or plain_currency(cell) for cell in set(cells)}
    if None in found.values():
        return None
    return list(map(found.__getitem__, cells))


def _auto_sends(cells: list[str]) -> list[bool | None] | None:
    found = {cell: CSV_BOOLEANS.get(cell.lower()) for cell in set(cells) if cell}
    if None in found.values():
        return None
    return list(map(found.get, cells))


def _versions(cells: list[str]) -> list[int | None] | None:
    if "" not in cells:
        if not _plain_digits(cells, 19):
            return None
        versions = list(map(int, cells))
        return versions if max(versions) <= MAX_VERSION else None
    given = [cell for cell in cells if cell]
    if not given:
        return [None] * len(cells)
    if not _plain_digits(given, 19):
        return None
    versions = [int(cell) if cell else None for cell in cells]
    return versions if max(map(int, given)) <= MAX_VERSION else None


def _updated_ats(cells: list[str] | None, debts: int) -> list[dt.datetime | None] | None:
    if cells is None or not any(cells):
        return [None] * debts
    stamps = [plain_timestamp(cell) if cell else None for cell in cells]
    return stamps if sum(map(bool, stamps)) == sum(map(bool, cells)) else None


def _minor_units(cells: list[str], codes: str | list[str], digits: int | list[int], least: int) -> list[int] | None:
    """Amounts in minor units, each at least `least`, or None when one is not a plain amount.
    `codes` are each cell's currency and `digits` their decimals; one of each when all agree."""
    uniform = type(digits) is int
    if _plain_digits(cells, 15):
        if not uniform:
            amounts = list(map(mul, map(int, cells), map(MINOR_SCALE.__getitem__, digits)))
        elif digits:
            amounts = list(map(mul, map(int, cells), repeat(MINOR_SCALE[digits])))
        else:
            amounts = list(map(int, cells))
        return amounts if least <= min(amounts) and max(amounts) <= MAX_MINOR else None
    amounts = list(map(plain_minor, cells, repeat(codes) if uniform else codes, repeat(digits) if uniform else digits,
                       repeat(least)))
    return None if None in amounts else amounts


def _numbers(cells: list[str]) -> list[int] | None:
    if not _plain_digits(cells, 6):
        return None
    numbers = list(map(int, cells))
    return numbers if min(numbers) >= 1 and max(numbers) <= 100_000 else None


def _days(cells: list[str]) -> list[dt.date] | None:
    days = list(map(PLAIN_DATES.get, cells))
    if None in days:
        days = [day or plain_date(cell) for day, cell in zip(days, cells, strict=True)]
        if None in days:
            return None
    return days
