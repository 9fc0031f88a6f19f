"""The platform's rules for a new template, checked before it is submitted.

The input is Graph's own `message_templates` shape, `{name, language, category, components}`,
whoever wrote it (the API, `svcctl templates create`, the portal's form). Every broken rule is
reported at once, each under the path of the field that breaks it, dotted as the API's other
validation errors are (`components.1.example.body_text`), so a 422 names what to fix.

The rules are the platform's (developers.facebook.com/docs/whatsapp/business-management-api/
message-templates and its components page): a name of lowercase letters, digits and underscores;
a header of text (60 characters, one variable) or media with an example handle; a body of 1024
characters whose variables are numbered `{{1}}`, `{{2}}`... without gaps, neither first nor last,
each with an example; a footer of 60 characters without variables; at most 10 buttons, of which
at most 2 URL buttons (a dynamic one ends in `{{1}}` and has an example), 1 phone number button
and 10 quick replies, the quick replies grouped together rather than among the others; 25
characters of text per button. Named parameters (`{{order_id}}`) are not accepted: templates
sent by the service fill their variables by position.
"""

from __future__ import annotations

import re
from typing import Any

from models.errors import Invalid

NAME_PATTERN = re.compile(r"^[a-z0-9_]+$")
MAX_NAME = 512
CATEGORIES = ("MARKETING", "UTILITY", "AUTHENTICATION")
COMPONENT_TYPES = ("HEADER", "BODY", "FOOTER", "BUTTONS")
TEXT_HEADER = "TEXT"
MEDIA_HEADERS = ("IMAGE", "VIDEO", "DOCUMENT")
MAX_HEADER_TEXT = 60
MAX_BODY_TEXT = 1024
MAX_FOOTER_TEXT = 60
MAX_BUTTONS = 10
MAX_BUTTON_TEXT = 25
MAX_URL = 2000
MAX_PHONE_NUMBER = 20
MAX_EXAMPLE = 1024
BUTTON_LIMITS = {"QUICK_REPLY": 10, "URL": 2, "PHONE_NUMBER": 1, "OTP": 1}
DYNAMIC_SUFFIX = "{{1}}"
TOP_LEVEL_FIELDS = ("name", "language", "category", "components")

# The language and locale codes the platform takes for a template (its "Supported languages" list).
LANGUAGE_CODES = frozenset({
    "af", "sq", "ar", "ar_EG", "ar_AE", "ar_LB", "ar_MA", "ar_QA", "az", "be_BY", "bn", "bn_IN", "bg", "ca",
    "zh_CN", "zh_HK", "zh_TW", "hr", "cs", "da", "prs_AF", "nl", "nl_BE", "en", "en_GB", "en_US", "en_AE",
    "en_AU", "en_CA", "en_GH", "en_IE", "en_IN", "en_JM", "en_MY", "en_NZ", "en_QA", "en_SG", "en_UG",
    "en_ZA", "et", "fil", "fi", "fr", "fr_BE", "fr_CA", "fr_CH", "fr_CI", "fr_MA", "ka", "de", "de_AT",
    "de_CH", "el", "gu", "ha", "he", "hi", "hu", "id", "ga", "it", "ja", "kn", "kk", "rw_RW", "ko", "ky_KG",
    "lo", "lv", "lt", "mk", "ms", "ml", "mr", "nb", "ps_AF", "fa", "pl", "pt_BR", "pt_PT", "pa", "ro",
    "ru", "sr", "si_LK", "sk", "sl", "es", "es_AR", "es_CL", "es_CO", "es_CR", "es_DO", "es_EC", "es_HN",
    "es_MX", "es_PA", "es_PE", "es_ES", "es_UY", "sw", "sv", "ta", "te", "th", "tr", "uk", "ur", "uz",
    "vi", "zu",
})

# Any `{{...}}`; a positional one holds digits only.
_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")
_PHONE = re.compile(r"^\+?[0-9]{4,20}$")
_URL = re.compile(r"^https?://[^\s/?#]+[^\s]*$")

Errors = dict[str, list[str]]


def checked_template(data: Any) -> dict[str, Any]:
    """The template to submit, as Graph takes it (the category in capitals); `Invalid` with every
    broken rule under its field's path otherwise."""
    errors: Errors = {}
    if not isinstance(data, dict):
        raise Invalid("The given data was invalid.", details={"errors": {"body": ["must be a JSON object"]}})
    for key in data:
        if key not in TOP_LEVEL_FIELDS:
            _add(errors, str(key), f"unknown field; a template has {', '.join(TOP_LEVEL_FIELDS)}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        _add(errors, "name", "required: a string")
    elif len(name) > MAX_NAME:
        _add(errors, "name", f"at most {MAX_NAME} characters")
    elif not NAME_PATTERN.match(name):
        _add(errors, "name", "only lowercase letters, digits and underscores")
    language = data.get("language")
    if not isinstance(language, str) or not language:
        _add(errors, "language", "required: a language code such as es or pt_BR")
    elif language not in LANGUAGE_CODES:
        _add(errors, "language", "not a language code the platform knows (es, es_MX, pt_BR, en_US, ...)")
    category = data.get("category")
    if not isinstance(category, str) or category.upper() not in CATEGORIES:
        _add(errors, "category", f"one of {', '.join(CATEGORIES)}")
        category = None
    else:
        category = category.upper()
    _check_components(data.get("components"), category, errors)
    if errors:
        raise Invalid("The given data was invalid.", details={"errors": errors})
    return {"name": name, "language": language, "category": category, "components": data["components"]}


def _check_components(components: Any, category: str | None, errors: Errors) -> None:
    if not isinstance(components, list) or not components:
        _add(errors, "components", "required: a list of components with one BODY")
        return
    seen: set[str] = set()
    for index, component in enumerate(components):
        path = f"components.{index}"
        if not isinstance(component, dict):
            _add(errors, path, "must be an object")
            continue
        kind = component.get("type")
        kind = kind.upper() if isinstance(kind, str) else None
        if kind not in COMPONENT_TYPES:
            _add(errors, f"{path}.type", f"one of {', '.join(COMPONENT_TYPES)}")
            continue
        if kind in seen:
            _add(errors, f"{path}.type", f"a template has at most one {kind}")
            continue
        seen.add(kind)
        if kind == "HEADER":
            _check_header(component, path, errors)
        elif kind == "BODY":
            _check_body(component, path, category, errors)
        elif kind == "FOOTER":
            _check_footer(component, path, errors)
        else:
            _check_buttons(component, path, category, errors)
    if "BODY" not in seen:
        _add(errors, "components", "a template needs a BODY component")


def _check_header(component: dict[str, Any], path: str, errors: Errors) -> None:
    header_format = component.get("format")
    header_format = header_format.upper() if isinstance(header_format, str) else None
    if header_format == TEXT_HEADER:
        text = component.get("text")
        if not _text_within(text, MAX_HEADER_TEXT, f"{path}.text", errors):
            return
        numbers = _placeholders(text, f"{path}.text", errors)
        if numbers is None:
            return
        if len(numbers) > 1 or (numbers and numbers != [1]):
            _add(errors, f"{path}.text", "a text header takes at most one variable, {{1}}")
        elif numbers:
            _check_examples(_example(component).get("header_text"), 1, f"{path}.example.header_text", errors)
    elif header_format in MEDIA_HEADERS:
        if component.get("text") is not None:
            _add(errors, f"{path}.text", "a media header has no text")
        handles = _example(component).get("header_handle")
        if not isinstance(handles, list) or not handles or not all(
                isinstance(handle, str) and 0 < len(handle) <= MAX_URL for handle in handles):
            _add(errors, f"{path}.example.header_handle",
                 "a media header needs an example: the handle of a sample file uploaded to the platform")
    else:
        _add(errors, f"{path}.format", f"one of {TEXT_HEADER}, {', '.join(MEDIA_HEADERS)}")


def _check_body(component: dict[str, Any], path: str, category: str | None, errors: Errors) -> None:
    text = component.get("text")
    if category == "AUTHENTICATION" and text is None:
        return  # the platform writes an authentication template's body itself
    if not _text_within(text, MAX_BODY_TEXT, f"{path}.text", errors):
        return
    numbers = _placeholders(text, f"{path}.text", errors)
    if numbers is None or not numbers:
        return
    count = max(numbers)
    if sorted(set(numbers)) != list(range(1, count + 1)):
        _add(errors, f"{path}.text", f"variables are numbered {{{{1}}}} to {{{{{count}}}}} without gaps")
        return
    stripped = text.strip()
    if stripped.startswith("{{"):
        _add(errors, f"{path}.text", "the body may not start with a variable")
    if stripped.endswith("}}"):
        _add(errors, f"{path}.text", "the body may not end with a variable")
    rows = _example(component).get("body_text")
    if not isinstance(rows, list) or len(rows) != 1:
        _add(errors, f"{path}.example.body_text",
             f"an example for each of the {count} variable(s): [[\"value 1\", ...]]")
        return
    _check_examples(rows[0], count, f"{path}.example.body_text.0", errors)


def _check_footer(component: dict[str, Any], path: str, errors: Errors) -> None:
    text = component.get("text")
    if _text_within(text, MAX_FOOTER_TEXT, f"{path}.text", errors) and "{{" in text:
        _add(errors, f"{path}.text", "a footer takes no variables")


def _check_buttons(component: dict[str, Any], path: str, category: str | None, errors: Errors) -> None:
    buttons = component.get("buttons")
    if not isinstance(buttons, list) or not 1 <= len(buttons) <= MAX_BUTTONS:
        _add(errors, f"{path}.buttons", f"a list of 1 to {MAX_BUTTONS} buttons")
        return
    kinds: list[str] = []
    for index, button in enumerate(buttons):
        button_path = f"{path}.buttons.{index}"
        if not isinstance(button, dict):
            _add(errors, button_path, "must be an object")
            continue
        kind = button.get("type")
        kind = kind.upper() if isinstance(kind, str) else None
        allowed = ("OTP",) if category == "AUTHENTICATION" else ("QUICK_REPLY", "URL", "PHONE_NUMBER")
        if kind not in allowed:
            _add(errors, f"{button_path}.type", f"one of {', '.join(allowed)}")
            continue
        kinds.append(kind)
        if kind != "OTP":
            _text_within(button.get("text"), MAX_BUTTON_TEXT, f"{button_path}.text", errors)
        if kind == "URL":
            _check_url_button(button, button_path, errors)
        elif kind == "PHONE_NUMBER":
            phone = button.get("phone_number")
            if not isinstance(phone, str) or not _PHONE.match(phone):
                _add(errors, f"{button_path}.phone_number", "a phone number in international format, up to 20 digits")
    for kind, limit in BUTTON_LIMITS.items():
        if kinds.count(kind) > limit:
            _add(errors, f"{path}.buttons", f"at most {limit} {kind} button(s)")
    switches = sum(1 for before, after in zip(kinds, kinds[1:], strict=False)
                   if (before == "QUICK_REPLY") != (after == "QUICK_REPLY"))
    if switches > 1:
        _add(errors, f"{path}.buttons",
             "quick replies are grouped together, before or after the other buttons, not among them")


def _check_url_button(button: dict[str, Any], path: str, errors: Errors) -> None:
    url = button.get("url")
    if not isinstance(url, str) or len(url) > MAX_URL or not _URL.match(url):
        _add(errors, f"{path}.url", f"an http(s) URL of at most {MAX_URL} characters")
        return
    if "{{" not in url:
        return
    if url.count("{{") != 1 or not url.endswith(DYNAMIC_SUFFIX):
        _add(errors, f"{path}.url", "a dynamic URL takes one variable, {{1}}, at its very end")
        return
    example = button.get("example")
    if not isinstance(example, list) or len(example) != 1 or not isinstance(example[0], str) \
            or not _URL.match(example[0]) or len(example[0]) > MAX_URL:
        _add(errors, f"{path}.example", "a dynamic URL needs an example: [\"https://.../full-example\"]")


def _text_within(text: Any, limit: int, path: str, errors: Errors) -> bool:
    if not isinstance(text, str) or not text.strip():
        _add(errors, path, "required: a non-empty string")
        return False
    if len(text) > limit:
        _add(errors, path, f"at most {limit} characters")
        return False
    return True


def _placeholders(text: str, path: str, errors: Errors) -> list[int] | None:
    """The numbers of the text's variables, in order; None (and an error) for a named or malformed one."""
    numbers = []
    for inside in _PLACEHOLDER.findall(text):
        if not inside.isascii() or not inside.isdigit() or int(inside) == 0 or len(inside) > 3:
            _add(errors, path, f"variables are written {{{{1}}}}, {{{{2}}}}, ...; not {{{{{inside[:20]}}}}}")
            return None
        numbers.append(int(inside))
    return numbers


def _check_examples(values: Any, count: int, path: str, errors: Errors) -> None:
    if not isinstance(values, list) or len(values) != count:
        _add(errors, path, f"exactly {count} example value(s), one per variable")
        return
    for position, value in enumerate(values):
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_EXAMPLE:
            _add(errors, f"{path}.{position}", f"a non-empty example of at most {MAX_EXAMPLE} characters")


def _example(component: dict[str, Any]) -> dict[str, Any]:
    example = component.get("example")
    return example if isinstance(example, dict) else {}


def _add(errors: Errors, path: str, message: str) -> None:
    errors.setdefault(path, []).append(message)
