"""Collection reminders carry a payment link when the company has a gateway and its number the
`payment_reminder_link` template; the link's checkout is made when the debtor first opens it."""

from __future__ import annotations

import pytest

from models.campaigns import Campaign, CampaignRecipient
from models.cartera_collection import send_due_reminders
from models.payments import PaymentLink
from tests.campaigns_fixtures import *  # noqa: F403  (sim, app, client)
from tests.campaigns_fixtures import TEMPLATES, make_number
from tests.payments_fixtures import *  # noqa: F403  (gateway_sim, gateway)
from tests.payments_fixtures import LINK_TEMPLATE_ROW, add_link_template
from tests.test_cartera_collection import DAY, NOON, sync

pytestmark = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)


def recipients(campaign_public_id: str) -> dict[str, CampaignRecipient]:
    campaign = Campaign.get(Campaign.public_id == campaign_public_id)
    rows = CampaignRecipient.select().where(CampaignRecipient.campaign == campaign.id)
    return {row.external_contact_id: row for row in rows}


def test_a_reminder_carries_a_link_that_opens_the_checkout(client, alice, sim, gateway):
    add_link_template(sim.base_url)
    number = make_number(alice.id, sim, templates=[*TEMPLATES, LINK_TEMPLATE_ROW])
    sync(alice, number, "A", [NOON.date()], telefono="56911120001")
    [campaign] = send_due_reminders(NOON)
    assert Campaign.get(Campaign.public_id == campaign).template_name == "payment_reminder_link"
    reminder = recipients(campaign)["A"]
    name, balance, url = reminder.vars
    assert (name, balance) == ("Cliente A", "USD 100,00")
    link = PaymentLink.get()
    assert url.endswith(f"/pay/{link.public_id}") and (link.origin, link.monto, link.checkout_url) == (
        "reminder", 10000, None)
    sent = [item for item in sim.sent() if item["phone_number_id"] == number.phone_id]
    assert [c["parameters"][2]["text"] for item in sent for c in item["components"] if c["type"] == "body"] == [url]
    # Opening it makes the checkout once; a second opening goes to the same one.
    first = client.simulate_get(f"/pay/{link.public_id}")
    assert first.status_code == 302 and first.headers["location"].startswith(gateway.sim.base_url)
    assert client.simulate_get(f"/pay/{link.public_id}").headers["location"] == first.headers["location"]
    # The next stage's reminder, for the same balance, sends the same link again.
    [later] = send_due_reminders(NOON + 3 * DAY)
    assert recipients(later)["A"].vars[2] == url and PaymentLink.select().count() == 1


def test_without_the_template_or_a_gateway_the_reminder_has_no_link(alice, sim, gateway, charlie):
    number = make_number(alice.id, sim)  # the plain templates only
    sync(alice, number, "A", [NOON.date()], telefono="56911120002")
    other = make_number(charlie.id, sim, templates=[*TEMPLATES, LINK_TEMPLATE_ROW])  # charlie has no gateway
    sync(charlie, other, "B", [NOON.date()], telefono="56911120003")
    created = send_due_reminders(NOON)
    assert len(created) == 2
    assert {Campaign.get(Campaign.public_id == c).template_name for c in created} == {"payment_reminder"}
    assert [len(r.vars) for c in created for r in recipients(c).values()] == [2, 2]
    assert PaymentLink.select().count() == 0
