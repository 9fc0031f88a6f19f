"""Streaming import of debts from the ERP: CSV (one row per installment) or JSON Lines.

Memory stays flat whatever the file size: the input is read in blocks of about one batch of
debts, and each batch is written in its own transaction through `snapshots.upsert_debts`,
the same operation the API uses. A batch the database rolled back to break a lock conflict with
a concurrent import (or that met the storage down) runs again whole (`outlast_outage`), and only
the run that committed is counted, so a summary says what this import created and updated.

A CSV block of plainly valid debts is checked a column at a time (models/receivables/columns.py)
and, when none of its debts or debtors is stored yet, written the same way
(`snapshots.insert_new_debts`, retried the same way); the rest takes the road above.

A bad row is reported with its line number and skipped; when a row of a CSV debt is bad the
whole debt is skipped, since saving its other rows as a snapshot would cancel the installment
that was left out.
"""

from __future__ import annotations

import codecs
import csv
import functools
import io
import operator
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from itertools import chain, islice, repeat
from typing import Any, BinaryIO

from models.errors import DomainError
from models.receivables.columns import DebtColumns, csv_columns
from models.receivables.inputs import (
    CSV_BOOLEANS,
    DebtSpec,
    loads_exact,
    parse_debt,
    plain_cells_text,
    plain_csv_spec,
    plain_debt_spec,
    plain_fields_spec,
)
from models.receivables.snapshots import insert_new_debts, upsert_debts
from models.store.db import outlast_outage

BATCH_SIZE = 500

CSV_COLUMNS = ("external_id", "external_version", "account_id", "deudor_nombre", "deudor_documento",
               "deudor_telefono", "moneda", "referencia", "monto_original", "saldo_pendiente", "tipo", "auto_send",
               "cuota_external_id", "cuota_numero", "cuota_monto", "cuota_vence", "cuota_estado")
# Accepted in addition to the columns above: the alternative ordering field.
CSV_OPTIONAL_COLUMNS = ("external_updated_at",)
DEBT_COLUMNS = tuple(name for name in CSV_COLUMNS + CSV_OPTIONAL_COLUMNS if not name.startswith("cuota_"))
INSTALLMENT_COLUMNS = tuple(name for name in CSV_COLUMNS if name.startswith("cuota_"))
_INSTALLMENT_KEYS = tuple(name.removeprefix("cuota_") for name in INSTALLMENT_COLUMNS)
# The debt's cells in the order _csv_fields reads them.
_HEAD_COLUMNS = ("external_id", "account_id", "deudor_nombre", "deudor_documento", "deudor_telefono", "moneda",
                 "referencia", "monto_original", "saldo_pendiente", "external_version", "tipo", "auto_send")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
# API field paths back to the CSV columns they came from, for error messages.
_CSV_FIELD = {"deudor.nombre": "deudor_nombre", "deudor.documento": "deudor_documento",
              "deudor.telefono": "deudor_telefono", "deudor": "deudor_documento"}


class ImportFormatError(Exception):
    """The input cannot be read at all (no header, unknown columns): nothing is imported."""


@dataclass
class RowError:
    line: int
    external_id: str | None
    code: str
    message: str
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class DebtRecord:
    """One debt read from the input: a spec to save, or the errors that keep it out."""

    line: int
    external_id: str | None
    spec: DebtSpec | None = None
    errors: list[RowError] = field(default_factory=list)
    rows: int = 1


@dataclass
class ImportSummary:
    created: int = 0
    updated: int = 0
    ignored_stale: int = 0
    errors: int = 0
    debts: int = 0
    rows: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


class _StreamWatch(io.RawIOBase):
    """Wraps a binary stream and shows each chunk read from it to `saw`."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read(len(buffer))
        size = len(data)
        buffer[:size] = data
        self.saw(data)
        return size

    def saw(self, data: bytes) -> None:
        raise NotImplementedError


class CountingReader(_StreamWatch):
    """Counts the bytes read from the stream, for the progress bar."""

    def __init__(self, stream: BinaryIO):
        super().__init__(stream)
        self.bytes_read = 0

    def saw(self, data: bytes) -> None:
        self.bytes_read += len(data)


class _PlainBytesWatch(_StreamWatch):
    """Notes whether every byte read so far (past a UTF-8 BOM) is ASCII and not NUL: text decoded
    from them holds no character that keeps a cell out."""

    def __init__(self, stream: BinaryIO):
        super().__init__(stream)
        self.plain = True
        self.started = False

    def saw(self, data: bytes) -> None:
        if self.plain:
            body = data if self.started else data.removeprefix(codecs.BOM_UTF8)
            self.plain = body.isascii() and b"\x00" not in body
        self.started = True


def _domain_error(line: int, external_id: str | None, error: DomainError, fields: Callable[[str], str] = str) -> \
        list[RowError]:
    errors = error.details.get("errors") if isinstance(error.details, dict) else None
    if not errors:
        return [RowError(line, external_id, error.code, error.message, error.details)]
    first_path, first_messages = next(iter(errors.items()))
    renamed = {fields(path): messages for path, messages in errors.items()}
    return [RowError(line, external_id, error.code, f"{fields(first_path)}: {first_messages[0]}", {"errors": renamed})]


# -- JSON Lines -------------------------------------------------------------------------------

def read_jsonl(stream: BinaryIO) -> Iterator[DebtRecord]:
    """One Debt (the API's shape) per line; blank lines are skipped."""
    for line, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        try:
            obj = loads_exact(raw)
        except (ValueError, RecursionError) as error:
            yield DebtRecord(line, None, errors=[RowError(line, None, "invalid_json", f"not valid JSON: {error}")])
            continue
        external_id = obj.get("external_id") if isinstance(obj, dict) else None
        external_id = external_id if isinstance(external_id, str) else None
        try:
            yield DebtRecord(line, external_id, spec=plain_debt_spec(obj) or parse_debt(obj))
        except DomainError as error:
            yield DebtRecord(line, external_id, errors=_domain_error(line, external_id, error))


# -- CSV --------------------------------------------------------------------------------------

def _header(reader) -> dict[str, int]:
    header = next(reader, None)
    if header is None:
        raise ImportFormatError("the file is empty: expected a header row")
    names = [name.strip().lower() for name in header]
    unknown = [name for name in names if name not in CSV_COLUMNS + CSV_OPTIONAL_COLUMNS]
    missing = [name for name in CSV_COLUMNS if name not in names]
    if unknown or missing or len(set(names)) != len(names):
        problems = []
        if missing:
            problems.append("missing " + ", ".join(missing))
        if unknown:
            problems.append("unknown " + ", ".join(unknown))
        if len(set(names)) != len(names):
            problems.append("repeated columns")
        raise ImportFormatError(f"bad CSV header ({'; '.join(problems)}); expected: {', '.join(CSV_COLUMNS)}")
    return {name: index for index, name in enumerate(names)}


class _Layout:
    """Where each column sits in this file's rows (the header fixes the order)."""

    def __init__(self, columns: dict[str, int]):
        self.width = len(columns)
        self.index = columns
        # itemgetters read several cells in one call: they run on every row of an import.
        self.debt_cells = operator.itemgetter(*(columns[name] for name in DEBT_COLUMNS if name in columns))
        self.installment_cells = operator.itemgetter(*(columns[name] for name in INSTALLMENT_COLUMNS))
        self.head_cells = operator.itemgetter(*(columns[name] for name in _HEAD_COLUMNS))
        self.updated_at = columns.get("external_updated_at")

    def has_installment(self, row: list[str]) -> bool:
        return any(self.installment_cells(row))


def read_csv(stream: BinaryIO, batch_size: int = BATCH_SIZE) -> Iterator[DebtRecord | DebtColumns]:
    """Rows grouped by consecutive `external_id` into debts (see DECISIONS, Debt CSV import).

    Cells are stripped and blank lines skipped; a row is numbered by its first line, counted by
    the reader since a quoted cell may span lines. Rows are read in blocks of about
    `batch_size` debts: a block whose debts are all plainly valid comes as one `DebtColumns`
    (models/receivables/columns.py), any other block as a `DebtRecord` a debt.
    """
    # Undecodable bytes become U+FFFD so that only their row is refused, not the whole file.
    source = _PlainBytesWatch(stream)
    text = io.TextIOWrapper(source, encoding="utf-8-sig", errors="replace", newline="")
    reader = csv.reader(text)
    layout = _Layout(_header(reader))
    position = layout.index["external_id"]
    # Each row with the line it ends on, read after the row.
    numbered = zip(reader, map(operator.attrgetter("line_num"), repeat(reader)), strict=False)
    rows: list[list[str]] = []  # read and not yet given out
    ends: list[int] = []
    before = reader.line_num  # the line before rows[0]
    # Rows to hold before giving out a block: a batch's worth (three a debt at first, then as many
    # as the last block's debts took), and one more, the next debt's first, to know the last whole.
    block = batch_size * 3 + 1
    try:
        while True:
            wanted = block - len(rows)
            read = list(islice(numbered, wanted))
            done = len(read) < wanted
            rows.extend(map(_FIRST, read))
            ends.extend(map(_SECOND, read))
            while rows:
                whole = len(rows) if done else _last_debt_start(rows, position)
                if not whole:
                    block = 2 * len(rows)  # a debt longer than a block: read on
                    break
                # The rows were decoded from bytes read already: plain bytes make plain text.
                columns = csv_columns(rows[:whole], ends, before, layout.index, batch_size,
                                      plain_text=source.plain)
                if columns is None:
                    yield from _csv_records(rows[:whole], ends, before, layout)
                    taken = whole
                else:
                    yield columns
                    taken = columns.row_count
                    block = -(-taken * batch_size // len(columns.counts)) + 1
                before = ends[taken - 1]
                del rows[:taken], ends[:taken]
                if not done and len(rows) < block:
                    break
            if done:
                return
    except csv.Error as error:
        raise ImportFormatError(f"line {reader.line_num}: unreadable CSV ({error})") from None


def _cells(row: list[str], position: int) -> tuple[list[str], str | None]:
    """The row's stripped cells and its external_id; None for a blank row, which belongs to no debt."""
    cells = list(map(str.strip, row))
    external_id = cells[position] if len(cells) > position else ""
    return cells, (None if not external_id and not any(cells) else external_id)


def _last_debt_start(rows: list[list[str]], position: int) -> int:
    """Where the last debt of `rows` starts, as `_csv_records` groups them."""
    key = None
    for index in range(len(rows) - 1, -1, -1):
        external_id = _cells(rows[index], position)[1]
        if external_id is None:
            continue
        if key is None:
            key = external_id
        elif external_id != key:
            return index + 1
    return 0


def _csv_records(rows: list[list[str]], ends: list[int], before: int, layout: _Layout) -> Iterator[DebtRecord]:
    """Whole debts' rows, a record a debt; `ends` and `before` as for `csv_columns`."""
    position = layout.index["external_id"]
    group: list[tuple[int, list[str]]] = []  # the debt being assembled
    key = None
    for row, previous_end in zip(rows, chain((before,), ends), strict=False):
        cells, external_id = _cells(row, position)
        if external_id is None:
            continue
        if group and external_id != key:
            yield _csv_debt(group, layout)
            group = []
        key = external_id
        group.append((previous_end + 1, cells))
    if group:
        yield _csv_debt(group, layout)


def _row_problem(row: list[str], width: int) -> str | None:
    if len(row) != width:
        return f"expected {width} cells, found {len(row)}"
    joined = "".join(row)
    if "\x00" in joined:
        return "cells may not contain NUL characters"
    if "\ufffd" in joined:
        return "the row is not valid UTF-8 text"
    return None


def _plain_csv_debt(rows: list[tuple[int, list[str]]], layout: _Layout) -> DebtRecord | None:
    """`_csv_debt` for a debt whose rows and cells are plainly well formed; None as soon as
    anything is not (then `_csv_debt` finds the problem and words it). Like `plain_csv_spec`, it
    may give up on a good debt but never accepts a bad one (tests/test_receivables_input_plain.py)."""
    first_line, first = rows[0]
    width = layout.width
    if len(first) != width:
        return None
    debt_cells = layout.debt_cells
    head = debt_cells(first)
    installment_cells = layout.installment_cells
    installments = []
    for _line, row in rows:
        if len(row) != width or debt_cells(row) != head:
            return None
        installments.append(installment_cells(row))
    if not plain_cells_text("".join(["".join(row) for _line, row in rows])):
        return None
    if not all(map(any, installments)):
        if any(map(any, installments)):
            return None
        installments = []
    # `head` holds the DEBT_COLUMNS this file has, in that order: external_updated_at last, if at all.
    (external_id, version, account_id, name, document, phone, currency, reference, original_amount,
     balance, kind, auto_send, *updated_at) = head
    send = None
    if auto_send:
        send = CSV_BOOLEANS.get(auto_send.lower())
        if send is None:
            return None
    spec = plain_csv_spec(external_id, account_id, name, document, phone, currency, reference, original_amount,
                          balance, version, updated_at[0] if updated_at else "", kind, send, installments)
    if spec is None:
        return None
    return DebtRecord(first_line, external_id, spec=spec, rows=len(rows))


def _csv_debt(rows: list[tuple[int, list[str]]], layout: _Layout) -> DebtRecord:
    return _plain_csv_debt(rows, layout) or _checked_csv_debt(rows, layout)


def _checked_csv_debt(rows: list[tuple[int, list[str]]], layout: _Layout) -> DebtRecord:
    """The debt's rows checked one by one, then its fields (a short road, then the API's parser)."""
    first_line, first = rows[0]
    position = layout.index["external_id"]
    external_id = (first[position] if len(first) > position else "") or None
    record = DebtRecord(first_line, external_id, rows=len(rows))
    for line, row in rows:
        if problem := _row_problem(row, layout.width):
            record.errors.append(RowError(line, external_id, "validation_failed", f"{problem}; debt not imported"))
    if record.errors:
        return record
    debt_cells = layout.debt_cells(first)
    for line, row in rows[1:]:
        if layout.debt_cells(row) != debt_cells:
            record.errors.append(RowError(line, external_id, "validation_failed",
                                          f"the debt's columns differ from line {first_line} (same external_id); "
                                          "debt not imported"))
    flags = [layout.has_installment(row) for _line, row in rows]
    if any(flags) and not all(flags):
        bare = rows[flags.index(False)][0]
        record.errors.append(RowError(bare, external_id, "validation_failed",
                                      "a row without installment in a debt that has installments; "
                                      "debt not imported"))
    if record.errors:
        return record
    installment_rows = [row for (_line, row), flag in zip(rows, flags, strict=True) if flag]
    try:
        fields = _csv_fields(first, layout, installment_rows)
        record.spec = plain_fields_spec(*fields) or parse_debt(_csv_body(fields))
    except DomainError as error:
        lines = [line for (line, _row), flag in zip(rows, flags, strict=True) if flag]
        record.errors = _csv_errors(error, first_line, external_id, lines)
    return record


def _csv_fields(first: list[str], layout: _Layout, installment_rows: list[list[str]]) -> tuple:
    """The CSV debt's fields as the API's body would hold them, in `plain_fields_spec`'s order;
    None for a field the body leaves out (an empty optional cell)."""
    (external_id, account_id, name, document, phone, currency, reference, original_amount, balance,
     version, kind, auto_send) = layout.head_cells(first)
    updated_at = first[layout.updated_at] if layout.updated_at is not None else ""
    installments = []
    cells = layout.installment_cells
    for row in installment_rows:
        installment_id, number, amount, due_date, status = cells(row)
        installments.append((installment_id or None, _csv_int(number), amount or None, due_date or None,
                             status or None))
    return (external_id, account_id, name, document or None, phone or None, currency,
            # A CSV debt always states its referencia: an empty cell clears it.
            reference or None, True, original_amount, balance, _csv_int(version), updated_at or None,
            kind or None, CSV_BOOLEANS.get(auto_send.lower(), auto_send) if auto_send else None,
            # A CSV debt is a whole snapshot: a debt written without installment cells has none, so
            # its open installments are cancelled (the API's `cuotas: []`).
            installments)


def _csv_int(cell: str) -> int | str | None:
    """A cell of digits as the JSON number it stands for; other text as it is, for the error.

    More digits than any field holds (a 64-bit integer has 19) stay text too: int() refuses
    thousands of them, and the field's check refuses the text with the row's line."""
    if not cell:
        return None
    return int(cell) if len(cell) <= 19 and cell.isdigit() and cell.isascii() else cell


def _csv_body(fields: tuple) -> dict[str, Any]:
    """The CSV debt in the API's shape, from its `_csv_fields`: for `parse_debt` and its errors."""
    (external_id, account_id, name, document, phone, currency, reference, _reference_given, original_amount,
     balance, version, updated_at, kind, auto_send, installments) = fields
    debtor: dict[str, Any] = {"nombre": name}
    if document is not None:
        debtor["documento"] = document
    if phone is not None:
        debtor["telefono"] = phone
    body: dict[str, Any] = {"external_id": external_id, "account_id": account_id, "deudor": debtor,
                            "moneda": currency, "referencia": reference, "monto_original": original_amount,
                            "saldo_pendiente": balance}
    for key, value in (("external_version", version), ("external_updated_at", updated_at), ("tipo", kind),
                       ("auto_send", auto_send)):
        if value is not None:
            body[key] = value
    body["cuotas"] = [{key: value for key, value in zip(_INSTALLMENT_KEYS, item, strict=True) if value is not None}
                      for item in installments]
    return body


def _csv_errors(error: DomainError, first_line: int, external_id: str | None, lines: list[int]) -> list[RowError]:
    """Validation errors on the lines they came from, named by CSV column; one error per line."""
    errors = error.details.get("errors") if isinstance(error.details, dict) else None
    if not errors:
        return [RowError(first_line, external_id, error.code, error.message, error.details)]
    by_line: dict[int, dict[str, list[str]]] = {}
    for path, messages in errors.items():
        line, column = first_line, _CSV_FIELD.get(path, path)
        parts = path.split(".")
        if parts[0] == "cuotas" and len(parts) >= 2 and parts[1].isdigit() and int(parts[1]) < len(lines):
            line = lines[int(parts[1])]
            column = "cuota_" + parts[2] if len(parts) > 2 else "cuota_external_id"
        by_line.setdefault(line, {}).setdefault(column, []).extend(messages)
    found = []
    for line in sorted(by_line):
        fields = by_line[line]
        column, messages = next(iter(fields.items()))
        found.append(RowError(line, external_id, error.code, f"{column}: {messages[0]}; debt not imported",
                              {"errors": fields}))
    return found


# -- the import -------------------------------------------------------------------------------

def import_debts(tenant_id: int, records: Iterable[DebtRecord | DebtColumns], *, batch_size: int = BATCH_SIZE,
                 on_error: Callable[[RowError], None] | None = None,
                 on_batch: Callable[[ImportSummary], None] | None = None) -> ImportSummary:
    """Save the good records in batches (one transaction each) and report the bad ones.

    `on_error` gets every bad row as it is found; `on_batch` the running summary after each batch.
    """
    summary = ImportSummary()
    pending: list[DebtRecord] = []

    def report(error: RowError) -> None:
        summary.errors += 1
        if on_error is not None:
            on_error(error)

    def flush() -> None:
        specs = [record.spec for record in pending]
        results = outlast_outage(lambda: upsert_debts(tenant_id, specs),  # type: ignore[arg-type]
                                 what=f"an import batch of {len(specs)} debts")
        actions = {"created": 0, "updated": 0, "ignored_stale": 0}
        for record, result in zip(pending, results, strict=True):
            if result.error is not None:
                for error in _domain_error(record.line, record.external_id, result.error):
                    report(error)
            else:
                actions[result.action] += 1
        summary.created += actions["created"]
        summary.updated += actions["updated"]
        summary.ignored_stale += actions["ignored_stale"]
        pending.clear()
        if on_batch is not None:
            on_batch(summary)

    for item in records:
        if type(item) is DebtColumns:
            if pending:
                flush()
            if outlast_outage(lambda item=item: insert_new_debts(tenant_id, item),
                              what=f"an import block of {len(item.counts)} new debts"):
                summary.debts += len(item.counts)
                summary.rows += item.row_count
                summary.created += len(item.counts)
                if on_batch is not None:
                    on_batch(summary)
                continue
            # Some debt or debtor is stored already: the block takes the general road.
            item_records = _column_records(item)
        else:
            item_records = (item,)
        for record in item_records:
            summary.debts += 1
            summary.rows += record.rows
            if record.errors:
                for error in record.errors:
                    report(error)
                continue
            pending.append(record)
            if len(pending) >= batch_size:
                flush()
    if pending:
        flush()
    elif on_batch is not None:
        on_batch(summary)
    return summary


def _column_records(columns: DebtColumns) -> list[DebtRecord]:
    return [DebtRecord(line, spec.external_id, spec=spec, rows=rows)
            for line, rows, spec in zip(columns.lines, columns.counts, columns.specs(), strict=True)]


def reader_for(fmt: str, batch_size: int = BATCH_SIZE) -> Callable[[BinaryIO], Iterator[DebtRecord | DebtColumns]]:
    if fmt == "csv":
        return functools.partial(read_csv, batch_size=batch_size)
    if fmt == "jsonl":
        return read_jsonl
    raise ImportFormatError(f"unknown format {fmt!r}: csv or jsonl")
