"""Text from outside reaches the administrator's terminal as text: Rich markup in a company name,
a campaign's reference or an ERP row is printed as written, terminal escape sequences are shown
as visible escapes, and a bad row never stops an import.

Every command here is the real `svcctl` process, against the test's database.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from tests.campaigns_fixtures import *  # noqa: F403  (sim, number, queue_only)
from tests.campaigns_fixtures import create_for, wa
from tests.live import ROOT, env_for
from tests.receivables_fixtures import make_account
from tests.test_receivables_cli import HEADER, csv_row

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m\u202e"
VISIBLE = "\\x1b]0;owned\\x07\\x1b[2J\\x1b[31m\\u202e"


def svcctl(storage, *args: str) -> subprocess.CompletedProcess:
    # Wide enough that no cell wraps, so what is printed can be searched for whole.
    return subprocess.run([sys.executable, "-m", "svcctl.main", *args], cwd=ROOT,
                          env={**env_for(storage), "COLUMNS": "400"}, capture_output=True, text=True, timeout=60)


def assert_no_escape(*outputs: str) -> None:
    for output in outputs:
        assert "\x1b" not in output and "\x07" not in output and "\u202e" not in output


def test_an_access_request_full_of_markup_and_escapes_lists_as_text(client, storage):
    for company in ("Acme [/]", f"Evil {ESCAPES}Corp", "[bold red]Initech[/bold red]"):
        response = client.simulate_post("/api/v1/access-requests", json={
            "company_name": company, "contact_name": "[link=https://evil.example]x[/link]",
            "contact_email": f"{len(company)}@example.com"}, remote_addr="203.0.113.9")
        assert response.status_code == 201, response.text

    listed = svcctl(storage, "access-requests", "list")
    assert listed.returncode == 0, listed.stderr
    assert "Acme [/]" in listed.stdout and "[bold red]Initech[/bold red]" in listed.stdout
    assert f"Evil {VISIBLE}Corp" in listed.stdout
    assert_no_escape(listed.stdout, listed.stderr)

    request_id = json.loads(svcctl(storage, "access-requests", "list", "--json").stdout)[1]["id"]
    shown = svcctl(storage, "access-requests", "show", request_id)
    assert shown.returncode == 0, shown.stderr
    assert "\\x1b]0;owned\\x07" in shown.stdout and "[link=https://evil.example]x[/link]" in shown.stdout
    assert_no_escape(shown.stdout, shown.stderr)


def test_a_campaign_reference_with_markup_shows_as_written(storage, alice, number, queue_only):
    campaign = create_for(alice, number, [wa("1")], external_reference=f"x[/]{ESCAPES}")
    shown = svcctl(storage, "campaigns", "show", campaign.public_id)
    assert shown.returncode == 0, shown.stderr
    assert "x[/]\\x1b]0;owned" in shown.stdout
    assert_no_escape(shown.stdout, shown.stderr)


def test_an_error_line_quoting_an_unknown_id_is_text(storage):
    failed = svcctl(storage, "campaigns", "show", f"cmp_[/]{ESCAPES}")
    assert failed.returncode == 1
    assert "cmp_[/]\\x1b]0;owned" in failed.stderr
    assert_no_escape(failed.stderr)


def test_an_erp_row_with_markup_and_escapes_is_reported_and_every_valid_row_saved(storage, alice, tmp_path):
    account = make_account(alice).public_id
    hostile = [f"=HYPERLINK(\"https://evil.example\")[/]{ESCAPES}", "+1[/]", "@SUM(A1)", "-2+3"]
    lines = [HEADER, csv_row(account, "D-1")]
    lines += [csv_row(account, external_id, currency="[/]") for external_id in hostile]
    lines += [csv_row(account, f"D-{n}") for n in range(2, 6)]
    source = tmp_path / "debts.csv"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    errors = tmp_path / "errors.csv"

    imported = svcctl(storage, "cartera", "import", "--tenant", alice.tenant.public_id, str(source),
                      "--errors", str(errors), "--json")
    assert imported.returncode == 1, imported.stderr  # bad rows were refused
    summary = json.loads(imported.stdout)
    assert (summary["created"], summary["errors"]) == (5, 4)
    assert "=HYPERLINK(\"https://evil.example\")[/]\\x1b]0;owned" in imported.stderr
    assert_no_escape(imported.stderr)

    shown = svcctl(storage, "cartera", "list", "--tenant", alice.tenant.public_id, "--json")
    assert sorted(debt["external_id"] for debt in json.loads(shown.stdout)) == [f"D-{n}" for n in range(1, 6)]

    # The errors file opens in a spreadsheet without running anything: no cell starts a formula.
    with errors.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))[1:]
    assert len(rows) == 4
    for row in rows:
        assert not row[1].startswith(("=", "+", "-", "@")) and not row[3].startswith(("=", "+", "-", "@"))
    assert sorted(row[1] for row in rows) == sorted("'" + external_id for external_id in hostile)


@pytest.mark.parametrize("value", ["=1+1", "+1", "-1", "@A1", "\tx", "\rx", "plain", ""])
def test_csv_cells_never_start_a_formula(value):
    from svcctl.receivables import csv_cell

    cell = csv_cell(value)
    assert not cell.startswith(("=", "+", "-", "@", "\t", "\r"))
    assert cell.lstrip("'") == value
