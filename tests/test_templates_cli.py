"""svcctl templates create|delete: the API's shape from a file or stdin, the same rules (each
broken one printed with its field, exit non-zero), the same submission to the simulator."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from models.numbers.tables import Template
from svcctl.main import app as svcctl
from tests.accounts_fixtures import *  # noqa: F403  (fixtures)
from tests.accounts_fixtures import connect_number, sqlite_only
from tests.test_templates_api import RULES, broken, sim_template, valid_template

runner = CliRunner()


def cli(*args: str, stdin: str | None = None):
    return runner.invoke(svcctl, ["templates", *args], input=stdin)


def test_a_template_from_a_file_is_submitted_and_deleted(client, alice, simulator, tmp_path):
    account_id = connect_number(client, alice)
    source = tmp_path / "order_ready.json"
    source.write_text(json.dumps(valid_template()))
    created = cli("create", "--account", account_id, str(source), "--json")
    assert created.exit_code == 0, created.stderr
    data = json.loads(created.stdout)
    assert (data["name"], data["status"]) == ("order_ready", "pending")
    assert sim_template(simulator, "order_ready", "es")["id"] == data["id"]
    again = cli("create", "--account", account_id, str(source))
    assert again.exit_code != 0 and "already has the template 'order_ready'" in again.stderr
    deleted = cli("delete", "--account", account_id, "order_ready")
    assert deleted.exit_code == 0, deleted.stderr
    assert "deleted" in deleted.stdout
    assert Template.get(Template.name == "order_ready").status == "deleted"
    assert sim_template(simulator, "order_ready", "es") is None


@sqlite_only
def test_every_rule_is_printed_with_its_field_from_stdin(client, alice, simulator):
    account_id = connect_number(client, alice)
    for rule, (mutate, field) in RULES.items():
        result = cli("create", "--account", account_id, "-", stdin=json.dumps(broken(mutate)))
        assert result.exit_code != 0, rule
        assert f"{field}:" in result.stderr and "template not submitted" in result.stderr, (rule, result.stderr)
    assert not Template.select().where(Template.name == "order_ready").exists()


@sqlite_only
def test_bad_files_and_unknown_names_are_one_clear_line(client, alice, simulator, tmp_path):
    account_id = connect_number(client, alice)
    not_json = cli("create", "--account", account_id, "-", stdin="{name: ")
    assert not_json.exit_code != 0 and "- is not valid JSON" in not_json.stderr
    missing = cli("create", "--account", account_id, str(tmp_path / "absent.json"))
    assert missing.exit_code != 0 and "cannot read" in missing.stderr
    unknown_account = cli("create", "--account", "wacc_nope", "-", stdin=json.dumps(valid_template()))
    assert unknown_account.exit_code != 0 and "no account wacc_nope" in unknown_account.stderr
    unknown_template = cli("delete", "--account", account_id, "never_written")
    assert unknown_template.exit_code != 0 and "no template 'never_written'" in unknown_template.stderr
