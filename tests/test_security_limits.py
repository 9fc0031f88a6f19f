"""What a campaign stores is bounded: oversized fields are refused with 422 before anything is
stored or reserved.

The attack this answers: a recipient's `payload` and `vars` had no bound, so one campaign of one
recipient (one credit) stored 7.4 MB; defaults in `body_placeholders` were copied to every
recipient, so a small request could store far more.
"""

from __future__ import annotations

import requests

from models.sending.campaign_inputs import MAX_PAYLOAD_BYTES, MAX_VARIABLES
from models.sending.tables import Campaign, CampaignRecipient
from models.tenancy import credits
from models.tenancy.tables import Wallet
from tests.campaigns_fixtures import make_number
from tests.live_fixtures import *  # noqa: F403  (live_service)


def post_campaign(service, persona, account, recipients, **extra):
    body = {"account_id": account.public_id, "template_name": "order_update", "header_type": "image",
            "header_url": "https://cdn.example/box.png", "recipients": recipients, **extra}
    return requests.post(service.api_url + "/api/v1/campaigns", json=body, headers=persona.headers, timeout=60)


def assert_refused(response, field: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_failed"
    assert field in error["details"]["errors"], error


def test_oversized_campaign_fields_are_refused_and_nothing_is_stored(live_service, alice):
    account = make_number(alice.id)
    credits.grant(alice.id, 10_000)
    reserved = Wallet.get(Wallet.tenant == alice.id).reserved

    # The 7.4 MB campaign: one recipient, a payload of megabytes.
    huge = post_campaign(live_service, alice, account, [{"wa_id": "15550001", "vars": ["A-1"],
                                                         "payload": {"blob": "x" * 7_400_000}}])
    assert_refused(huge, "recipients.0.payload")
    just_over = {"blob": "x" * (MAX_PAYLOAD_BYTES - len('{"blob":""}') + 1)}
    assert_refused(post_campaign(live_service, alice, account, [{"wa_id": "15550001", "vars": ["A-1"],
                                                                 "payload": just_over}]), "recipients.0.payload")
    too_big_int = post_campaign(live_service, alice, account, [{"wa_id": "15550001", "vars": ["A-1"],
                                                                "payload": {"n": 10**30}}])
    assert_refused(too_big_int, "recipients.0.payload")

    many_vars = post_campaign(live_service, alice, account,
                              [{"wa_id": "15550001", "vars": ["v"] * (MAX_VARIABLES + 1)}])
    assert_refused(many_vars, "recipients.0.vars")
    assert_refused(post_campaign(live_service, alice, account, [{"wa_id": "15550001"}],
                                 body_placeholders=["v"] * (MAX_VARIABLES + 1)), "body_placeholders")

    # A 170 KB request whose default is copied to 5000 recipients: 20 MB if it were stored.
    amplified = post_campaign(live_service, alice, account, [{"wa_id": f"1555{n:06d}"} for n in range(5000)],
                              body_placeholders=["😀" * 1000])
    assert_refused(amplified, "recipients")

    assert Campaign.select().count() == 0 and CampaignRecipient.select().count() == 0
    assert Wallet.get(Wallet.tenant == alice.id).reserved == reserved

    # At the bounds, a campaign is accepted.
    fits = {"blob": "x" * (MAX_PAYLOAD_BYTES - len('{"blob":""}'))}
    accepted = post_campaign(live_service, alice, account, [{"wa_id": "15550001", "vars": ["A-1"], "payload": fits}])
    assert accepted.status_code == 201, accepted.text
