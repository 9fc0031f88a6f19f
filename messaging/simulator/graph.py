"""The Graph API the simulator serves: which versions, which routes, who may call what.

    GET  /{v}/oauth/access_token?client_id&client_secret&code   token exchange, a code once (onboarding)
    GET  /{v}/{phone_number_id}?fields=...                       phone number info (phone_numbers)
    POST /{v}/{phone_number_id}/messages                          send, mark as read (messages)
    POST /{v}/{phone_number_id}/smb_app_data                      coexistence sync, once per type (onboarding)
    GET  /{v}/{waba_id}/message_templates?limit&after             cursor-paged templates (templates)
    POST /{v}/{waba_id}/message_templates                         submit a template for review (template_review)
    DELETE /{v}/{waba_id}/message_templates?name=                 delete every language of one (template_review)
    GET  /{v}/{waba_id}/phone_numbers                             the account's numbers (phone_numbers)
    GET|POST /{v}/{waba_id}/subscribed_apps                       webhook subscription (onboarding)

A number's token is its bearer: it may call the number's own routes and its business account's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from messaging.simulator import messages, onboarding, phone_numbers, template_review, templates
from messaging.simulator.errors import GraphError
from messaging.simulator.platform import Platform
from messaging.simulator.records import SimNumber
from messaging.simulator.state import PlatformState

VERSION_PREFIX = re.compile(r"^/(v\d+\.\d+)/")

# The Graph API versions the platform serves on 2026-11-25. Each is served for two years after
# the next one comes out (developers.facebook.com/docs/graph-api/changelog/versions): v21.0 until
# 2027-01-21, v22.0 until 2027-05-20, v23.0 until 2027-10-08, v24.0 until 2028-02-18, v25.0
# until 2028-07-29, v26.0 (released 2026-07-29) until two years after v27.0. Update this set as
# versions come and go, so that the simulator answers a stale SVC_GRAPH_VERSION as Graph does.
SERVED_GRAPH_VERSIONS = ("v21.0", "v22.0", "v23.0", "v24.0", "v25.0", "v26.0")
# Every version Graph released before those (v1.0, v2.0 to v2.12, v3.0 to v3.3, v4.0 to v20.0).
# Graph answers a call to one of them with the oldest version it still serves ("once a version is
# no longer usable, any calls made to it will be defaulted to the next oldest usable version");
# a version it never released is a path it does not know (error 2500).
RETIRED_GRAPH_VERSIONS = frozenset(
    ["v1.0", *(f"v2.{minor}" for minor in range(13)), *(f"v3.{minor}" for minor in range(4)),
     *(f"v{major}.0" for major in range(4, 21))])


def served_version(asked: str) -> str | None:
    """The Graph version that answers a call made to `asked`: itself while served, the oldest
    served one for a retired version, None for a version Graph never released."""
    if asked in SERVED_GRAPH_VERSIONS:
        return asked
    if asked in RETIRED_GRAPH_VERSIONS:
        return SERVED_GRAPH_VERSIONS[0]
    return None


def handle(
    platform: Platform,
    method: str,
    path: str,
    query: Mapping[str, str],
    body: Any,
    authorization: str | None,
    version: str,
    base_url: str,
) -> dict[str, Any]:
    """Answer one Graph API call (`path` without the `/{version}/` prefix)."""
    state = platform.state
    parts = [part for part in path.split("/") if part]
    if method == "GET" and parts == ["oauth", "access_token"]:
        return onboarding.exchange_code(platform, query)
    if len(parts) == 1 and method == "GET":
        return phone_numbers.number_fields(state, _number_for(state, parts[0], authorization), query)
    if len(parts) == 2:
        object_id, edge = parts
        if edge == "messages" and method == "POST":
            return messages.send(platform, _number_for(state, object_id, authorization), body)
        if edge == "smb_app_data" and method == "POST":
            return onboarding.sync(platform, _number_for(state, object_id, authorization), body)
        if edge == "message_templates" and method == "GET":
            _authorize_waba(state, object_id, authorization)
            return templates.listing(state, object_id, query, version, base_url)
        if edge == "message_templates" and method == "POST":
            _authorize_waba(state, object_id, authorization)
            return template_review.submit(platform, object_id, body)
        if edge == "message_templates" and method == "DELETE":
            _authorize_waba(state, object_id, authorization)
            return template_review.delete(platform, query)
        if edge == "phone_numbers" and method == "GET":
            _authorize_waba(state, object_id, authorization)
            return phone_numbers.account_numbers(state)
        if edge == "subscribed_apps":
            _authorize_waba(state, object_id, authorization)
            return onboarding.subscribed_apps(state, method)
    raise GraphError(
        400, 100, f"Unsupported {method.lower()} request.", subcode=33,
        details=f"no {method} /{'/'.join(parts)} in this simulator",
    )


def _token_number(state: PlatformState, authorization: str | None) -> SimNumber:
    token = ""
    if authorization and authorization.startswith("Bearer "):
        token = authorization[len("Bearer "):].strip()
    with state.lock:
        number_id = state.tokens.get(token)
        number = state.numbers.get(number_id) if number_id else None
    if number is None:
        raise GraphError(401, 190, "Invalid OAuth access token - Cannot parse access token")
    return number


def _number_for(state: PlatformState, object_id: str, authorization: str | None) -> SimNumber:
    number = _token_number(state, authorization)
    if number.id != object_id:
        raise _not_reachable("post", object_id)
    return number


def _authorize_waba(state: PlatformState, waba_id: str, authorization: str | None) -> None:
    number = _token_number(state, authorization)
    if number.waba_id != waba_id:
        raise _not_reachable("get", waba_id)


def _not_reachable(verb: str, object_id: str) -> GraphError:
    """Graph's answer for an object the token may not reach, as if it did not exist."""
    return GraphError(
        400, 100,
        f"Unsupported {verb} request. Object with ID '{object_id}' does not exist, cannot be "
        "loaded due to missing permissions, or does not support this operation.",
        subcode=33,
    )
