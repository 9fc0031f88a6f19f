"""svcctl campaigns list | show | watch."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from models.sending.campaigns import create_campaign
from models.sending.tables import Campaign
from svcctl.main import app as svcctl  # noqa: E402  (after the fixtures, whose `app` it would shadow)
from tests.campaigns_fixtures import *  # noqa: F403
from tests.campaigns_fixtures import campaign_body, wa
from tests.live import ROOT, env_for

pytestmark = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
runner = CliRunner()


def run(*args: str):
    result = runner.invoke(svcctl, list(args))
    assert result.exit_code == 0, result.stderr or result.stdout
    return result


@pytest.fixture
def queued(alice, number, immediate_queue) -> Campaign:
    immediate_queue.immediate = False
    campaign = create_campaign(alice.id, campaign_body(number, [wa(), wa()]))
    immediate_queue.immediate = True
    return campaign


def test_list_and_show_print_json(alice, number, queued):
    collection = create_campaign(alice.id, campaign_body(number, [wa()]), source="collection")
    listed = json.loads(run("campaigns", "list", "--tenant", alice.tenant.public_id, "--json").stdout)
    assert [item["id"] for item in listed] == [collection.public_id, queued.public_id]
    assert [item["source"] for item in listed] == ["collection", "api"]
    only = json.loads(run("campaigns", "list", "--tenant", alice.tenant.public_id, "--status", "queued",
                          "--limit", "1", "--json").stdout)
    assert len(only) == 1
    shown = json.loads(run("campaigns", "show", queued.public_id, "--json").stdout)
    assert (shown["id"], shown["status"], shown["pending"], shown["tenant_id"]) == (
        queued.public_id, "queued", 2, alice.tenant.public_id)
    table = run("campaigns", "list", "--tenant", alice.tenant.public_id).stdout
    assert queued.public_id in table


def test_errors_are_one_line(alice):
    result = runner.invoke(svcctl, ["campaigns", "show", "cmp_nothere"])
    assert result.exit_code == 1 and result.stderr.strip() == "error: no campaign cmp_nothere"
    result = runner.invoke(svcctl, ["campaigns", "list", "--tenant", alice.tenant.public_id, "--status", "done"])
    assert result.exit_code == 1 and "--status" in result.stderr


def watch(storage, campaign: Campaign, *args: str) -> tuple[subprocess.Popen, str]:
    """Start `svcctl campaigns watch` and return once it is watching (its first line)."""
    watcher = subprocess.Popen([sys.executable, "-m", "svcctl.main", "campaigns", "watch", campaign.public_id, *args],
                               cwd=ROOT, env={**env_for(storage), "PATH": "/usr/bin:/bin"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = watcher.stderr.readline()
    assert first.startswith(f"watching {campaign.public_id}"), first
    return watcher, first


def test_watch_follows_a_campaign_until_it_finishes(storage, queued):
    # It reads the campaign every 0.1 s while it is queued; ending on "completed" (below) shows it
    # did not stop at an earlier status.
    watcher, _ = watch(storage, queued, "--interval", "0.1")
    from jobs.campaigns import enqueue_dispatch

    enqueue_dispatch(queued.id)
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert json.loads(out)["status"] == "completed"
    assert queued.public_id in err and "Traceback" not in err


def test_ctrl_c_stops_watching_cleanly(storage, queued):
    watcher, _ = watch(storage, queued)  # its Ctrl-C handler is set before its first line
    watcher.send_signal(signal.SIGINT)
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert "stopped watching" in err and "Traceback" not in err
    assert out == ""
    assert Campaign.get_by_id(queued.id).status == "queued"
