"""Collection reminders open the debtor's page when the company has a gateway and its number the
`payment_reminder_link` template: payment_reminder's words, and the page's token in the
template's "Pay now" URL button (`{public URL}/pay/{{1}}`, the token the suffix), never in the
body. On the page the debtor chooses what to pay (tests/test_debtor_links.py)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
import requests

from config import get_settings
from models.receivables import debtor_links, payments
from models.receivables.collection import send_due_reminders
from models.receivables.tables import DebtorLink, PaymentLink
from models.sending.tables import Campaign, CampaignRecipient
from tests.campaigns_fixtures import *  # noqa: F403  (sim, app, client)
from tests.campaigns_fixtures import TEMPLATES, make_number
from tests.payments_fixtures import *  # noqa: F403  (gateway_sim, gateway)
from tests.payments_fixtures import add_link_template, template_row
from tests.test_receivables_collection import DAY, NOON, sync

pytestmark = pytest.mark.parametrize("storage", ["sqlite"], indirect=True)


def recipients(campaign_public_id: str) -> dict[str, CampaignRecipient]:
    campaign = Campaign.get(Campaign.public_id == campaign_public_id)
    rows = CampaignRecipient.select().where(CampaignRecipient.campaign == campaign.id)
    return {row.external_contact_id: row for row in rows}


def sent_to(sim, number) -> list[dict]:
    return [item for item in sim.sent() if item["phone_number_id"] == number.phone_id]


def test_a_reminder_carries_the_debtors_page_in_the_button_and_it_opens(client, alice, sim, gateway):
    row = add_link_template(sim.base_url)
    number = make_number(alice.id, sim, templates=[*TEMPLATES, row])
    sync(alice, number, "A", [NOON.date()], phone="56911120001")
    [campaign] = send_due_reminders(NOON)
    assert Campaign.get(Campaign.public_id == campaign).template_name == "payment_reminder_link"
    reminder = recipients(campaign)["A"]
    [token] = [button["text"] for button in reminder.buttons if button["type"] == "url"]
    assert reminder.vars == ["Cliente A", "USD 100,00"]
    # The URL button's suffix, and the quick replies' payloads naming the debt (replies.py).
    assert reminder.buttons == [{"index": 0, "type": "url", "text": token},
                                {"index": 1, "type": "quick_reply", "payload": "cartera:paid:A"},
                                {"index": 2, "type": "quick_reply", "payload": "cartera:promise:A"},
                                {"index": 3, "type": "quick_reply", "payload": "cartera:dispute:A"}]
    assert token.startswith("dl_")
    assert PaymentLink.select().count() == 0  # a payment link is made when the debtor chooses what to pay
    assert DebtorLink.get().token_hash == debtor_links.token_hash(token)

    # What the platform got: two body parameters without the token, and the token as the button's suffix.
    [message] = sent_to(sim, number)
    [body] = [c for c in message["components"] if c["type"] == "body"]
    assert [p["text"] for p in body["parameters"]] == ["Cliente A", "USD 100,00"]
    assert token not in str(body)
    [button] = [c for c in message["components"] if c["type"] == "button" and c["sub_type"] == "url"]
    assert button == {"type": "button", "sub_type": "url", "index": "0",
                      "parameters": [{"type": "text", "text": token}]}

    # The button the debtor taps: the template's URL with the suffix put in, which opens the page.
    [declared] = [c["buttons"] for c in row["components"] if c["type"] == "BUTTONS"]
    assert declared[0]["text"] == "Pay now"
    url = declared[0]["url"].replace("{{1}}", button["parameters"][0]["text"])
    assert url == f"{get_settings().public_url}/pay/{token}"
    first = client.simulate_get(urlsplit(url).path)
    assert first.status_code == 303 and first.headers["location"] == f"/d/{token}"
    page = client.simulate_get(first.headers["location"])
    assert page.status_code == 200 and "Cliente A" in page.text and "A-1" in page.text

    # The next stage's reminder sends the same token again.
    [later] = send_due_reminders(NOON + 3 * DAY)
    assert recipients(later)["A"].buttons == reminder.buttons and DebtorLink.select().count() == 1


def test_without_the_template_or_a_gateway_the_reminder_has_no_link(alice, sim, gateway, charlie):
    row = add_link_template(sim.base_url)
    number = make_number(alice.id, sim)  # the plain templates only
    sync(alice, number, "A", [NOON.date()], phone="56911120002")
    other = make_number(charlie.id, sim, templates=[*TEMPLATES, row])  # charlie has no gateway
    sync(charlie, other, "B", [NOON.date()], phone="56911120003")
    created = send_due_reminders(NOON)
    assert len(created) == 2
    assert {Campaign.get(Campaign.public_id == c).template_name for c in created} == {"payment_reminder"}
    assert [(len(r.vars), r.buttons) for c in created for r in recipients(c).values()] == [(2, None), (2, None)]
    assert PaymentLink.select().count() == 0
    assert all("components" in item and not [c for c in item["components"] if c["type"] == "button"]
               for item in sim.sent())


@pytest.mark.parametrize("definition", [
    # The template as it was: the link in the body's third variable, no button.
    {"body": "Hola {{1}}, tu saldo pendiente es {{2}}. Paga aquí: {{3}}"},
    # A button that opens some other site.
    {"buttons": [{"type": "URL", "text": "Pay now", "url": "https://elsewhere.example.com/pay/{{1}}"}]},
    # A second dynamic button a reminder has nothing to fill with.
    {"buttons": [{"type": "URL", "text": "Pay now", "url": "{public}/pay/{{1}}"},
                 {"type": "URL", "text": "Track", "url": "https://track.example.com/{{1}}"}]},
], ids=["link-in-body", "foreign-url", "two-dynamic-buttons"])
def test_a_link_template_a_reminder_cannot_fill_sends_the_plain_reminder(alice, sim, gateway, definition):
    public = get_settings().public_url
    shape = {**payments.link_template_definition(public), **definition}
    for button in shape.get("buttons", []):
        if "url" in button:
            button["url"] = button["url"].replace("{public}", public)
    if "body" in definition:
        shape.pop("buttons")
    response = requests.post(f"{sim.base_url}/_sim/templates", json=shape, timeout=5)
    response.raise_for_status()
    number = make_number(alice.id, sim, templates=[*TEMPLATES, template_row(response.json())])
    sync(alice, number, "A", [NOON.date()], phone="56911120004")

    [campaign] = send_due_reminders(NOON)

    assert Campaign.get(Campaign.public_id == campaign).template_name == "payment_reminder"
    assert recipients(campaign)["A"].buttons is None and PaymentLink.select().count() == 0
    [message] = sent_to(sim, number)
    assert message["template"] == "payment_reminder"
