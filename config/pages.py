"""Server-rendered pages in the reader's language: Jinja2 with its i18n extension.

One environment per language, each with that language's catalog installed once: installing
translations changes an environment's globals, so doing it per request would let one thread's
page be written in another's language. Templates write `_()`, `ngettext()` and `pgettext()`
(Jinja's newstyle gettext: `_("Hello %(name)s", name=x)` formats after translating and escapes
`x`), and format with the filters below, which read the page's `page_locale`:

    {{ amount | money(currency) }}   CLP 150.000, R$ 1.234,50 (config/formats.py)
    {{ count | number }}             1.234.567
    {{ moment | datetime }}          14 mar 2026, 15:04, in the company's time zone; "—" for none
    {{ moment | time }}              15:04:05, in the company's time zone
    {{ day | date }}                 14 mar 2026
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import jinja2

from config import formats
from config.i18n import LANGUAGES, PageLocale, translations

NOTHING = "—"


def _locale(context: jinja2.runtime.Context) -> PageLocale:
    return context["page_locale"]


@jinja2.pass_context
def _money(context, amount, currency: str) -> str:
    return NOTHING if amount is None else formats.money(amount, currency, _locale(context).formats)


@jinja2.pass_context
def _number(context, value) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return NOTHING if value is None else str(value)
    return formats.number(value, _locale(context).formats)


@jinja2.pass_context
def _datetime(context, value) -> str:
    page_locale = _locale(context)
    return formats.datetime(value, page_locale.formats, page_locale.zone) if value else NOTHING


@jinja2.pass_context
def _time(context, value) -> str:
    page_locale = _locale(context)
    return formats.time(value, page_locale.formats, page_locale.zone) if value else NOTHING


@jinja2.pass_context
def _date(context, value) -> str:
    return formats.date(value, _locale(context).formats) if value else NOTHING


FILTERS = {"money": _money, "number": _number, "datetime": _datetime, "time": _time, "date": _date}


class Pages:
    """The templates of one folder, rendered in any of the LANGUAGES."""

    def __init__(self, folder: Path, globals: dict[str, object] | None = None,
                 filters: dict[str, Callable] | None = None):
        self.folder = folder
        self.globals = globals or {}
        self.filters = filters or {}
        self._environments: dict[str, jinja2.Environment] = {}

    def environment(self, language: str) -> jinja2.Environment:
        """Made on first use, kept for the life of the process (two threads that both make it
        at first keep one; either is right)."""
        if language not in self._environments:
            self._environments[language] = self._make(language)
        return self._environments[language]

    def _make(self, language: str) -> jinja2.Environment:
        if language not in LANGUAGES:
            raise ValueError(f"no pages in {language!r}")
        environment = jinja2.Environment(
            loader=jinja2.FileSystemLoader(self.folder),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=["jinja2.ext.i18n"],
        )
        environment.install_gettext_translations(translations(language), newstyle=True)
        environment.filters.update({**FILTERS, **self.filters})
        environment.globals.update(self.globals)
        return environment

    def render(self, page_locale: PageLocale, template: str, **values) -> str:
        return self.environment(page_locale.language).get_template(template).render(page_locale=page_locale,
                                                                                   **values)
