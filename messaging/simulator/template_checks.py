"""A template send checked against its template, as the platform checks it: a template that is
not approved in that language (132001), a count of parameters that does not match (132000), a
media header of another format (132012), a button parameter of the wrong kind or for a button
the template does not have (132018)."""

from __future__ import annotations

from typing import Any

from messaging.client import template_variable_count
from messaging.simulator.errors import GraphError
from messaging.simulator.records import declared_buttons
from messaging.simulator.templates import DYNAMIC_SUFFIX, MAX_BUTTON_URL


def check_template(template: dict[str, Any] | None, requested: dict[str, Any]) -> None:
    name, language = requested["name"], requested["language"]["code"]
    if template is None or template["status"] != "APPROVED":
        state = "does not exist" if template is None else f"is {template['status']}"
        raise GraphError(
            404, 132001, "(#132001) Template name does not exist in the translation",
            details=f"template name ({name}) {state} in {language}",
        )
    requested_components = [c for c in requested.get("components") or [] if isinstance(c, dict)]
    sent = {str(c.get("type", "")).lower(): c for c in requested_components
            if str(c.get("type", "")).lower() != "button"}
    body_component = next(c for c in template["components"] if c["type"] == "BODY")
    expected = template_variable_count(body_component.get("text"))
    given = len((sent.get("body") or {}).get("parameters") or [])
    if given != expected:
        raise GraphError(
            400, 132000,
            "(#132000) Number of parameters does not match the expected number of params",
            details=f"body: number of localizable_params ({given}) does not match the "
            f"expected number of params ({expected})",
        )
    _check_buttons(template, [c for c in requested_components
                              if str(c.get("type", "")).lower() == "button"])
    header = next((c for c in template["components"] if c["type"] == "HEADER"), None)
    if header and header.get("format") in ("IMAGE", "VIDEO", "DOCUMENT"):
        parameters = (sent.get("header") or {}).get("parameters") or [{}]
        received = str(parameters[0].get("type", "unknown")).upper()
        if received != header["format"]:
            raise GraphError(
                400, 132012,
                "(#132012) Parameter format does not match format in the created template",
                details=f"header: Format mismatch, expected {header['format']}, "
                f"received {received}",
            )


def _check_buttons(template: dict[str, Any], sent: list[dict[str, Any]]) -> None:
    """Button parameters against the template's buttons, as the platform checks them: a dynamic
    URL button without its suffix, or a parameter for a button that takes none, is a count
    mismatch (132000); a parameter of the wrong kind, or for a button the template does not
    have, is refused as a bad parameter (132018)."""
    declared = declared_buttons(template)
    by_index: dict[int, dict[str, Any]] = {}
    for component in sent:
        try:
            index = int(component.get("index"))
        except (TypeError, ValueError):
            raise _bad_button_parameter("button: index must be a number") from None
        if index in by_index:
            raise _bad_button_parameter(f"button at index {index}: given twice")
        if not 0 <= index < len(declared):
            raise _bad_button_parameter(f"button at index {index}: the template has no such button")
        by_index[index] = component
    for index, button in enumerate(declared):
        component = by_index.get(index)
        dynamic = button["type"] == "URL" and str(button.get("url", "")).endswith(DYNAMIC_SUFFIX)
        parameters = (component or {}).get("parameters") or []
        expected = 1 if dynamic else 0
        if button["type"] == "QUICK_REPLY" and component is not None:
            expected = 1  # a payload is optional, but a component given for it must carry one
        if len(parameters) != expected:
            raise GraphError(
                400, 132000,
                "(#132000) Number of parameters does not match the expected number of params",
                details=f"button at index {index}: number of localizable_params ({len(parameters)}) "
                f"does not match the expected number of params ({expected})",
            )
        if component is None:
            continue
        sub_type = str(component.get("sub_type", "")).lower()
        parameter = parameters[0] if isinstance(parameters[0], dict) else {}
        if button["type"] == "URL":
            suffix = parameter.get("text")
            if sub_type != "url" or parameter.get("type") != "text" or not isinstance(suffix, str) or not suffix:
                raise _bad_button_parameter(f"button at index {index}: a URL button takes a text parameter")
            url = button["url"][:-len(DYNAMIC_SUFFIX)] + suffix
            if len(url) > MAX_BUTTON_URL:
                raise _bad_button_parameter(f"button at index {index}: the URL is longer than {MAX_BUTTON_URL}")
        elif sub_type != "quick_reply" or parameter.get("type") != "payload" \
                or not isinstance(parameter.get("payload"), str):
            raise _bad_button_parameter(f"button at index {index}: a quick-reply button takes a payload parameter")


def _bad_button_parameter(details: str) -> GraphError:
    return GraphError(400, 132018, "(#132018) There was an issue with the parameters in your template.",
                      details=details)
