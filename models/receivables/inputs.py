"""The wire shapes of receivables (Debt, Payment, resolution) and their exact parsing.

One validation path for every way a debt arrives (the API, a batch element, a JSON line, a CSV
row turned into the same shape), so the rules cannot differ between them:

1. bytes → Python with `loads_exact`: JSON numbers become `Decimal`, never `float`
   (pydantic's JSON mode goes through a double: 1.0000000000000000001 would become 1);
2. the pydantic models below (strict, unknown fields refused; English attributes, the wire's
   keys as their aliases) check types and shapes;
3. `debt_spec` / `payment_spec` apply what depends on several fields (decimals allowed by the
   currency, the debtor's keys, the installment numbering) and yield plain specs in minor units.

The importer first tries `plain_debt_spec`, a shortcut for plainly valid debts that never
decides a refusal itself (see its section below).

Amounts are accepted as JSON numbers or as decimal strings (`"1234.50"`): some clients can only
produce exact decimals as strings. Floats from Python callers are refused.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from models.clock import to_utc_naive
from models.errors import Invalid
from models.events.tables import PAYMENT_METHODS
from models.receivables.money import (
    ACTIVE_CODES,
    MAX_MINOR,
    MINOR_UNITS_EXCEPTIONS,
    MoneyError,
    normalize_currency,
    to_minor,
)

DEBT_TYPES = ("single", "installments")
INSTALLMENT_STATES = ("pending", "partial", "paid", "overdue", "cancelled")
RESOLUTIONS = ("paid", "cancelled", "written_off")
MAX_BATCH = 500
MAX_INSTALLMENTS = 1000

_DECIMAL_TEXT = re.compile(r"-?\d+(\.\d+)?")
_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
_PHONE_SEPARATORS = re.compile(r"[\s().\-]")
# A JSON \u0000 escape: preceded by an even run of backslashes (an odd one escapes the first).
_NUL_ESCAPE = re.compile(rb"(?:^|[^\\])(?:\\\\)*\\u0000")


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def loads_exact(raw: bytes | str) -> Any:
    """Parse JSON keeping every number exact (floats as Decimal); NaN and Infinity are refused,
    and so is NUL in a string (PostgreSQL text cannot hold it)."""
    text = raw if isinstance(raw, bytes) else raw.encode()
    if b"\x00" in text or _NUL_ESCAPE.search(text):
        raise ValueError("strings may not contain NUL characters")
    return json.loads(raw, parse_float=Decimal, parse_constant=_reject_constant)


def _decimal(value: Any) -> Decimal:
    kind = type(value)
    if kind is str:
        text = value.strip()
        if _DECIMAL_TEXT.fullmatch(text):
            return Decimal(text)
    elif kind is Decimal:
        if value.is_finite():
            return value
        raise PydanticCustomError("decimal_type", "must be a finite number")
    elif kind is int:
        return Decimal(value)
    raise PydanticCustomError("decimal_type", "must be a number, or a decimal string such as \"1234.50\"")


def _date(value: Any) -> dt.date:
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value
    if isinstance(value, str) and _DATE_TEXT.fullmatch(value):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    raise PydanticCustomError("date_format", "must be a date written YYYY-MM-DD")


def _timestamp(value: Any) -> dt.datetime:
    parsed = value if isinstance(value, dt.datetime) else None
    if isinstance(value, str) and len(value) <= 64 and "T" in value:
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise PydanticCustomError("datetime_format",
                                  "must be an ISO 8601 date-time with an offset, such as 2025-03-01T10:00:00-03:00")
    return parsed


_AMOUNT_TEXT = {"type": "string", "pattern": r"^-?\d+(\.\d+)?$"}


def _amount(minimum: int, exclusive: bool):
    bound = Field(gt=minimum) if exclusive else Field(ge=minimum)
    number = {"type": "number", ("exclusiveMinimum" if exclusive else "minimum"): minimum}
    return Annotated[Decimal, BeforeValidator(_decimal), bound,
                     WithJsonSchema({"anyOf": [number, _AMOUNT_TEXT],
                                     "description": "a JSON number, or a decimal string such as \"1234.50\"; "
                                                    "at most the currency's decimals"})]


PositiveAmount = _amount(0, exclusive=True)
NonNegativeAmount = _amount(0, exclusive=False)
Day = Annotated[dt.date, BeforeValidator(_date), WithJsonSchema({"type": "string", "format": "date"})]
Timestamp = Annotated[dt.datetime, BeforeValidator(_timestamp),
                      WithJsonSchema({"type": "string", "format": "date-time"})]


def _text(max_length: int, min_length: int = 0):
    return Annotated[str, StringConstraints(max_length=max_length, min_length=min_length)]


class ExactInput(BaseModel):
    """Strict, unknown fields refused, and JSON parsed with exact decimals (see module doc)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @classmethod
    def model_validate_json(cls, json_data, **options):  # type: ignore[override]
        try:
            data = loads_exact(json_data)
        except (ValueError, RecursionError) as error:
            raise ValidationError.from_exception_data(cls.__name__, [InitErrorDetails(
                type="json_invalid", loc=(), input=None, ctx={"error": str(error)})]) from None
        return cls.model_validate(data, strict=options.get("strict"), context=options.get("context"))


class DebtorInput(ExactInput):
    name: _text(255, 1) = Field(alias="nombre")
    document: _text(64, 1) | None = Field(None, alias="documento")
    phone: _text(32, 1) | None = Field(None, alias="telefono", description="digits; spaces, dashes, dots, "
                                                                         "parentheses and a leading + are removed")

    @model_validator(mode="after")
    def _one_key(self):
        if self.document is None and self.phone is None:
            raise PydanticCustomError("debtor_key", "needs documento or telefono (or both)")
        return self


class InstallmentInput(ExactInput):
    external_id: _text(160, 1)
    number: Annotated[int, Field(ge=1, le=100_000)] = Field(alias="numero")
    amount: PositiveAmount = Field(alias="monto")
    due_date: Day = Field(alias="vence")
    status: Literal[INSTALLMENT_STATES] | None = Field(None, alias="estado")  # type: ignore[valid-type]


class DebtInput(ExactInput):
    external_id: _text(160, 1)
    account_id: _text(64, 1)
    external_version: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    external_updated_at: Timestamp | None = None
    debtor: DebtorInput = Field(alias="deudor")
    currency: _text(3, 3) = Field(alias="moneda")
    reference: _text(500) | None = Field(None, alias="referencia")
    original_amount: PositiveAmount = Field(alias="monto_original")
    balance: NonNegativeAmount = Field(alias="saldo_pendiente")
    kind: Literal[DEBT_TYPES] | None = Field(None, alias="tipo")  # type: ignore[valid-type]
    auto_send: bool | None = None
    installments: Annotated[list[InstallmentInput], Field(max_length=MAX_INSTALLMENTS)] | None = Field(
        None, alias="cuotas")


class DebtBatchInput(ExactInput):
    # Elements are validated one by one (a bad element is reported, the others are saved), so
    # the list itself only checks its size here; the document still shows the Debt schema.
    debts: Annotated[list[Any], Field(min_length=1, max_length=MAX_BATCH),
                     WithJsonSchema({"type": "array", "minItems": 1, "maxItems": MAX_BATCH,
                                     "items": {"$ref": "#/components/schemas/DebtInput"}})] = Field(alias="deudas")


class PaymentInput(ExactInput):
    external_id: _text(160, 1)
    debt_external_id: _text(160, 1) = Field(alias="deuda_external_id")
    amount: PositiveAmount = Field(alias="monto")
    currency: _text(3, 3) = Field(alias="moneda")
    method: Literal[PAYMENT_METHODS] = Field(alias="metodo")  # type: ignore[valid-type]
    paid_at: Timestamp = Field(alias="pagado_en")


class ResolveInput(ExactInput):
    status: Literal[RESOLUTIONS]  # type: ignore[valid-type]
    reason: _text(500) | None = None


# -- specs: what the domain works with ---------------------------------------------------------

@dataclass(slots=True)
class InstallmentSpec:
    external_id: str
    number: int
    amount: int  # minor units
    due_date: dt.date
    status: str | None  # as the ERP declares it; None = pending


@dataclass(slots=True)
class DebtorSpec:
    name: str
    document: str | None
    phone: str | None


@dataclass(slots=True)
class DebtSpec:
    external_id: str
    account_id: str
    debtor: DebtorSpec
    currency: str
    original_amount: int  # minor units, like the balance
    balance: int
    external_version: int | None = None
    external_updated_at: dt.datetime | None = None  # naive UTC
    # Optional fields: left out (the `None`s below, or `reference_given=False`) keeps the stored value.
    reference: str | None = None
    reference_given: bool = False
    kind: str | None = None  # single or installments
    auto_send: bool | None = None
    installments: list[InstallmentSpec] | None = None


@dataclass
class PaymentSpec:
    external_id: str | None
    debt_external_id: str
    amount: Any  # Decimal as received; converted with the debt's currency
    currency: str | None
    method: str
    paid_at: dt.datetime | None  # naive UTC
    transaction_id: str | None = None
    extra: dict = field(default_factory=dict)


def error_map(error: ValidationError, prefix: str = "") -> dict[str, list[str]]:
    """A pydantic error as `{"field.path": [messages]}`, the shape of the 422 envelope's details."""
    errors: dict[str, list[str]] = {}
    for item in error.errors(include_url=False, include_context=False, include_input=False):
        if item["type"] == "json_invalid":
            path, message = "body", "not valid JSON"
        elif item["type"] in {"model_type", "model_attributes_type"}:
            path, message = ".".join(str(p) for p in item["loc"]) or "body", "must be a JSON object"
        else:
            path, message = ".".join(str(p) for p in item["loc"]) or "body", item["msg"]
        errors.setdefault(prefix + path, []).append(message)
    return errors


def invalid(errors: dict[str, list[str]]) -> Invalid:
    first = next(iter(errors.items()))
    return Invalid(f"{first[0]}: {first[1][0]}", details={"errors": errors})


def _normalize_phone(raw: str) -> str:
    digits = _PHONE_SEPARATORS.sub("", raw.strip())
    digits = digits[1:] if digits.startswith("+") else digits
    if not digits.isdigit() or not 8 <= len(digits) <= 15 or not digits.isascii():
        raise ValueError("must be a phone number of 8 to 15 digits, with its country code")
    return digits


def debt_spec(data: DebtInput) -> DebtSpec:
    """The rules that span fields; raises `Invalid` with every problem found, by field."""
    errors: dict[str, list[str]] = {}
    try:
        currency = normalize_currency(data.currency)
    except MoneyError as error:
        errors["moneda"] = [str(error)]
        currency = ""

    def minor(path: str, amount: Decimal) -> int:
        if currency:
            try:
                return to_minor(amount, currency)
            except MoneyError as error:
                errors.setdefault(path, []).append(str(error))
        return 0

    debtor = data.debtor
    name = debtor.name.strip()
    if not name:
        errors["deudor.nombre"] = ["must not be blank"]
    document = None
    if debtor.document is not None:
        document = debtor.document.strip()
        if not document:
            errors["deudor.documento"] = ["must not be blank"]
    phone = None
    if debtor.phone is not None:
        try:
            phone = _normalize_phone(debtor.phone)
        except ValueError as error:
            errors["deudor.telefono"] = [str(error)]

    installments = None
    if data.installments is not None:
        installments = []
        seen_ids: set[str] = set()
        seen_numbers: set[int] = set()
        for index, item in enumerate(data.installments):
            if item.external_id in seen_ids:
                errors.setdefault(f"cuotas.{index}.external_id", []).append("appears twice in this debt")
            if item.number in seen_numbers:
                errors.setdefault(f"cuotas.{index}.numero", []).append("appears twice in this debt")
            seen_ids.add(item.external_id)
            seen_numbers.add(item.number)
            installments.append(InstallmentSpec(item.external_id, item.number,
                                                minor(f"cuotas.{index}.monto", item.amount), item.due_date,
                                                item.status))
        if data.kind == "single" and len(installments) > 1:
            errors["tipo"] = ["a single debt has at most one installment; use installments"]

    spec = DebtSpec(data.external_id, data.account_id, DebtorSpec(name, document, phone), currency,
                    minor("monto_original", data.original_amount), minor("saldo_pendiente", data.balance),
                    data.external_version,
                    to_utc_naive(data.external_updated_at) if data.external_updated_at else None,
                    data.reference, "reference" in data.model_fields_set, data.kind, data.auto_send, installments)
    if errors:
        raise invalid(errors)
    return spec


def parse_debt(obj: Any) -> DebtSpec:
    """A Debt in the API's shape (already parsed with `loads_exact`) → spec, or `Invalid`."""
    try:
        data = DebtInput.model_validate(obj)
    except ValidationError as error:
        raise invalid(error_map(error)) from None
    return debt_spec(data)


# -- the plain case, without pydantic ----------------------------------------------------------
#
# An import validates hundreds of thousands of debts, nearly all of them well formed, and
# pydantic with Decimal arithmetic was most of its time (bench/import_debts.py). A debt whose
# every field is plainly valid takes this short road; at the first field that is not, it gives
# up (None) and `parse_debt` gives the verdict and the messages, so errors have one source.
# It may give up on a valid debt (only slower) but must never accept what `parse_debt` refuses
# nor build another spec: tests/test_receivables_input_plain.py checks both on generated bodies.


def _wire_keys(model: type[ExactInput]) -> frozenset[str]:
    """The JSON keys a model takes: each field's alias, or its name where the two are the same."""
    return frozenset(field.alias or name for name, field in model.model_fields.items())


_DEBT_KEYS = _wire_keys(DebtInput)
_DEBTOR_KEYS = _wire_keys(DebtorInput)
_INSTALLMENT_KEYS = _wire_keys(InstallmentInput)
# Plain amounts: up to 15 ASCII integer digits, and up to 4 decimals (no currency has more).
# Exact in minor units and far from int()'s digit limit; anything else takes the Decimal road.
_PLAIN_DECIMALS = re.compile(r"(\d{1,15})\.(\d{1,4})", re.ASCII)
# 10 to the power of a currency's decimals: a whole amount times it is in minor units.
MINOR_SCALE = (1, 10, 100, 1000, 10000)
MAX_VERSION = 2**63 - 1
# The due dates of a file repeat (a few per month); dates are immutable, so they can be shared.
PLAIN_DATES: dict[str, dt.date] = {}


def _plain_text(value: Any, low: int, high: int) -> bool:
    """A str that pydantic takes as it is: within the bounds, and encodable (it refuses a lone
    surrogate, which a JSON escape can produce)."""
    if type(value) is not str or not low <= len(value) <= high:
        return False
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def plain_minor(value: Any, currency: str, digits: int, least: int) -> int | None:
    kind = type(value)
    if kind is str:
        if value.isdigit() and value.isascii() and len(value) <= 15:
            minor = int(value) * MINOR_SCALE[digits]
            return minor if least <= minor <= MAX_MINOR else None
        match = _PLAIN_DECIMALS.fullmatch(value)
        if match is None:
            return None
        whole, fraction = match.groups()
        if len(fraction) <= digits:
            minor = int(whole + fraction) * MINOR_SCALE[digits - len(fraction)]
        else:
            return None
    elif kind is int:
        minor = value * MINOR_SCALE[digits]
    elif kind is Decimal and value.is_finite():
        try:
            minor = to_minor(value, currency)
        except MoneyError:
            return None
    else:
        return None
    return minor if least <= minor <= MAX_MINOR else None


def plain_date(value: Any) -> dt.date | None:
    if type(value) is str:
        day = PLAIN_DATES.get(value)
        if day is not None:
            return day
    elif type(value) is not dt.date:
        return None
    try:
        day = _date(value)
    except PydanticCustomError:
        return None
    if type(value) is str and len(PLAIN_DATES) < 10_000:
        PLAIN_DATES[value] = day
    return day


def plain_timestamp(cell: str) -> dt.datetime | None:
    """A date-time cell as stored (naive UTC), or None when it is not one."""
    try:
        return to_utc_naive(_timestamp(cell))
    except PydanticCustomError:
        return None


def plain_debt_spec(obj: Any) -> DebtSpec | None:
    """`parse_debt(obj)` for a debt that passes every rule at first sight; else None (see above)."""
    if type(obj) is not dict or not obj.keys() <= _DEBT_KEYS:
        return None
    debtor = obj.get("deudor")
    if type(debtor) is not dict or not debtor.keys() <= _DEBTOR_KEYS:
        return None
    installments = obj.get("cuotas")
    if installments is not None:
        if type(installments) is not list:
            return None
        items = []
        for item in installments:
            if type(item) is not dict or not item.keys() <= _INSTALLMENT_KEYS:
                return None
            get = item.get
            items.append((get("external_id"), get("numero"), get("monto"), get("vence"), get("estado")))
        installments = items
    get = obj.get
    return plain_fields_spec(get("external_id"), get("account_id"), debtor.get("nombre"), debtor.get("documento"),
                             debtor.get("telefono"), get("moneda"), get("referencia"), "referencia" in obj,
                             get("monto_original"), get("saldo_pendiente"), get("external_version"),
                             get("external_updated_at"), get("tipo"), get("auto_send"), installments)


def plain_fields_spec(external_id: Any, account_id: Any, name: Any, document: Any, phone: Any, currency_code: Any,
                      reference: Any, reference_given: bool, original_amount: Any, balance: Any,
                      external_version: Any, external_updated_at: Any, kind: Any, auto_send: Any,
                      installments: list[tuple] | None) -> DebtSpec | None:
    """`plain_debt_spec` of a debt already taken apart (a CSV importer has no need of the dict).

    Each argument is the field's value, None when it is left out or null; `installments` holds
    one (external_id, numero, monto, vence, estado) tuple per item of `cuotas`.
    """
    if not (_plain_text(external_id, 1, 160) and _plain_text(account_id, 1, 64)
            and _plain_text(currency_code, 3, 3)):
        return None
    # An upper-cased code that is active had nothing to strip: normalize_currency would agree.
    currency = currency_code.upper()
    if currency not in ACTIVE_CODES:
        return None
    digits = MINOR_UNITS_EXCEPTIONS.get(currency, 2)

    if not _plain_text(name, 1, 255) or not (name := name.strip()):
        return None
    if document is not None and (not _plain_text(document, 1, 64) or not (document := document.strip())):
        return None
    if phone is not None:
        if not _plain_text(phone, 1, 32) or (phone := plain_phone(phone)) is None:
            return None
    elif document is None:
        return None

    if (reference is not None and not _plain_text(reference, 0, 500)) \
            or (external_version is not None
                and (type(external_version) is not int or not 0 <= external_version <= MAX_VERSION)) \
            or (kind is not None and (type(kind) is not str or kind not in DEBT_TYPES)) \
            or (auto_send is not None and type(auto_send) is not bool):
        return None
    if external_updated_at is not None:
        if type(external_updated_at) is not str:
            return None
        try:
            external_updated_at = to_utc_naive(_timestamp(external_updated_at))
        except PydanticCustomError:
            return None
    original_amount = plain_minor(original_amount, currency, digits, 1)
    balance = plain_minor(balance, currency, digits, 0)
    if original_amount is None or balance is None:
        return None
    if installments is not None:
        if len(installments) > MAX_INSTALLMENTS or (kind == "single" and len(installments) > 1):
            return None
        installments = _plain_installments(installments, currency, digits)
        if installments is None:
            return None
    return DebtSpec(external_id, account_id, DebtorSpec(name, document, phone), currency, original_amount, balance,
                    external_version, external_updated_at, reference, reference_given, kind, auto_send,
                    installments)


def plain_phone(phone: str) -> str | None:
    """The phone as stored: digits already in the stored form as they are, else normalized; None
    when it is no phone number."""
    if phone.isdigit() and phone.isascii() and 8 <= len(phone) <= 15:
        return phone
    try:
        return _normalize_phone(phone)
    except ValueError:
        return None


def _plain_installments(installments: list[tuple], currency: str, digits: int) -> list[InstallmentSpec] | None:
    found = []
    seen_ids: set[str] = set()
    seen_numbers: set[int] = set()
    for external_id, number, amount, due_date, status in installments:
        if not _plain_text(external_id, 1, 160) or type(number) is not int or not 1 <= number <= 100_000 \
                or external_id in seen_ids or number in seen_numbers \
                or (status is not None and (type(status) is not str or status not in INSTALLMENT_STATES)):
            return None
        amount = plain_minor(amount, currency, digits, 1)
        due_date = plain_date(due_date)
        if amount is None or due_date is None:
            return None
        seen_ids.add(external_id)
        seen_numbers.add(number)
        found.append(InstallmentSpec(external_id, number, amount, due_date, status))
    return found


# A CSV's auto_send cells, lower-cased.
CSV_BOOLEANS = {"true": True, "1": True, "yes": True, "si": True, "sí": True, "y": True,
                "false": False, "0": False, "no": False, "n": False}
# Currency cells as a CSV writes them ("CLP", "usd") and what they stand for, once each.
PLAIN_CURRENCIES: dict[str, tuple[str, int]] = {}


def plain_cells_text(text: str) -> bool:
    """Cells' text (joined) that holds no NUL, no U+FFFD (what undecodable bytes became) and no
    lone surrogate: text every cell of it may hold."""
    if "\x00" in text or "\ufffd" in text:
        return False
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            return False
    return True


def plain_currency(cell: str) -> tuple[str, int] | None:
    """A CSV's currency cell as (code, decimals) when it plainly names an active currency; else None."""
    currency = cell.upper()
    if len(cell) != 3 or currency not in ACTIVE_CODES:
        return None
    found = (currency, MINOR_UNITS_EXCEPTIONS.get(currency, 2))
    if len(PLAIN_CURRENCIES) < 1000:
        PLAIN_CURRENCIES[cell] = found
    return found


def plain_csv_spec(external_id: str, account_id: str, name: str, document: str, phone: str, currency_cell: str,
                   reference: str, original_amount: str, balance: str, external_version: str,
                   external_updated_at: str, kind: str, auto_send: bool | None,
                   installments: list[tuple[str, str, str, str, str]]) -> DebtSpec | None:
    """`plain_fields_spec` of a CSV debt, straight from its cells: every argument but `auto_send`
    (already read as a boolean, None when empty) is a cell's text, "" when empty, and the caller
    has checked that the text encodes (no lone surrogate), as the CSV reader's decoding ensures.
    `installments` holds each installment row's (cuota_external_id, cuota_numero, cuota_monto,
    cuota_vence, cuota_estado) cells.

    The same verdicts as `plain_fields_spec(*_csv_fields(...))` without its type checks, which
    cannot fail on text, and with the repeated cells (currency, due dates) looked up once.
    """
    if not (0 < len(external_id) <= 160 and 0 < len(account_id) <= 64 and 0 < len(name) <= 255):
        return None
    found = PLAIN_CURRENCIES.get(currency_cell) or plain_currency(currency_cell)
    if found is None:
        return None
    currency, digits = found
    if not (name := name.strip()):
        return None
    if document:
        if len(document) > 64 or not (document := document.strip()):
            return None
    else:
        document = None
    if phone:
        if len(phone) > 32 or (phone := plain_phone(phone)) is None:
            return None
    elif document is None:
        return None
    else:
        phone = None
    if len(reference) > 500 or (kind and kind not in DEBT_TYPES):
        return None
    version = None
    if external_version:
        if not (external_version.isdigit() and external_version.isascii() and len(external_version) <= 19):
            return None
        version = int(external_version)
        if version > MAX_VERSION:
            return None
    updated_at = None
    if external_updated_at and (updated_at := plain_timestamp(external_updated_at)) is None:
        return None
    original = plain_minor(original_amount, currency, digits, 1)
    balance_minor = plain_minor(balance, currency, digits, 0)
    if original is None or balance_minor is None or len(installments) > MAX_INSTALLMENTS \
            or (kind == "single" and len(installments) > 1):
        return None
    specs = []
    seen_ids: set[str] = set()
    seen_numbers: set[int] = set()
    scale = MINOR_SCALE[digits]
    for installment_id, number_cell, amount_cell, due_cell, status in installments:
        if not (0 < len(installment_id) <= 160 and number_cell.isdigit() and number_cell.isascii()
                and len(number_cell) <= 6) \
                or installment_id in seen_ids or (status and status not in INSTALLMENT_STATES):
            return None
        number = int(number_cell)
        day = PLAIN_DATES.get(due_cell) or plain_date(due_cell)
        # plain_minor's first case written out: a schedule's amounts are whole numbers far more often than not.
        if amount_cell.isdigit() and amount_cell.isascii() and len(amount_cell) <= 15:
            amount = int(amount_cell) * scale
            if amount > MAX_MINOR:
                return None
        else:
            amount = plain_minor(amount_cell, currency, digits, 1)
        if not 1 <= number <= 100_000 or number in seen_numbers or day is None or not amount:
            return None
        seen_ids.add(installment_id)
        seen_numbers.add(number)
        specs.append(InstallmentSpec(installment_id, number, amount, day, status or None))
    # A CSV debt always states its referencia (an empty cell clears it) and is a whole snapshot.
    return DebtSpec(external_id, account_id, DebtorSpec(name, document, phone), currency, original, balance_minor,
                    version, updated_at, reference or None, True, kind or None, auto_send, specs)


def payment_spec(data: PaymentInput) -> PaymentSpec:
    try:
        currency = normalize_currency(data.currency)
    except MoneyError as error:
        raise invalid({"moneda": [str(error)]}) from None
    return PaymentSpec(external_id=data.external_id, debt_external_id=data.debt_external_id, amount=data.amount,
                       currency=currency, method=data.method, paid_at=to_utc_naive(data.paid_at))


def parse_amount(value: Any) -> Decimal:
    """An amount from a Python caller (the CLI, a gateway callback): int, Decimal or decimal string."""
    try:
        return _decimal(value)
    except PydanticCustomError as error:
        raise invalid({"monto": [error.message()]}) from None
