"""The wire shapes of receivables (Debt, Payment, resolution) and their exact parsing.

One validation path for every way a debt arrives (the API, a batch element, a JSON line, a CSV
row turned into the same shape), so the rules cannot differ between them:

1. bytes → Python with `loads_exact`: JSON numbers become `Decimal`, never `float`
   (pydantic's JSON mode goes through a double: 1.0000000000000000001 would become 1);
2. the pydantic models below (strict, unknown fields refused) check types and shapes;
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
from models.events.types import PAYMENT_METHODS
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


class DeudorInput(ExactInput):
    nombre: _text(255, 1)
    documento: _text(64, 1) | None = None
    telefono: _text(32, 1) | None = Field(None, description="digits; spaces, dashes, dots, parentheses and "
                                                            "a leading + are removed")

    @model_validator(mode="after")
    def _one_key(self):
        if self.documento is None and self.telefono is None:
            raise PydanticCustomError("debtor_key", "needs documento or telefono (or both)")
        return self


class InstallmentInput(ExactInput):
    external_id: _text(160, 1)
    numero: Annotated[int, Field(ge=1, le=100_000)]
    monto: PositiveAmount
    vence: Day
    estado: Literal[INSTALLMENT_STATES] | None = None  # type: ignore[valid-type]


class DebtInput(ExactInput):
    external_id: _text(160, 1)
    account_id: _text(64, 1)
    external_version: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    external_updated_at: Timestamp | None = None
    deudor: DeudorInput
    moneda: _text(3, 3)
    referencia: _text(500) | None = None
    monto_original: PositiveAmount
    saldo_pendiente: NonNegativeAmount
    tipo: Literal[DEBT_TYPES] | None = None  # type: ignore[valid-type]
    auto_send: bool | None = None
    cuotas: Annotated[list[InstallmentInput], Field(max_length=MAX_INSTALLMENTS)] | None = None


class DebtBatchInput(ExactInput):
    # Elements are validated one by one (a bad element is reported, the others are saved), so
    # the list itself only checks its size here; the document still shows the Debt schema.
    deudas: Annotated[list[Any], Field(min_length=1, max_length=MAX_BATCH),
                      WithJsonSchema({"type": "array", "minItems": 1, "maxItems": MAX_BATCH,
                                      "items": {"$ref": "#/components/schemas/DebtInput"}})]


class PaymentInput(ExactInput):
    external_id: _text(160, 1)
    deuda_external_id: _text(160, 1)
    monto: PositiveAmount
    moneda: _text(3, 3)
    metodo: Literal[PAYMENT_METHODS]  # type: ignore[valid-type]
    pagado_en: Timestamp


class ResolveInput(ExactInput):
    status: Literal[RESOLUTIONS]  # type: ignore[valid-type]
    reason: _text(500) | None = None


# -- specs: what the domain works with ---------------------------------------------------------

@dataclass(slots=True)
class InstallmentSpec:
    external_id: str
    numero: int
    monto: int  # minor units
    vence: dt.date
    estado: str | None  # as the ERP states it; None = pending


@dataclass(slots=True)
class DeudorSpec:
    nombre: str
    documento: str | None
    telefono: str | None


@dataclass(slots=True)
class DebtSpec:
    external_id: str
    account_id: str
    deudor: DeudorSpec
    moneda: str
    monto_original: int
    saldo_pendiente: int
    external_version: int | None = None
    external_updated_at: dt.datetime | None = None  # naive UTC
    # Optional fields: left out (the `None`s below, or `referencia_given=False`) keeps the stored value.
    referencia: str | None = None
    referencia_given: bool = False
    tipo: str | None = None
    auto_send: bool | None = None
    cuotas: list[InstallmentSpec] | None = None


@dataclass
class PaymentSpec:
    external_id: str | None
    deuda_external_id: str
    monto: Any  # Decimal as received; converted with the debt's currency
    moneda: str | None
    metodo: str
    pagado_en: dt.datetime | None  # naive UTC
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
        currency = normalize_currency(data.moneda)
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

    deudor = data.deudor
    nombre = deudor.nombre.strip()
    if not nombre:
        errors["deudor.nombre"] = ["must not be blank"]
    documento = None
    if deudor.documento is not None:
        documento = deudor.documento.strip()
        if not documento:
            errors["deudor.documento"] = ["must not be blank"]
    telefono = None
    if deudor.telefono is not None:
        try:
            telefono = _normalize_phone(deudor.telefono)
        except ValueError as error:
            errors["deudor.telefono"] = [str(error)]

    cuotas = None
    if data.cuotas is not None:
        cuotas = []
        seen_ids: set[str] = set()
        seen_numbers: set[int] = set()
        for index, item in enumerate(data.cuotas):
            if item.external_id in seen_ids:
                errors.setdefault(f"cuotas.{index}.external_id", []).append("appears twice in this debt")
            if item.numero in seen_numbers:
                errors.setdefault(f"cuotas.{index}.numero", []).append("appears twice in this debt")
            seen_ids.add(item.external_id)
            seen_numbers.add(item.numero)
            cuotas.append(InstallmentSpec(item.external_id, item.numero, minor(f"cuotas.{index}.monto", item.monto),
                                          item.vence, item.estado))
        if data.tipo == "single" and len(cuotas) > 1:
            errors["tipo"] = ["a single debt has at most one installment; use installments"]

    spec = DebtSpec(data.external_id, data.account_id, DeudorSpec(nombre, documento, telefono), currency,
                    minor("monto_original", data.monto_original), minor("saldo_pendiente", data.saldo_pendiente),
                    data.external_version,
                    to_utc_naive(data.external_updated_at) if data.external_updated_at else None,
                    data.referencia, "referencia" in data.model_fields_set, data.tipo, data.auto_send, cuotas)
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

_DEBT_FIELDS = frozenset(DebtInput.model_fields)
_DEUDOR_FIELDS = frozenset(DeudorInput.model_fields)
_INSTALLMENT_FIELDS = frozenset(InstallmentInput.model_fields)
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
    if type(obj) is not dict or not obj.keys() <= _DEBT_FIELDS:
        return None
    deudor = obj.get("deudor")
    if type(deudor) is not dict or not deudor.keys() <= _DEUDOR_FIELDS:
        return None
    cuotas = obj.get("cuotas")
    if cuotas is not None:
        if type(cuotas) is not list:
            return None
        items = []
        for item in cuotas:
            if type(item) is not dict or not item.keys() <= _INSTALLMENT_FIELDS:
                return None
            get = item.get
            items.append((get("external_id"), get("numero"), get("monto"), get("vence"), get("estado")))
        cuotas = items
    get = obj.get
    return plain_fields_spec(get("external_id"), get("account_id"), deudor.get("nombre"), deudor.get("documento"),
                             deudor.get("telefono"), get("moneda"), get("referencia"), "referencia" in obj,
                             get("monto_original"), get("saldo_pendiente"), get("external_version"),
                             get("external_updated_at"), get("tipo"), get("auto_send"), cuotas)


def plain_fields_spec(external_id: Any, account_id: Any, nombre: Any, documento: Any, telefono: Any, moneda: Any,
                      referencia: Any, referencia_given: bool, monto_original: Any, saldo_pendiente: Any,
                      external_version: Any, external_updated_at: Any, tipo: Any, auto_send: Any,
                      cuotas: list[tuple] | None) -> DebtSpec | None:
    """`plain_debt_spec` of a debt already taken apart (a CSV importer has no need of the dict).

    Each argument is the field's value, None when it is left out or null; `cuotas` holds one
    (external_id, numero, monto, vence, estado) tuple per installment, None for the same.
    """
    if not (_plain_text(external_id, 1, 160) and _plain_text(account_id, 1, 64) and _plain_text(moneda, 3, 3)):
        return None
    # An upper-cased code that is active had nothing to strip: normalize_currency would agree.
    currency = moneda.upper()
    if currency not in ACTIVE_CODES:
        return None
    digits = MINOR_UNITS_EXCEPTIONS.get(currency, 2)

    if not _plain_text(nombre, 1, 255) or not (nombre := nombre.strip()):
        return None
    if documento is not None and (not _plain_text(documento, 1, 64) or not (documento := documento.strip())):
        return None
    if telefono is not None:
        if not _plain_text(telefono, 1, 32) or (telefono := plain_phone(telefono)) is None:
            return None
    elif documento is None:
        return None

    if (referencia is not None and not _plain_text(referencia, 0, 500)) \
            or (external_version is not None
                and (type(external_version) is not int or not 0 <= external_version <= MAX_VERSION)) \
            or (tipo is not None and (type(tipo) is not str or tipo not in DEBT_TYPES)) \
            or (auto_send is not None and type(auto_send) is not bool):
        return None
    if external_updated_at is not None:
        if type(external_updated_at) is not str:
            return None
        try:
            external_updated_at = to_utc_naive(_timestamp(external_updated_at))
        except PydanticCustomError:
            return None
    monto_original = plain_minor(monto_original, currency, digits, 1)
    saldo_pendiente = plain_minor(saldo_pendiente, currency, digits, 0)
    if monto_original is None or saldo_pendiente is None:
        return None
    if cuotas is not None:
        if len(cuotas) > MAX_INSTALLMENTS or (tipo == "single" and len(cuotas) > 1):
            return None
        cuotas = _plain_installments(cuotas, currency, digits)
        if cuotas is None:
            return None
    return DebtSpec(external_id, account_id, DeudorSpec(nombre, documento, telefono), currency, monto_original,
                    saldo_pendiente, external_version, external_updated_at, referencia, referencia_given, tipo,
                    auto_send, cuotas)


def plain_phone(telefono: str) -> str | None:
    """The phone as stored: digits already in the stored form as they are, else normalized; None
    when it is no phone number."""
    if telefono.isdigit() and telefono.isascii() and 8 <= len(telefono) <= 15:
        return telefono
    try:
        return _normalize_phone(telefono)
    except ValueError:
        return None


def _plain_installments(cuotas: list[tuple], currency: str, digits: int) -> list[InstallmentSpec] | None:
    found = []
    seen_ids: set[str] = set()
    seen_numbers: set[int] = set()
    for external_id, numero, monto, vence, estado in cuotas:
        if not _plain_text(external_id, 1, 160) or type(numero) is not int or not 1 <= numero <= 100_000 \
                or external_id in seen_ids or numero in seen_numbers \
                or (estado is not None and (type(estado) is not str or estado not in INSTALLMENT_STATES)):
            return None
        monto = plain_minor(monto, currency, digits, 1)
        vence = plain_date(vence)
        if monto is None or vence is None:
            return None
        seen_ids.add(external_id)
        seen_numbers.add(numero)
        found.append(InstallmentSpec(external_id, numero, monto, vence, estado))
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


def plain_currency(moneda: str) -> tuple[str, int] | None:
    """A CSV's currency cell as (code, decimals) when it plainly names an active currency; else None."""
    currency = moneda.upper()
    if len(moneda) != 3 or currency not in ACTIVE_CODES:
        return None
    found = (currency, MINOR_UNITS_EXCEPTIONS.get(currency, 2))
    if len(PLAIN_CURRENCIES) < 1000:
        PLAIN_CURRENCIES[moneda] = found
    return found


def plain_csv_spec(external_id: str, account_id: str, nombre: str, documento: str, telefono: str, moneda: str,
                   referencia: str, monto_original: str, saldo_pendiente: str, external_version: str,
                   external_updated_at: str, tipo: str, auto_send: bool | None,
                   cuotas: list[tuple[str, str, str, str, str]]) -> DebtSpec | None:
    """`plain_fields_spec` of a CSV debt, straight from its cells: every argument but `auto_send`
    (already read as a boolean, None when empty) is a cell's text, "" when empty, and the caller
    has checked that the text encodes (no lone surrogate), as the CSV reader's decoding ensures.
    `cuotas` holds each installment row's (external_id, numero, monto, vence, estado) cells.

    The same verdicts as `plain_fields_spec(*_csv_fields(...))` without its type checks, which
    cannot fail on text, and with the repeated cells (currency, due dates) looked up once.
    """
    if not (0 < len(external_id) <= 160 and 0 < len(account_id) <= 64 and 0 < len(nombre) <= 255):
        return None
    found = PLAIN_CURRENCIES.get(moneda) or plain_currency(moneda)
    if found is None:
        return None
    currency, digits = found
    if not (nombre := nombre.strip()):
        return None
    if documento:
        if len(documento) > 64 or not (documento := documento.strip()):
            return None
    else:
        documento = None
    if telefono:
        if len(telefono) > 32 or (telefono := plain_phone(telefono)) is None:
            return None
    elif documento is None:
        return None
    else:
        telefono = None
    if len(referencia) > 500 or (tipo and tipo not in DEBT_TYPES):
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
    original = plain_minor(monto_original, currency, digits, 1)
    saldo = plain_minor(saldo_pendiente, currency, digits, 0)
    if original is None or saldo is None or len(cuotas) > MAX_INSTALLMENTS or (tipo == "single" and len(cuotas) > 1):
        return None
    installments = []
    seen_ids: set[str] = set()
    seen_numbers: set[int] = set()
    scale = MINOR_SCALE[digits]
    for cuota_id, numero, monto, vence, estado in cuotas:
        if not (0 < len(cuota_id) <= 160 and numero.isdigit() and numero.isascii() and len(numero) <= 6) \
                or cuota_id in seen_ids or (estado and estado not in INSTALLMENT_STATES):
            return None
        number = int(numero)
        day = PLAIN_DATES.get(vence) or plain_date(vence)
        # plain_minor's first case written out: a schedule's amounts are whole numbers far more often than not.
        if monto.isdigit() and monto.isascii() and len(monto) <= 15:
            amount = int(monto) * scale
            if amount > MAX_MINOR:
                return None
        else:
            amount = plain_minor(monto, currency, digits, 1)
        if not 1 <= number <= 100_000 or number in seen_numbers or day is None or not amount:
            return None
        seen_ids.add(cuota_id)
        seen_numbers.add(number)
        installments.append(InstallmentSpec(cuota_id, number, amount, day, estado or None))
    # A CSV debt always states its referencia (an empty cell clears it) and is a whole snapshot.
    return DebtSpec(external_id, account_id, DeudorSpec(nombre, documento, telefono), currency, original, saldo,
                    version, updated_at, referencia or None, True, tipo or None, auto_send, installments)


def payment_spec(data: PaymentInput) -> PaymentSpec:
    try:
        currency = normalize_currency(data.moneda)
    except MoneyError as error:
        raise invalid({"moneda": [str(error)]}) from None
    return PaymentSpec(external_id=data.external_id, deuda_external_id=data.deuda_external_id, monto=data.monto,
                       moneda=currency, metodo=data.metodo, pagado_en=to_utc_naive(data.pagado_en))


def parse_amount(value: Any) -> Decimal:
    """An amount from a Python caller (the CLI, a gateway callback): int, Decimal or decimal string."""
    try:
        return _decimal(value)
    except PydanticCustomError as error:
        raise invalid({"monto": [error.message()]}) from None
