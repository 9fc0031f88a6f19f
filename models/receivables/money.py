"""Money for receivables: ISO 4217 codes, their minor units, and exact conversions.

Amounts are stored as integers in the currency's minor units (cents, or whole pesos for CLP),
so sums and comparisons are exact on SQLite and PostgreSQL alike. On the wire they are decimal
numbers with at most the currency's number of decimals.
"""

from __future__ import annotations

from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow, Rounded

# Active ISO 4217 codes whose minor unit is not 2. Every other code in ACTIVE_CODES has 2.
# (Precious metals and testing codes such as XAU or XTS have no minor unit and are not money here.)
MINOR_UNITS_EXCEPTIONS = {
    # 0 decimals
    "BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
    "RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
    # 3 decimals
    "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
    # 4 decimals (Chile's Unidad de Fomento, Uruguay's wage index unit)
    "CLF": 4, "UYW": 4,
}

ACTIVE_CODES = frozenset({
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BGN", "BHD",
    "BIF", "BMD", "BND", "BOB", "BOV", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHE", "CHF",
    "CHW", "CLF", "CLP", "CNY", "COP", "COU", "CRC", "CUC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD",
    "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP", "GMD", "GNF", "GTQ", "GYD", "HKD",
    "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR", "ISK", "JMD", "JOD", "JPY", "KES", "KGS", "KHR",
    "KMF", "KPW", "KRW", "KWD", "KYD", "KZT", "LAK", "LBP", "LKR", "LRD", "LSL", "LYD", "MAD", "MDL", "MGA",
    "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR", "MWK", "MXN", "MXV", "MYR", "MZN", "NAD", "NGN", "NIO",
    "NOK", "NPR", "NZD", "OMR", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB",
    "RWF", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLE", "SLL", "SOS", "SRD", "SSP", "STN", "SVC",
    "SYP", "SZL", "THB", "TJS", "TMT", "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "USN",
    "UYI", "UYU", "UYW", "UZS", "VED", "VES", "VND", "VUV", "WST", "XAF", "XCD", "XCG", "XOF", "XPF", "YER",
    "ZAR", "ZMW", "ZWG", "ZWL",
})

# Amounts are capped at 15 significant digits (in minor units): every such value survives a
# round trip through a JSON number (an IEEE double) unchanged, whatever the client parses with.
MAX_MINOR = 10**15 - 1
_EXACT = Context(prec=60, traps=[Inexact, Rounded, InvalidOperation, Overflow])


class MoneyError(ValueError):
    """An amount or currency that cannot be money; the message says why, for a 422."""


def normalize_currency(code: str) -> str:
    upper = code.strip().upper()
    if len(upper) != 3 or not upper.isalpha() or upper not in ACTIVE_CODES:
        raise MoneyError(f"{code!r} is not an ISO 4217 currency code")
    return upper


def minor_units(currency: str) -> int:
    return MINOR_UNITS_EXCEPTIONS.get(currency, 2)


def to_minor(amount: Decimal, currency: str) -> int:
    """`amount` in the currency's minor units; refuses more decimals than the currency has.

    Scaled in a context wide enough to be exact for every amount that passes the bounds, and
    trapping inexact results: the default context rounds at 28 digits, which would quietly turn
    1.00000000000000000000000000001 into 1.00.
    """
    if not isinstance(amount, Decimal) or not amount.is_finite():
        raise MoneyError("must be a finite decimal number")
    # Checked before any conversion: int(Decimal("1E+999999999")) would build a billion digits.
    if amount and amount.adjusted() > 18:
        raise MoneyError(f"must be at most {from_minor(MAX_MINOR, currency)}")
    digits = MINOR_UNITS_EXCEPTIONS.get(currency, 2)
    try:
        scaled = amount.scaleb(digits, _EXACT)
    except ArithmeticError:  # more significant digits than any amount has
        scaled = None
    minor = int(scaled) if scaled is not None else None
    if minor is None or minor != scaled:
        raise MoneyError(f"{currency} amounts have at most {digits} decimal{'s' if digits != 1 else ''}")
    if minor > MAX_MINOR or minor < -MAX_MINOR:
        raise MoneyError(f"must be at most {from_minor(MAX_MINOR, currency)}")
    return minor


def from_minor(minor: int, currency: str) -> Decimal:
    return Decimal(minor).scaleb(-minor_units(currency))


def amount_json(minor: int, currency: str) -> int | float:
    """The amount as a JSON number: an integer for 0-decimal currencies, else a float.

    Exact: amounts have at most 15 significant digits (MAX_MINOR), and a double's shortest
    representation of such a value is the value itself (12345678.91 prints as 12345678.91).
    """
    digits = minor_units(currency)
    if digits == 0:
        return minor
    return float(from_minor(minor, currency))


def format_amount(minor: int, currency: str) -> str:
    """Human text for a message, Spanish style: `CLP 150.000`, `USD 1.234,50`."""
    digits = minor_units(currency)
    sign = "-" if minor < 0 else ""
    whole, fraction = divmod(abs(minor), 10**digits)
    grouped = f"{whole:,}".replace(",", ".")
    text = f"{grouped},{fraction:0{digits}d}" if digits else grouped
    return f"{currency} {sign}{text}"
