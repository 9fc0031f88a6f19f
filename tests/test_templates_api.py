"""POST /accounts/{account_id}/templates and DELETE .../templates/{name}: the platform's rules
checked before submitting (a 422 naming the field for each), the submission to the simulator
over HTTP, and the review webhooks that move a template on, each emitting template.status_changed."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.events.tables import Event
from models.numbers.tables import MessagingAccount, Template
from tests.accounts_fixtures import *  # noqa: F403  (fixtures)
from tests.accounts_fixtures import connect_number, notification, signed_post, sqlite_only, unreachable_platform


def valid_template(**fields) -> dict:
    """A utility template with a text header, a variable, a footer, a URL button with a dynamic
    suffix and a quick reply: every kind of component the rules look at."""
    return {
        "name": "order_ready",
        "language": "es",
        "category": "UTILITY",
        "components": [
            {"type": "HEADER", "format": "TEXT", "text": "Pedido {{1}}", "example": {"header_text": ["A-12"]}},
            {"type": "BODY", "text": "Hola {{1}}, tu pedido {{2}} está listo.",
             "example": {"body_text": [["Ana", "A-12"]]}},
            {"type": "FOOTER", "text": "Tienda Ejemplo"},
            {"type": "BUTTONS", "buttons": [
                {"type": "URL", "text": "Ver pedido", "url": "https://shop.example/orders/{{1}}",
                 "example": ["https://shop.example/orders/A-12"]},
                {"type": "QUICK_REPLY", "text": "Gracias"},
            ]},
        ],
        **fields,
    }


def create(client, persona, account_id, body, headers=None):
    return client.simulate_post(f"/api/v1/accounts/{account_id}/templates", json=body,
                                headers={**persona.headers, **(headers or {})})


@pytest.fixture
def fuzz_headers(alice):
    return alice.with_key(["all"], rate_limit=100_000)


def template_events(persona) -> list[dict]:
    return [event.payload for event in Event.select().where((Event.tenant == persona.id)
                                                            & (Event.name == "template.status_changed"))
            .order_by(Event.id)]


def sim_template(simulator, name: str, language: str) -> dict | None:
    state = simulator.platform.state
    with state.lock:
        return copy.deepcopy(state.find_template(name, language))


def test_a_valid_template_is_submitted_and_kept_pending(client, alice, simulator):
    account_id = connect_number(client, alice)
    response = create(client, alice, account_id, valid_template())
    assert response.status_code == 201, response.text
    data = response.json["data"]
    assert (data["name"], data["language"], data["status"], data["category"]) == ("order_ready", "es", "pending",
                                                                                  "UTILITY")
    assert data["id"] and data["variable_count"] == 2 and data["header_type"] == "text"
    assert data["rejected_reason"] is None
    on_platform = sim_template(simulator, "order_ready", "es")
    assert on_platform["id"] == data["id"] and on_platform["components"][3]["buttons"][0]["url"].endswith("{{1}}")
    (event,) = template_events(alice)
    assert (event["change"], event["status"], event["previous_status"], event["account_id"]) == (
        "submitted", "pending", None, account_id)
    # Pending: not yet something a campaign may send.
    listed = client.simulate_get(f"/api/v1/accounts/{account_id}/templates", headers=alice.headers).json["data"]
    assert "order_ready" not in [item["name"] for item in listed]


def broken(mutate) -> dict:
    body = valid_template()
    mutate(body)
    return body


def _set(path, value):
    def mutate(body):
        target = body
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return mutate


def _drop(path):
    def mutate(body):
        target = body
        for part in path[:-1]:
            target = target[part]
        del target[path[-1]]
    return mutate


BUTTONS = ("components", 3, "buttons")
RULES = {
    "name with capitals": (_set(("name",), "Order_Ready"), "name"),
    "name with a dash": (_set(("name",), "order-ready"), "name"),
    "name too long": (_set(("name",), "a" * 513), "name"),
    "name missing": (_drop(("name",)), "name"),
    "unknown language": (_set(("language",), "xx_YY"), "language"),
    "unknown category": (_set(("category",), "PROMOTIONAL"), "category"),
    "unknown top-level field": (_set(("colour",), "red"), "colour"),
    "no components": (_set(("components",), []), "components"),
    "no body": (lambda body: body["components"].pop(1), "components"),
    "two bodies": (lambda body: body["components"].append(copy.deepcopy(body["components"][1])), "components.4.type"),
    "unknown component": (_set(("components", 2, "type"), "SIDEBAR"), "components.2.type"),
    "header text too long": (_set(("components", 0, "text"), "x" * 61), "components.0.text"),
    "header with two variables": (_set(("components", 0, "text"), "Pedido {{1}} {{2}}"), "components.0.text"),
    "header variable without example": (_drop(("components", 0, "example")), "components.0.example.header_text"),
    "unknown header format": (_set(("components", 0, "format"), "GIF"), "components.0.format"),
    "media header without handle": (lambda body: body["components"].__setitem__(
        0, {"type": "HEADER", "format": "IMAGE"}), "components.0.example.header_handle"),
    "body too long": (_set(("components", 1, "text"), "Hola {{1}} y {{2}} " + "x" * 1020),
                      "components.1.text"),
    "body starts with a variable": (_set(("components", 1, "text"), "{{1}}, tu pedido {{2}} está listo."),
                                    "components.1.text"),
    "body ends with a variable": (_set(("components", 1, "text"), "Hola {{1}}, tu pedido {{2}}"),
                                  "components.1.text"),
    "variables with a gap": (_set(("components", 1, "text"), "Hola {{1}}, tu pedido {{3}} está listo."),
                             "components.1.text"),
    "named variable": (_set(("components", 1, "text"), "Hola {{name}}, tu pedido está listo."),
                       "components.1.text"),
    "body examples missing": (_drop(("components", 1, "example")), "components.1.example.body_text"),
    "body examples short": (_set(("components", 1, "example"), {"body_text": [["Ana"]]}),
                            "components.1.example.body_text.0"),
    "body example empty": (_set(("components", 1, "example"), {"body_text": [["Ana", " "]]}),
                           "components.1.example.body_text.0.1"),
    "footer too long": (_set(("components", 2, "text"), "x" * 61), "components.2.text"),
    "footer with a variable": (_set(("components", 2, "text"), "Tienda {{1}}"), "components.2.text"),
    "eleven buttons": (_set(BUTTONS, [{"type": "QUICK_REPLY", "text": f"R{n}"} for n in range(11)]),
                       "components.3.buttons"),
    "three URL buttons": (_set(BUTTONS, [{"type": "URL", "text": f"U{n}", "url": "https://shop.example"}
                                         for n in range(3)]), "components.3.buttons"),
    "two phone buttons": (_set(BUTTONS, [{"type": "PHONE_NUMBER", "text": f"P{n}", "phone_number": "+56912345678"}
                                         for n in range(2)]), "components.3.buttons"),
    "button text too long": (_set((*BUTTONS, 1, "text"), "x" * 26), "components.3.buttons.1.text"),
    "unknown button type": (_set((*BUTTONS, 1, "type"), "CALL_ME"), "components.3.buttons.1.type"),
    "URL variable in the middle": (_set((*BUTTONS, 0, "url"), "https://shop.example/{{1}}/view"),
                                   "components.3.buttons.0.url"),
    "URL with two variables": (_set((*BUTTONS, 0, "url"), "https://shop.example/{{1}}{{1}}"),
                               "components.3.buttons.0.url"),
    "dynamic URL without example": (_drop((*BUTTONS, 0, "example")), "components.3.buttons.0.example"),
    "URL not http": (_set((*BUTTONS, 0, "url"), "ftp://shop.example"), "components.3.buttons.0.url"),
    "bad phone number": (_set(BUTTONS, [{"type": "PHONE_NUMBER", "text": "Llamar", "phone_number": "call us"}]),
                         "components.3.buttons.0.phone_number"),
    "quick replies among the others": (_set(BUTTONS, [
        {"type": "QUICK_REPLY", "text": "Sí"}, {"type": "URL", "text": "Ver", "url": "https://shop.example"},
        {"type": "QUICK_REPLY", "text": "No"}]), "components.3.buttons"),
    "component not an object": (_set(("components", 2), "FOOTER"), "components.2"),
    "text not a string": (_set(("components", 2, "text"), 60), "components.2.text"),
}


@sqlite_only
@pytest.mark.parametrize("rule", list(RULES))
def test_every_rule_is_a_422_naming_its_field(client, alice, simulator, rule):
    mutate, field = RULES[rule]
    account_id = connect_number(client, alice)
    response = create(client, alice, account_id, broken(mutate))
    assert response.status_code == 422, response.text
    error = response.json["error"]
    assert error["code"] == "validation_failed"
    assert field in error["details"]["errors"], error["details"]
    # Nothing was submitted, nothing stored.
    assert sim_template(simulator, "order_ready", "es") is None
    assert not Template.select().where(Template.name == "order_ready").exists()


@sqlite_only
def test_grouped_quick_replies_and_every_limit_at_its_edge_pass(client, alice, simulator):
    account_id = connect_number(client, alice)
    body = valid_template(name="edges", category="marketing")
    body["components"][1]["text"] = "Hola {{1}}, " + "x" * 1000 + " {{2}} fin."
    body["components"][2]["text"] = "y" * 60
    body["components"][3]["buttons"] = [
        {"type": "URL", "text": "x" * 25, "url": "https://shop.example/a/{{1}}", "example": ["https://shop.example/a/1"]},
        {"type": "URL", "text": "Fijo", "url": "https://shop.example/b"},
        {"type": "PHONE_NUMBER", "text": "Llamar", "phone_number": "+56912345678"},
        *({"type": "QUICK_REPLY", "text": f"Opción {n}"} for n in range(7)),
    ]
    response = create(client, alice, account_id, body)
    assert response.status_code == 201, response.text
    assert response.json["data"]["category"] == "MARKETING"


@sqlite_only
def test_a_media_header_with_its_example_handle_passes(client, alice, simulator):
    account_id = connect_number(client, alice)
    body = valid_template(name="with_image")
    body["components"][0] = {"type": "HEADER", "format": "IMAGE", "example": {"header_handle": ["4::aW1hZ2U="]}}
    response = create(client, alice, account_id, body)
    assert response.status_code == 201, response.text
    assert response.json["data"]["header_type"] == "image"


def test_the_same_name_and_language_twice_is_a_409(client, alice, simulator):
    account_id = connect_number(client, alice)
    assert create(client, alice, account_id, valid_template()).status_code == 201
    again = create(client, alice, account_id, valid_template())
    assert again.status_code == 409 and again.json["error"]["code"] == "template_exists", again.text
    # Another language of the same name is another template.
    assert create(client, alice, account_id, valid_template(language="pt_BR")).status_code == 201


@sqlite_only
def test_a_template_the_platform_refuses_leaves_nothing_behind(client, alice, simulator):
    account_id = connect_number(client, alice)
    # The business account already has it (written in the platform's own manager, not yet synced).
    simulator.set_template("order_ready", "es", body="Hola {{1}}, listo.")
    response = create(client, alice, account_id, valid_template())
    assert response.status_code == 422 and response.json["error"]["code"] == "template_refused", response.text
    assert not Template.select().where(Template.name == "order_ready").exists()
    assert template_events(alice) == []


@sqlite_only
def test_an_unreachable_platform_is_a_503_and_nothing_is_kept(client, alice, simulator):
    account_id = connect_number(client, alice)
    unreachable_platform()
    response = create(client, alice, account_id, valid_template())
    assert response.status_code == 503 and response.json["error"]["code"] == "platform_unavailable", response.text
    assert not Template.select().where(Template.name == "order_ready").exists()


@sqlite_only
def test_scopes_accounts_and_idempotency_follow_the_other_writes(client, alice, charlie, simulator):
    account_id = connect_number(client, alice)
    read_only = alice.with_key(["templates:read"])
    refused = client.simulate_post(f"/api/v1/accounts/{account_id}/templates", json=valid_template(), headers=read_only)
    assert refused.status_code == 403
    foreign = create(client, charlie, account_id, valid_template())
    assert foreign.status_code == 404 and foreign.json["error"]["code"] == "account_not_found"
    first = create(client, alice, account_id, valid_template(), {"Idempotency-Key": "tpl-1"})
    replay = create(client, alice, account_id, valid_template(), {"Idempotency-Key": "tpl-1"})
    assert first.status_code == replay.status_code == 201
    assert replay.headers["X-Service-Idempotent-Replay"] == "true" and replay.json == first.json
    assert len(template_events(alice)) == 1


def test_delete_removes_every_language_on_the_platform_and_here(client, alice, simulator):
    account_id = connect_number(client, alice)
    assert create(client, alice, account_id, valid_template()).status_code == 201
    assert create(client, alice, account_id, valid_template(language="pt_BR")).status_code == 201
    response = client.simulate_delete(f"/api/v1/accounts/{account_id}/templates/order_ready", headers=alice.headers)
    assert response.status_code == 200, response.text
    assert sorted(item["language"] for item in response.json["data"]["deleted"]) == ["es", "pt_BR"]
    assert {t.status for t in Template.select().where(Template.name == "order_ready")} == {"deleted"}
    assert sim_template(simulator, "order_ready", "es") is None
    assert [e["change"] for e in template_events(alice)][-2:] == ["deleted", "deleted"]
    gone = client.simulate_delete(f"/api/v1/accounts/{account_id}/templates/order_ready", headers=alice.headers)
    assert gone.status_code == 404 and gone.json["error"]["code"] == "template_not_found"
    # Deleted, the name can be written again.
    assert create(client, alice, account_id, valid_template()).status_code == 201


def test_review_webhooks_move_the_template_and_each_change_is_an_event(client, alice, simulator):
    account_id = connect_number(client, alice)
    created = create(client, alice, account_id, valid_template()).json["data"]
    account = MessagingAccount.get(MessagingAccount.public_id == account_id)
    identity = {"message_template_id": int(created["id"]), "message_template_name": "order_ready",
                "message_template_language": "es"}

    def post(field, value):
        response = signed_post(client, notification(account.business_account_id, field, {**identity, **value}))
        assert response.status_code == 200, response.text

    post("message_template_status_update", {"event": "REJECTED", "reason": "TAG_CONTENT_MISMATCH"})
    template = Template.get(Template.platform_id == created["id"])
    assert (template.status, template.rejected_reason) == ("rejected", "TAG_CONTENT_MISMATCH")
    post("message_template_status_update", {"event": "APPROVED", "reason": "NONE"})
    post("template_category_update", {"previous_category": "UTILITY", "new_category": "MARKETING"})
    post("message_template_quality_update", {"previous_quality_score": "UNKNOWN", "new_quality_score": "RED"})
    post("message_template_status_update", {"event": "PAUSED", "reason": "NONE", "other_info": {
        "title": "FIRST_PAUSE", "description": "Paused for 3 hours due to low quality."}})
    post("message_template_status_update", {"event": "PAUSED", "reason": "NONE", "other_info": {
        "title": "FIRST_PAUSE", "description": "Paused for 3 hours due to low quality."}})  # a redelivery
    template = Template.get_by_id(template.id)
    assert (template.status, template.category, template.previous_category, template.quality_score) == (
        "paused", "MARKETING", "UTILITY", "RED")
    assert template.rejected_reason is None and template.status_detail.startswith("FIRST_PAUSE")
    events = template_events(alice)
    assert [(e["change"], e["status"]) for e in events] == [
        ("submitted", "pending"), ("status", "rejected"), ("status", "approved"), ("category", "approved"),
        ("quality", "approved"), ("status", "paused")]
    assert events[1]["reason"] == "TAG_CONTENT_MISMATCH" and events[3]["previous_category"] == "UTILITY"
    assert events[5]["previous_status"] == "approved" and events[5]["detail"].startswith("FIRST_PAUSE")


# -- fuzz: whatever the body, never a 500 ----------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                     st.text(max_size=30), st.sampled_from(["{{1}}", "Hola {{1}} x", "{{0}}", "{{", "URL", "BODY",
                                                            "QUICK_REPLY", "TEXT", "IMAGE", "https://a.example/{{1}}"]))
_json = st.recursive(_scalars, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(st.sampled_from(
        ["type", "format", "text", "example", "buttons", "body_text", "header_text", "header_handle", "url",
         "phone_number", "x"]), children, max_size=5)), max_leaves=25)


def _mutated_template(draw_value, key, where):
    body = valid_template(name="fuzzed")
    if where == "top":
        body[key] = draw_value
    else:
        body["components"][where % 4][key] = draw_value
    return body


@sqlite_only
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(
    _json,
    st.builds(_mutated_template, _json, st.sampled_from(["name", "language", "category", "components", "type",
                                                         "text", "example", "buttons", "format"]),
              st.one_of(st.just("top"), st.integers(0, 3)))))
def test_fuzzed_bodies_never_get_a_500(client, alice, simulator, fuzz_headers, body):
    account = MessagingAccount.get_or_none(MessagingAccount.tenant == alice.id)
    account_id = account.public_id if account else connect_number(client, alice)
    response = client.simulate_post(f"/api/v1/accounts/{account_id}/templates", json=body, headers=fuzz_headers)
    assert response.status_code in (201, 409, 422), response.text
    if response.status_code == 201:
        # Clear the name for the next example.
        deleted = client.simulate_delete(f"/api/v1/accounts/{account_id}/templates/{body['name']}",
                                         headers=fuzz_headers)
        assert deleted.status_code == 200, deleted.text
