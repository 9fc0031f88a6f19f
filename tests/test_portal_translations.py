"""Every message of the pages is translated into Spanish and Portuguese (Brazil): extracted fresh
from the sources with scripts/i18n, each catalog holds every message, translated (every plural
form), not fuzzy, with the msgid's placeholders, and nothing the sources no longer say. And no
template writes text a reader sees without marking it for translation."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

from config.i18n import LANGUAGES, LOCALES_DIR, SOURCE_LANGUAGE
from portal.labels import LABELS
from tests.live import ROOT

TRANSLATED = [language for language in LANGUAGES if language != SOURCE_LANGUAGE]
# Every folder of templates scripts/i18n extracts from (babel.cfg), so a new web package's
# templates are scanned as soon as they are extracted.
TEMPLATE_FOLDERS = [ROOT / pattern.split("/**")[0] for pattern in
                    re.findall(r"^\[jinja2\.ext\.babel_extract:\s*(\S+)\]", (ROOT / "babel.cfg").read_text(), re.M)]


@pytest.fixture(scope="module")
def extracted(tmp_path_factory) -> Catalog:
    """The messages the sources say now, as scripts/i18n extracts them."""
    pot = tmp_path_factory.mktemp("i18n") / "messages.pot"
    subprocess.run([str(ROOT / "scripts" / "i18n"), "extract", str(pot)], check=True, capture_output=True,
                   env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})
    with pot.open("rb") as source:
        return read_po(source)


def catalog_of(language: str, folder: Path = LOCALES_DIR) -> Catalog:
    with (folder / language / "LC_MESSAGES" / "messages.po").open("rb") as source:
        return read_po(source, locale=language)


def _key(message) -> tuple:
    return message.context, message.id


def problems(sources: Catalog, catalog: Catalog) -> list[str]:
    """What keeps a catalog from covering the sources, one line each."""
    wanted = {_key(message): message for message in sources if message.id}
    held = {_key(message): message for message in catalog if message.id}
    found = [f"missing: {key}" for key in wanted if key not in held]
    found += [f"obsolete: {key}" for key in held if key not in wanted]
    found += [f"obsolete: {key}" for key in catalog.obsolete]
    for key, message in held.items():
        forms = message.string if isinstance(message.string, tuple) else (message.string,)
        if isinstance(message.id, tuple) and len(forms) != catalog.num_plurals:
            found.append(f"{catalog.num_plurals} plural forms wanted: {key}")
        if not all(forms):
            found.append(f"untranslated: {key}")
        if message.fuzzy:
            found.append(f"fuzzy: {key}")
        found += [f"{error}: {key}" for error in message.check(catalog)]
    return found


@pytest.mark.parametrize("language", TRANSLATED)
def test_every_message_is_translated_and_nothing_else_is_kept(extracted, language):
    assert problems(extracted, catalog_of(language)) == []


@pytest.mark.parametrize("language", TRANSLATED)
def test_every_label_is_translated_under_its_kind(language):
    """A page looks a label up with its kind as the context: a word marked under another context
    would be translated in the catalog and still shown in English."""
    catalog = catalog_of(language)
    missing = [(kind, word) for kind, words in LABELS.items() for word in words.values()
               if not catalog.get(word, context=kind) or not catalog.get(word, context=kind).string]
    assert missing == []


def test_the_check_finds_each_kind_of_gap(extracted, tmp_path):
    """The coverage test above can fail: a catalog spoiled five ways is reported five ways."""
    spoiled = catalog_of("es")
    plain = [message for message in spoiled if message.id and not isinstance(message.id, tuple)]
    formatted = next(message for message in plain if "%(" in message.id)
    gone, empty, guessed = [message for message in plain if message is not formatted][:3]
    spoiled.delete(gone.id, gone.context)
    empty.string = ""
    guessed.flags.add("fuzzy")
    formatted.string = formatted.string.replace("%(", "%(x", 1)
    spoiled.add("A sentence the sources never say", "Una frase que el código nunca dice")
    folder = tmp_path / "es" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    with (folder / "messages.po").open("wb") as target:
        write_po(target, spoiled)
    found = problems(extracted, catalog_of("es", tmp_path))
    expected = {f"missing: {_key(gone)}", f"untranslated: {_key(empty)}", f"fuzzy: {_key(guessed)}",
                "obsolete: (None, 'A sentence the sources never say')"}
    assert expected <= set(found)
    assert any(line.endswith(str(_key(formatted))) for line in set(found) - expected), found
    assert len(found) == 5, found


# Text a template may show untranslated: examples of what to type, and names that are the same
# in every language (formats, headers, event names).
UNTRANSLATED = {"#", "→", "·", "—", "/", "(debt.payment_received)", "https://example.com/hooks/messaging",
                "https://erp.example.com/payments", "203.0.113.7, 198.51.100.0/24"}
_JINJA = re.compile(r"{#.*?#}|{{.*?}}|{%.*?%}", re.S)
_TEXT = re.compile(r">([^<>]+)<")
_SHOWN_ATTRIBUTE = re.compile(r'\b(?:placeholder|aria-label|title|alt|data-confirm|data-copied)="([^"]*)"')


def unmarked_text(template: str) -> list[str]:
    """Words a template shows outside `{{ }}` and `{% %}`: text between tags, and the attributes a
    reader sees or hears."""
    bare = _JINJA.sub("", template)
    shown = [text.strip() for text in _TEXT.findall(bare)] + _SHOWN_ATTRIBUTE.findall(bare)
    return [text for text in shown if re.search(r"[A-Za-z]", text) and text not in UNTRANSLATED]


def test_no_template_shows_text_it_does_not_mark_for_translation():
    assert ROOT / "portal" / "templates" in TEMPLATE_FOLDERS
    found = {path.name: unmarked_text(path.read_text()) for folder in TEMPLATE_FOLDERS
             for path in sorted(folder.glob("*.html"))}
    assert {name: texts for name, texts in found.items() if texts} == {}


def test_the_scan_sees_unmarked_text_and_attributes():
    assert unmarked_text('<p>Hello {{ name }}</p><input placeholder="Your email">{{ _("Fine") }}') == [
        "Hello", "Your email"]
