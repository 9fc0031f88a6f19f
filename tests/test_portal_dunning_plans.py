"""The portal's collection plans page (list, create, delete) and a debt's Resolve dispute button."""

from __future__ import annotations

from models.receivables import promises
from models.receivables.debts import get_debt
from models.receivables.tables import DebtDispute, DunningPlan
from tests.campaigns_fixtures import *  # noqa: F403  (fixtures)
from tests.campaigns_fixtures import make_number
from tests.portal_fixtures import *  # noqa: F403
from tests.portal_fixtures import make_user, signed_in
from tests.test_receivables_collection import NOON, sync


def test_an_owner_creates_lists_and_deletes_a_plan(client, alice, owner, sim):
    make_number(alice.id, sim)
    browser = signed_in(client, owner)
    empty = browser.get("/portal/receivables/plans")
    assert empty.status_code == 200 and "New plan" in empty.text
    made = browser.post("/portal/receivables/plans", {
        "name": "Firme", "currency": "USD", "amount_from": "", "amount_to": "5000", "steps": "-3, 0, 3, 10, 30",
        "weekly_cap": "2", "quiet_from": "", "quiet_to": "", "pause_on_promise": "on", "pause_on_dispute": "on",
        "escalate": "on"})
    assert made.status_code == 303, made.text
    plan = DunningPlan.get()
    assert (plan.currency, plan.amount_to, plan.weekly_cap, [s["days"] for s in plan.steps]) == (
        "USD", 500000, 2, [-3, 0, 3, 10, 30])
    listed = browser.get("/portal/receivables/plans")
    assert "Firme" in listed.text and "+30" in listed.text
    refused = browser.post("/portal/receivables/plans", {"name": "Mal", "steps": "0:nope"})
    assert refused.status_code == 422 and DunningPlan.select().count() == 1
    assert browser.post("/portal/receivables/plans", {"name": "Mal", "steps": "cero"}).status_code == 422

    developer = signed_in(client, make_user(alice.id, "developer"))
    assert "New plan" not in developer.get("/portal/receivables/plans").text
    assert developer.post("/portal/receivables/plans/delete", {"id": plan.public_id}).status_code == 403
    assert browser.post("/portal/receivables/plans/delete", {"id": plan.public_id}).status_code == 303
    assert not DunningPlan.select().exists()


def test_an_owner_resolves_a_dispute(client, alice, owner, sim):
    number = make_number(alice.id, sim)
    sync(alice, number, "A", [NOON.date()])
    promises.dispute(get_debt(alice.id, "A"), "No reconozco")
    browser = signed_in(client, owner)
    page = browser.get("/portal/receivables/debt", id="A")
    assert "No reconozco" in page.text and "Resolve dispute" in page.text
    assert browser.post("/portal/receivables/debt/dispute/resolve", {"id": "A"}).status_code == 303
    assert DebtDispute.get().status == "resolved"
    assert "Resolve dispute" not in browser.get("/portal/receivables/debt", id="A").text
