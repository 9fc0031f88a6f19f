"""A campaign's audience from a spreadsheet: a CSV or XLSX file of at most MAX_RECIPIENTS data rows,
read as it streams in, and its columns mapped to a template's phone, variables and URL suffixes.

Reading never holds more than the rows themselves: a CSV is decoded over the upload's stream, an
XLSX (a zip, which needs a seekable file) is spooled to a temporary file and read by openpyxl in
read-only mode. Past MAX_RECIPIENTS data rows reading stops with an error naming the limit.

Checking a mapping splits the rows into recipients (one per normalized phone, the first row wins),
bad rows (each with its reason) and the number of duplicates dropped.
"""

from __future__ import annotations

import codecs
import csv
import datetime as dt
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any

from models.errors import Invalid
from models.numbers.tables import Template
from models.sending.campaign_inputs import DYNAMIC_SUFFIX, MAX_BUTTON_URL, MAX_RECIPIENTS
from models.sending.sendable import digits, template_buttons

MAX_UPLOAD_BYTES = 10 * 1024 * 1024
MAX_COLUMNS = 50
MAX_CELL = 1000  # a variable's bound in the API (CampaignInput's Variable)
# E.164: a country code and a subscriber number, at most 15 digits; fewer than 8 is no phone.
MIN_PHONE_DIGITS, MAX_PHONE_DIGITS = 8, 15
KINDS = ("csv", "xlsx")

# Reasons a row is left out, as codes (the portal says them in the reader's language).
BAD_PHONE = "bad_phone"
MISSING_VALUE = "missing_value"
TOO_LONG = "too_long"


@dataclass
class Audience:
    columns: list[str]
    rows: list[list[str]]


@dataclass
class BadRow:
    line: int  # the row's number in the file, the header being 1
    phone: str
    reason: str
    column: str | None = None


@dataclass
class Checked:
    recipients: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # each recipient's row in the file
    bad: list[BadRow] = field(default_factory=list)
    duplicates: int = 0


def kind_of(filename: str) -> str:
    """`csv` or `xlsx` from the file's name, or a 422 saying which files are read."""
    name = (filename or "").lower()
    for kind in KINDS:
        if name.endswith(f".{kind}"):
            return kind
    raise Invalid("only CSV (.csv) and Excel (.xlsx) files can be read", code="audience_file_type",
                  details={"errors": {"file": ["must be a .csv or .xlsx file"]}})


def read_audience(stream: IO[bytes], filename: str) -> Audience:
    """The file's header and data rows (blank rows skipped), or a 422 saying what is wrong with it."""
    kind = kind_of(filename)
    rows = _csv_rows(stream) if kind == "csv" else _xlsx_rows(stream)
    columns: list[str] | None = None
    data: list[list[str]] = []
    for row in rows:
        if not any(cell for cell in row):
            continue
        if columns is None:
            if len(row) > MAX_COLUMNS:
                raise _invalid("audience_too_wide", f"a file may have at most {MAX_COLUMNS} columns")
            columns = [cell or f"#{index + 1}" for index, cell in enumerate(row)]
            continue
        if len(data) >= MAX_RECIPIENTS:
            raise _invalid("audience_too_large", f"a file may have at most {MAX_RECIPIENTS} rows besides its header")
        data.append([cell[:MAX_CELL + 1] for cell in row[:len(columns)]] + [""] * (len(columns) - len(row)))
    if columns is None or not data:
        raise _invalid("audience_empty", "the file has no rows besides its header")
    return Audience(columns, data)


def _invalid(code: str, message: str) -> Invalid:
    return Invalid(message, code=code, details={"errors": {"file": [message]}})


def _csv_rows(stream: IO[bytes]):
    # Only read() is asked of the stream (an upload's part is no io.BufferedIOBase).
    text = codecs.getreader("utf-8-sig")(stream, errors="strict")
    try:
        first = text.readline()
        # A spreadsheet set to a comma decimal separator writes `;` between cells.
        delimiter = ";" if first.count(";") > first.count(",") else ","
        yield from csv.reader(_chain(first, text), delimiter=delimiter)
    except (UnicodeDecodeError, csv.Error):
        raise _invalid("audience_unreadable", "the file is not a CSV in UTF-8") from None


def _chain(first: str, rest):
    yield first
    yield from rest


def _xlsx_rows(stream: IO[bytes]):
    import zipfile

    from openpyxl import load_workbook

    with tempfile.SpooledTemporaryFile(max_size=1024 * 1024) as spooled:
        shutil.copyfileobj(stream, spooled)
        spooled.seek(0)
        try:
            book = load_workbook(spooled, read_only=True, data_only=True)
        except (zipfile.BadZipFile, KeyError, ValueError, OSError):
            raise _invalid("audience_unreadable", "the file is not an Excel workbook (.xlsx)") from None
        try:
            sheet = book.worksheets[0] if book.worksheets else None
            if sheet is None:
                return
            for values in sheet.iter_rows(values_only=True):
                yield [_cell_text(value) for value in values]
        finally:
            book.close()


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # a phone typed into a number cell
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value).strip()


@dataclass
class Mapping:
    """Which column (by index) holds the phone, each {{n}} of the body, each URL button's suffix."""

    phone: int
    variables: list[int]
    buttons: dict[int, int]  # button index -> column


def needed(template: Template) -> tuple[int, list[int]]:
    """The template's variable count and the indexes of its URL buttons that take a suffix."""
    buttons = [index for index, button in enumerate(template_buttons(template))
               if str(button.get("type", "")).upper() == "URL" and str(button.get("url", "")).endswith(DYNAMIC_SUFFIX)]
    return template.variable_count or 0, buttons


def check(audience: Audience, mapping: Mapping, template: Template) -> Checked:
    """The rows as the campaign's recipients, the rows left out and why, the duplicates dropped."""
    declared = template_buttons(template)
    checked = Checked()
    seen: set[str] = set()
    for number, row in enumerate(audience.rows, start=2):
        raw_phone = row[mapping.phone]
        phone = digits(raw_phone)
        if not MIN_PHONE_DIGITS <= len(phone) <= MAX_PHONE_DIGITS:
            checked.bad.append(BadRow(number, raw_phone, BAD_PHONE, audience.columns[mapping.phone]))
            continue
        problem = None
        values = []
        for column in mapping.variables:
            value = row[column].strip()
            if not value:
                problem = BadRow(number, raw_phone, MISSING_VALUE, audience.columns[column])
            elif len(value) > MAX_CELL:
                problem = BadRow(number, raw_phone, TOO_LONG, audience.columns[column])
            values.append(value)
            if problem:
                break
        buttons = []
        for index, column in sorted(mapping.buttons.items()):
            suffix = row[column].strip()
            url = str(declared[index].get("url", ""))[:-len(DYNAMIC_SUFFIX)] + suffix
            if not suffix:
                problem = problem or BadRow(number, raw_phone, MISSING_VALUE, audience.columns[column])
            elif len(url) > MAX_BUTTON_URL:
                problem = problem or BadRow(number, raw_phone, TOO_LONG, audience.columns[column])
            buttons.append({"index": index, "type": "url", "text": suffix})
        if problem:
            checked.bad.append(problem)
            continue
        if phone in seen:
            checked.duplicates += 1
            continue
        seen.add(phone)
        recipient: dict[str, Any] = {"wa_id": phone, "vars": values}
        if buttons:
            recipient["buttons"] = buttons
        checked.recipients.append(recipient)
        checked.lines.append(number)
    return checked


def fill(text: str | None, values: list[str]) -> str:
    """A template's text with {{1}}, {{2}}... replaced by the row's values."""
    text = text or ""
    for index, value in enumerate(values, start=1):
        text = text.replace("{{" + str(index) + "}}", value)
    return text
