"""The languages pages speak, their catalogs, and the locale each reader gets.

Pages are written in English (the catalogs' msgids) and translated into Spanish (neutral Latin
American) and Portuguese (Brazil). The catalogs are `config/locales/<language>/LC_MESSAGES/
messages.po`, shared by every package that renders pages; `scripts/i18n` extracts the messages
and updates them. A process compiles a catalog in memory the first time a page needs it (a few
milliseconds), so a clean clone runs without a build step and no compiled file can go stale.

A reader's locale (`choose`):
1. the language: the user's own choice, else the first language of the browser's
   Accept-Language that the pages speak, else the company's locale's, else English;
2. the formats of numbers, money and dates: the country the browser names with that language
   (`es-CL`), else the company's locale when it speaks it, else the language's own default
   (`es_419`, `pt_BR`, `en_US`): a Spanish reader of a Chilean company reads `CLP 150.000`;
3. times in the company's time zone.
"""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# Babel takes about 25 ms to import. It is imported where a locale is parsed or a catalog
# compiled, so that a process that does neither (a command that looks its company up, an ERP
# import) does not pay for it.
if TYPE_CHECKING:
    from babel import Locale
    from babel.support import NullTranslations

LOCALES_DIR = Path(__file__).with_name("locales")
DOMAIN = "messages"
SOURCE_LANGUAGE = "en"
# The languages pages speak, each named in itself (a selector lists them so).
LANGUAGES = {"en": "English", "es": "Español", "pt_BR": "Português (Brasil)"}
# A language's formats when neither the browser nor the company names a country for it.
DEFAULT_FORMATS = {"en": "en_US", "es": "es_419", "pt_BR": "pt_BR"}
# A browser's language subtag -> the language the pages speak for it (Portuguese is Brazil's).
_BY_SUBTAG = {"en": "en", "es": "es", "pt": "pt_BR"}
# An Accept-Language header longer than this is read only this far: nobody lists 100 languages.
MAX_ACCEPT_LANGUAGE = 1000


def N_(message: str) -> str:
    """Marks text for the catalogs that is translated later, once the reader's language is known."""
    return message


def NC_(context: str, message: str) -> str:
    """N_ with a context (msgctxt): the same English word translated by what it describes."""
    return message


@functools.cache
def translations(language: str) -> NullTranslations:
    """The compiled catalog of a language; English is the source and needs none."""
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po
    from babel.support import NullTranslations, Translations

    if language == SOURCE_LANGUAGE:
        return NullTranslations()
    with (LOCALES_DIR / language / "LC_MESSAGES" / f"{DOMAIN}.po").open("rb") as source:
        catalog = read_po(source, locale=language, domain=DOMAIN)
    compiled = io.BytesIO()
    write_mo(compiled, catalog)  # fuzzy entries are left out: an unreviewed guess is not shown
    compiled.seek(0)
    return Translations(compiled, domain=DOMAIN)


@dataclass(frozen=True)
class PageLocale:
    """What a page is written in for one reader."""

    language: str  # a key of LANGUAGES: the catalog
    formats: Locale  # numbers, money, dates
    zone: ZoneInfo  # the company's time zone

    @property
    def html_lang(self) -> str:
        """The language as <html lang> and the browser's Intl name it (BCP 47)."""
        return self.language.replace("_", "-")

    @property
    def formats_tag(self) -> str:
        return str(self.formats).replace("_", "-")

    def gettext(self, message: str, /, **values) -> str:
        # Always a format, as in templates (Jinja's newstyle gettext): a literal % is written %%.
        return translations(self.language).gettext(message) % values

    def ngettext(self, singular: str, plural: str, count: int, /, **values) -> str:
        return translations(self.language).ngettext(singular, plural, count) % {"num": count, **values}

    def pgettext(self, context: str, message: str) -> str:
        return translations(self.language).pgettext(context, message)


def accepted_tags(header: str | None) -> list[str]:
    """The language tags of an Accept-Language header, most wanted first (RFC 9110, 12.5.4):
    by q-value, ties in the order given; q=0 (not wanted), `*` and unreadable items are left out."""
    weighted = []
    for position, item in enumerate((header or "")[:MAX_ACCEPT_LANGUAGE].split(",")):
        tag, _, parameters = item.strip().partition(";")
        tag, quality = tag.strip(), 1.0
        for parameter in parameters.split(";"):
            name, _, value = parameter.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = -1.0
        if tag and tag != "*" and 0 < quality <= 1 and all(part.isalnum() for part in tag.split("-")):
            weighted.append((-quality, position, tag))
    return [tag for _quality, _position, tag in sorted(weighted)]


def language_of(tag: str) -> str | None:
    """The language the pages speak for a tag or locale (`pt-PT` and `pt_BR` -> `pt_BR`), if any.

    Matched on the language subtag alone: Babel's negotiation leaves `pt` and `pt-PT` unmatched
    when the only Portuguese is `pt_BR`, and a Portuguese reader is better served by it than by English."""
    return _BY_SUBTAG.get(tag.replace("_", "-").split("-")[0].lower())


def country_locale(tag: str) -> Locale | None:
    """The locale of a tag that names a country CLDR knows (`es-CL` -> es_CL); None for a bare
    language or a region of several countries (`es-419`), which say nothing about formats."""
    from babel import Locale, UnknownLocaleError, localedata

    try:
        locale = Locale.parse(tag.replace("-", "_"))
    except (ValueError, UnknownLocaleError):
        return None
    if not locale.territory or not locale.territory.isalpha() or not localedata.exists(str(locale)):
        return None
    return locale


def company_locale(value: str) -> str:
    """A company's locale as stored (`es-cl` -> `es_CL`): a country's locale in a language the
    pages speak. ValueError, naming what is accepted, for anything else."""
    locale = country_locale(value.strip())
    if locale is None or language_of(str(locale)) is None or locale.script:
        raise ValueError(f"{value!r} is not a locale of a country in Spanish, Portuguese or English "
                         "(es_CL, es_CO, es_MX, pt_BR, en_US, ...)")
    return str(locale)


def time_zone(name: str) -> ZoneInfo:
    """An IANA time zone; ValueError for a name that is not one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not an IANA time zone (America/Santiago, America/Sao_Paulo, UTC, ...)") from None


def choose(chosen: str | None, accept_language: str | None, company: str | None,
           timezone: str | None) -> PageLocale:
    """The locale of a page for a reader (the module's docstring): the user's `chosen` language
    (a key of LANGUAGES, or None to follow the browser), the browser's Accept-Language header, and
    the company's locale and time zone (None before the company is known: the sign-in page)."""
    from babel import Locale

    tags = accepted_tags(accept_language)
    language = chosen if chosen in LANGUAGES else None
    language = language or next((found for tag in tags if (found := language_of(tag))), None)
    language = language or (language_of(company) if company else None) or SOURCE_LANGUAGE
    formats = next((locale for tag in tags if language_of(tag) == language and (locale := country_locale(tag))),
                   None)
    if formats is None and company and language_of(company) == language:
        formats = Locale.parse(company)
    try:
        zone = ZoneInfo(timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    return PageLocale(language, formats or Locale.parse(DEFAULT_FORMATS[language]), zone)
