"""Numbers, money and dates as a reader's locale writes them (CLDR's data, through Babel), and
amounts read back the way that reader types them.

Money: the locale's currency pattern, with two deliberate changes.
1. A bare `$` becomes the ISO code: Chile, Colombia, Mexico and the United States all write their
   currency `$`, and a portal of companies in four countries cannot tell them apart. es_CL writes
   150000 pesos `CLP 150.000` (not `$150.000`); a distinctive symbol stays: pt_BR `R$ 1.234,50`.
2. A code or symbol that ends (or starts) with a letter is kept apart from the digits by a
   no-break space, CLDR's currency spacing, which Babel does not apply: `CLP 150.000`, not
   `CLP150.000`.
Amounts keep every decimal they have (never rounded away) and at least the currency's.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation

from babel import Locale
from babel.dates import format_skeleton, format_time
from babel.numbers import NumberFormatError, format_currency, format_decimal, get_currency_symbol, parse_decimal

NBSP = "\u00a0"
AMBIGUOUS_SYMBOL = "$"

Number = int | float | Decimal


def _decimal(value: Number | str) -> Decimal:
    # A float is read from its shortest text (amount_json's 1234.5), not its binary expansion.
    return Decimal(str(value)) if isinstance(value, float | str) else Decimal(value)


def money(amount: Number | str, currency: str, locale: Locale) -> str:
    symbol = get_currency_symbol(currency, locale)
    shown = currency if symbol == AMBIGUOUS_SYMBOL else symbol
    text = format_currency(_decimal(amount), currency, locale=locale, decimal_quantization=False)
    if shown != symbol:
        text = text.replace(symbol, shown, 1)
    if shown[-1].isalpha():
        text = re.sub(f"{re.escape(shown)}(?=\\d)", shown + NBSP, text, count=1)
    if shown[0].isalpha():
        text = re.sub(f"(?<=\\d){re.escape(shown)}", NBSP + shown, text, count=1)
    return text


def number(value: Number, locale: Locale) -> str:
    return format_decimal(value, locale=locale, decimal_quantization=False)


def amount(value: Number | str, digits: int, locale: Locale) -> str:
    """An amount with exactly `digits` decimals and no currency, as a reader types it: `1.234,50`."""
    return format_decimal(_decimal(value), format="#,##0" + ("." + "0" * digits if digits else ""), locale=locale)


def _aware(value: dt.datetime | str) -> dt.datetime:
    """Stored times are naive UTC (models.clock); the API's are ISO 8601 text."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def datetime(value: dt.datetime | str, locale: Locale, zone: dt.tzinfo) -> str:
    """The locale's medium date and short time, in the zone: `14 mar 2026, 15:04` (es_CL)."""
    moment = _aware(value).astimezone(zone)
    pattern = locale.datetime_formats["medium"]
    return pattern.format(format_time(moment, "short", tzinfo=zone, locale=locale),
                          format_skeleton("yMMMd", moment, tzinfo=zone, locale=locale))


def time(value: dt.datetime | str, locale: Locale, zone: dt.tzinfo) -> str:
    return format_time(_aware(value).astimezone(zone), "medium", tzinfo=zone, locale=locale)


def date(value: dt.date | str, locale: Locale) -> str:
    """A calendar day (a due date): no time zone applies."""
    if isinstance(value, str):
        value = dt.date.fromisoformat(value[:10])
    return format_skeleton("yMMMd", value, locale=locale)


def parse_amount(text: str, locale: Locale) -> Decimal:
    """An amount typed by a reader of `locale`: `150.000` is 150000 to a Chilean and 150 to an
    American. Strict: a text whose separators do not fit the locale is refused (ValueError) rather
    than guessed, so a payment is never recorded a thousand times too small."""
    try:
        value = parse_decimal(text.strip().replace(" ", "").replace(NBSP, ""), locale=locale, strict=True)
    except (NumberFormatError, InvalidOperation):
        raise ValueError(text) from None
    if not value.is_finite():
        raise ValueError(text)
    return value
