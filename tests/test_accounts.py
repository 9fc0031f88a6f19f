"""GET /accounts, /accounts/{id}, /accounts/{id}/templates; template sync; svcctl accounts and templates."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from jobs.accounts import sync_all_templates
from models.numbers import accounts
from models.numbers.tables import MessagingAccount, Template
from models.numbers.templates import sync_templates
from svcctl.main import app as svcctl
from tests.accounts_fixtures import *  # noqa: F403  (fixtures)
from tests.accounts_fixtures import connect_number, sqlite_only, unreachable_platform

ACCOUNT_FIELDS = {"id", "label", "external_reference", "phone_number", "name", "status", "connection_mode",
                  "business_account_id", "phone_id", "subscribed_to_webhooks", "quality_rating", "daily_limit",
                  "messages_sent_today", "created_at", "connected_at"}
TEMPLATE_FIELDS = {"id", "name", "display_name", "language", "status", "category", "quality_score", "body_text",
                   "header_type", "variable_count", "variables", "components", "updated_at"}
runner = CliRunner()


def account_row(public_id: str) -> MessagingAccount:
    return MessagingAccount.get(MessagingAccount.public_id == public_id)


def cli(group: str, *args: str, ok: bool = True):
    result = runner.invoke(svcctl, [group, *args])
    if ok:
        assert result.exit_code == 0, result.stderr or result.stdout
    return result


# GET /accounts/{id}

def test_an_account_shows_every_field(client, alice):
    account_id = connect_number(client, alice, label="Sales", external_reference="crm-7")
    account = account_row(account_id)
    accounts.record_business_sends(account.id, ["56911110000", "56922220000", "56911110000"])
    response = client.simulate_get(f"/api/v1/accounts/{account_id}", headers=alice.headers)
    assert response.status_code == 200
    assert set(response.json) == {"data"}
    data = response.json["data"]
    assert set(data) == ACCOUNT_FIELDS
    assert data | {"created_at": None, "connected_at": None} == {
        "id": account_id, "label": "Sales", "external_reference": "crm-7",
        "phone_number": account.phone_number, "name": account.name, "status": "active",
        "connection_mode": "coexistence", "business_account_id": account.business_account_id,
        "phone_id": account.phone_id, "subscribed_to_webhooks": True, "quality_rating": "GREEN",
        "daily_limit": 250, "messages_sent_today": 2, "created_at": None, "connected_at": None}
    assert data["created_at"].endswith("Z") and data["connected_at"].endswith("Z")
    assert "access_token" not in response.text and "EAAG" not in response.text


def test_a_foreign_or_unknown_account_is_a_404(client, alice, charlie):
    foreign = connect_number(client, charlie)
    for account_id in (foreign, "wacc_doesnotexist"):
        for path in (f"/api/v1/accounts/{account_id}", f"/api/v1/accounts/{account_id}/templates"):
            response = client.simulate_get(path, headers=alice.headers)
            assert response.status_code == 404
            assert response.json["success"] is False
            assert response.json["error"]["code"] == "account_not_found"


# GET /accounts

def test_the_list_is_paginated_and_holds_only_the_companys_numbers(client, alice, charlie):
    mine = [connect_number(client, alice, label=f"n{index}") for index in range(3)]
    connect_number(client, charlie)
    accounts.record_business_sends(account_row(mine[0]).id, ["56911110000"])
    first = client.simulate_get("/api/v1/accounts", params={"per_page": 2}, headers=alice.headers)
    assert first.status_code == 200
    assert [item["id"] for item in first.json["data"]] == mine[:2]
    assert all(set(item) == ACCOUNT_FIELDS for item in first.json["data"])
    assert [item["messages_sent_today"] for item in first.json["data"]] == [1, 0]
    meta = first.json["meta"]
    assert meta | {"path": None} == {"current_page": 1, "from": 1, "last_page": 2, "path": None, "per_page": 2,
                                     "to": 2, "total": 3}
    assert meta["path"].endswith("/api/v1/accounts")
    assert first.json["links"]["next"].endswith("/api/v1/accounts?per_page=2&page=2")
    assert first.json["links"]["prev"] is None
    second = client.simulate_get("/api/v1/accounts", params={"per_page": 2, "page": 2}, headers=alice.headers)
    assert [item["id"] for item in second.json["data"]] == mine[2:]
    assert second.json["meta"]["from"] == second.json["meta"]["to"] == 3


@sqlite_only
def test_an_empty_list_is_still_an_envelope(client, alice):
    response = client.simulate_get("/api/v1/accounts", headers=alice.headers)
    assert response.json["data"] == []
    assert response.json["meta"]["total"] == 0 and response.json["meta"]["from"] is None


@sqlite_only
@pytest.mark.parametrize("params", [{"page": "0"}, {"per_page": "101"}, {"per_page": "x"}, {"page": "-1"}])
def test_bad_page_parameters_are_a_422(client, alice, params):
    for path in ("/api/v1/accounts", f"/api/v1/accounts/{connect_number(client, alice)}/templates"):
        response = client.simulate_get(path, params=params, headers=alice.headers)
        assert response.status_code == 422
        assert response.json["error"]["code"] == "validation_failed"


@sqlite_only
def test_reads_need_their_scope_and_a_key(client, alice):
    account_id = connect_number(client, alice)
    templates_only = alice.with_key(["templates:read"])
    accounts_only = alice.with_key(["accounts:read"])
    for path, headers in (("/api/v1/accounts", templates_only), (f"/api/v1/accounts/{account_id}", templates_only),
                          (f"/api/v1/accounts/{account_id}/templates", accounts_only)):
        response = client.simulate_get(path, headers=headers)
        assert response.status_code == 403
        assert response.json["error"]["code"] == "missing_scope"
    assert client.simulate_get(f"/api/v1/accounts/{account_id}/templates", headers=templates_only).status_code == 200
    for headers in ({}, {"Authorization": "Bearer svc_live_key_nope.secret"}, {"Authorization": "Basic x"}):
        for path in ("/api/v1/accounts", f"/api/v1/accounts/{account_id}", f"/api/v1/accounts/{account_id}/templates"):
            response = client.simulate_get(path, headers=headers)
            assert response.status_code == 401
            assert response.json["error"]["code"] in {"unauthorized", "invalid_api_key"}


# GET /accounts/{id}/templates

def test_templates_are_the_approved_ones_with_their_variables(client, alice):
    account_id = connect_number(client, alice)
    response = client.simulate_get(f"/api/v1/accounts/{account_id}/templates", headers=alice.headers)
    assert response.status_code == 200
    items = {item["name"]: item for item in response.json["data"]}
    assert list(items) == ["hello_world", "order_update", "payment_reminder"]  # promo_pending is PENDING
    assert all(set(item) == TEMPLATE_FIELDS for item in items.values())
    reminder = items["payment_reminder"]
    assert reminder["id"] and reminder["status"] == "approved" and reminder["language"] == "es"
    assert reminder["body_text"] == "Hola {{1}}, tu saldo pendiente es {{2}}."
    assert (reminder["variable_count"], reminder["header_type"], reminder["category"]) == (2, None, "UTILITY")
    assert [variable["index"] for variable in reminder["variables"]] == [1, 2]
    assert items["order_update"]["header_type"] == "image" and items["order_update"]["variable_count"] == 1
    assert items["hello_world"]["variable_count"] == 0
    assert response.json["meta"]["total"] == 3


@sqlite_only
def test_templates_are_paginated(client, alice):
    account_id = connect_number(client, alice)
    path = f"/api/v1/accounts/{account_id}/templates"
    pages = [client.simulate_get(path, params={"per_page": 2, "page": page}, headers=alice.headers).json
             for page in (1, 2)]
    assert [len(page["data"]) for page in pages] == [2, 1]
    assert pages[0]["meta"]["last_page"] == 2 and pages[1]["links"]["next"] is None


def test_account_reads_answer_what_the_models_as_dict_gives(client, alice, charlie):
    """GET /accounts, /accounts/{id} and its templates make their items from the driver's rows:
    what `MessagingAccount.as_dict` (with `messages_sent_today`) and `Template.as_dict` give for
    the same rows, in several states, on every page."""
    import datetime as dt

    from models.clock import utcnow

    busy, quiet = (account_row(connect_number(client, alice, label="Sales", external_reference="crm-7")),
                   account_row(connect_number(client, alice)))
    connect_number(client, charlie)  # another company's number stays out of the list
    accounts.record_business_sends(busy.id, ["56911110000", "56922220000"])
    accounts.record_business_sends(busy.id, ["56933330000"], at=utcnow() - dt.timedelta(hours=25))  # out of the 24 h
    accounts.record_business_sends(quiet.id, ["56933330000"], at=utcnow() - dt.timedelta(hours=25))
    MessagingAccount.update(status="paused", label=None, daily_limit=None, quality_rating=None, connected_at=None,
                            subscribed_to_webhooks=False, created_at=dt.datetime(2026, 11, 28, 9, 30)).where(
        MessagingAccount.id == quiet.id).execute()  # a time written without its fraction
    Template.create(account=busy.id, name="a_first", language="es", status="approved", body_text=None,
                    components=[{"type": "BODY", "text": "Hola"}], updated_at=dt.datetime(2026, 11, 28, 9, 30))
    Template.create(account=busy.id, name="a_gone", language="es", status="approved", active=False)
    Template.create(account=busy.id, name="a_rejected", language="es", status="rejected")

    def as_model_gives(account: MessagingAccount) -> dict:
        account = MessagingAccount.get_by_id(account.id)
        return account.as_dict(messages_sent_today=accounts.messages_sent_today(account.id))

    expected = [as_model_gives(busy), as_model_gives(quiet)]
    assert [item["messages_sent_today"] for item in expected] == [2, 0]
    for account, item in zip((busy, quiet), expected, strict=True):
        assert client.simulate_get(f"/api/v1/accounts/{account.public_id}", headers=alice.headers).json == {
            "data": item}
    for params, items in (({}, expected), ({"per_page": 1}, expected[:1]), ({"per_page": 1, "page": 2}, expected[1:]),
                          ({"page": 2}, [])):
        body = client.simulate_get("/api/v1/accounts", params=params, headers=alice.headers).json
        assert body["data"] == items and body["meta"]["total"] == 2, params
    templates = [template.as_dict() for template in accounts.approved_templates(busy.id)]
    assert templates[0]["name"] == "a_first" and templates[0]["variables"] == [] and templates[0]["components"]
    for params, items in (({}, templates), ({"per_page": 2, "page": 2}, templates[2:4]), ({"page": 3}, [])):
        body = client.simulate_get(f"/api/v1/accounts/{busy.public_id}/templates", params=params,
                                   headers=alice.headers).json
        assert body["data"] == items and body["meta"]["total"] == len(templates), params


def test_a_sync_picks_up_new_and_changed_templates_and_retires_vanished_ones(client, alice, simulator):
    account = account_row(connect_number(client, alice))
    Template.create(account=account.id, name="old_promo", language="en_US", status="approved", body_text="Hi")
    simulator.set_template("shipping_notice", "es", body="Tu pedido {{1}} llega el {{2}}", category="UTILITY")
    simulator.set_template("promo_pending", "en_US", status="APPROVED")
    try:
        result = sync_templates(account)
    finally:
        simulator.set_template("promo_pending", "en_US", status="PENDING")
    names = [item["name"] for item in client.simulate_get(
        f"/api/v1/accounts/{account.public_id}/templates", headers=alice.headers).json["data"]]
    assert "shipping_notice" in names and "promo_pending" in names and "old_promo" not in names
    assert Template.get((Template.account == account.id) & (Template.name == "shipping_notice")).variable_count == 2
    assert not Template.get((Template.account == account.id) & (Template.name == "old_promo")).active
    assert (result.deactivated, result.approved) == (1, result.total)


@sqlite_only
def test_an_unchanged_template_keeps_its_updated_at(client, alice):
    account = account_row(connect_number(client, alice))
    before = {t.name: t.updated_at for t in Template.select().where(Template.account == account.id)}
    sync_templates(account)
    after = {t.name: t.updated_at for t in Template.select().where(Template.account == account.id)}
    assert after == before


@sqlite_only
def test_the_periodic_sync_covers_every_connected_number(client, alice, charlie):
    ids = [account_row(connect_number(client, persona)).id for persona in (alice, charlie)]
    Template.delete().execute()
    assert sync_all_templates.call_local() == 2
    for account_id in ids:
        assert Template.select().where(Template.account == account_id).count() >= 4


# svcctl accounts

def test_the_cli_lists_and_shows_numbers(client, alice, charlie):
    account_id = connect_number(client, alice, label="Sales")
    connect_number(client, charlie)
    listed = json.loads(cli("accounts", "list", "--tenant", alice.tenant.public_id, "--json").stdout)
    assert [item["id"] for item in listed] == [account_id]
    assert listed[0]["mps"] == 20 and listed[0]["tenant_id"] == alice.tenant.public_id
    shown = json.loads(cli("accounts", "show", account_id, "--json").stdout)
    assert set(shown) >= ACCOUNT_FIELDS and shown["label"] == "Sales" and shown["ready"] is True
    assert "EAAG" not in json.dumps(shown)
    table = cli("accounts", "list", "--tenant", alice.tenant.public_id).stdout
    assert account_id in table


@sqlite_only
def test_the_cli_pauses_and_resumes_a_number(client, alice):
    account_id = connect_number(client, alice)
    paused = json.loads(cli("accounts", "pause", account_id, "--reason", "billing", "--json").stdout)
    assert (paused["status"], paused["paused_reason"]) == ("paused", "administrator: billing")
    assert client.simulate_get(f"/api/v1/accounts/{account_id}", headers=alice.headers).json["data"]["status"] \
        == "paused"
    again = cli("accounts", "pause", account_id, ok=False)
    assert again.exit_code != 0 and "already paused" in again.stderr
    resumed = json.loads(cli("accounts", "resume", account_id, "--json").stdout)
    assert (resumed["status"], resumed["paused_reason"]) == ("active", None)
    not_paused = cli("accounts", "resume", account_id, ok=False)
    assert not_paused.exit_code != 0 and "not paused" in not_paused.stderr


@sqlite_only
def test_the_cli_sets_pacing_and_the_daily_limit(client, alice):
    account_id = connect_number(client, alice)
    updated = json.loads(cli("accounts", "set", account_id, "--mps", "10", "--daily-limit", "2000", "--json").stdout)
    assert (updated["mps"], updated["daily_limit"]) == (10, 2000)
    assert json.loads(cli("accounts", "set", account_id, "--unlimited", "--json").stdout)["daily_limit"] is None
    for args, message in ((["--mps", "21"], "capped at 20"), (["--mps", "0"], "between 1 and 1000"),
                          (["--mps", "1001"], "between 1 and 1000"), (["--daily-limit", "0"], "at least 1"),
                          ([], "nothing to set")):
        result = cli("accounts", "set", account_id, *args, ok=False)
        assert result.exit_code != 0
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    # A number that is not coexistence may go up to the platform's 1000/s.
    MessagingAccount.update(connection_mode="internal").where(MessagingAccount.public_id == account_id).execute()
    assert json.loads(cli("accounts", "set", account_id, "--mps", "500", "--json").stdout)["mps"] == 500


@sqlite_only
def test_the_cli_names_an_unknown_account(storage):
    result = cli("accounts", "show", "wacc_nope", ok=False)
    assert result.exit_code != 0 and "no account wacc_nope" in result.stderr


# svcctl templates

def test_the_cli_syncs_templates(client, alice, charlie):
    mine = connect_number(client, alice)
    connect_number(client, charlie)
    Template.delete().execute()
    one = json.loads(cli("templates", "sync", "--account", mine, "--json").stdout)
    assert one == [{"account_id": mine, "total": 4, "approved": 3, "deactivated": 0, "error": None}]
    every = json.loads(cli("templates", "sync", "--json").stdout)
    assert len(every) == 2 and all(item["error"] is None for item in every)
    assert "hello_world" not in cli("templates", "sync").stdout  # a table of counts, not of templates


@sqlite_only
def test_the_cli_reports_a_platform_it_cannot_reach(client, alice):
    account_id = connect_number(client, alice)
    unreachable_platform()
    single = cli("templates", "sync", "--account", account_id, ok=False)
    assert single.exit_code != 0 and f"could not sync {account_id}" in single.stderr
    every = cli("templates", "sync", ok=False)
    assert every.exit_code != 0 and "1 of 1 numbers could not be synced" in every.stderr
