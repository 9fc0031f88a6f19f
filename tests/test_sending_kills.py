"""A consumer SIGKILLed mid-send, and restarted 3 s later, on SQLite and on PostgreSQL + Redis:
gunicorn, `svcctl worker` and the simulator as real processes.

At each kill the test reads, from the engine's own marks, what the dead engine held: sends
started (their platform call may have been in flight) and sends only claimed. Afterwards:

- nobody was sent twice (the simulator's received counts);
- every send the simulator received ends sent, delivered or read, with one `message.sent`;
- claimed-but-unstarted sends went out later; only started ones may fail `send_unconfirmed`,
  so those failures are at most the sends in flight at the kills (printed);
- the ledger replays to the wallet, and one credit was consumed per send received.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

import pytest
import requests

from models.events.tables import Event
from models.sending.messages import MessageInput, create_message
from models.sending.tables import Campaign, CampaignRecipient, Message
from models.store.db import atomic
from models.tenancy import credits
from tests.campaigns_fixtures import campaign_body, let_write
from tests.conftest import Persona
from tests.live import LiveService, wait_until
from tests.live_fixtures import *  # noqa: F403
from tests.test_campaigns_live import api, live_number
from tests.test_credits import replay_ledger

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]
RESTART_AFTER = 3.0  # seconds a killed consumer stays down, as a supervisor's restart delay


@dataclass
class HeldAtKill:
    """What a killed engine held, by its marks: started (maybe on the wire) and only claimed,
    as (public id, claim token)."""

    started: set[tuple[str, str]]
    claimed: set[tuple[str, str]]

    def since(self, earlier: list[HeldAtKill]) -> HeldAtKill:
        """Without the claims an earlier kill left still unsettled (the same claim token)."""
        before = set().union(*(kill.started | kill.claimed for kill in earlier))
        return HeldAtKill(self.started - before, self.claimed - before)


def held(model, rows) -> HeldAtKill:
    queued = rows.where((model.status == "queued") & model.claim_token.is_null(False)).tuples()
    pairs = [((public_id, token), started) for public_id, token, started in queued]
    return HeldAtKill({pair for pair, started in pairs if started is not None},
                      {pair for pair, started in pairs if started is None})


def ids(pairs: set[tuple[str, str]]) -> set[str]:
    return {public_id for public_id, _token in pairs}


def kill_and_restart(service: LiveService, snapshot, earlier: list[HeldAtKill]) -> HeldAtKill:
    service.kill("worker")
    time.sleep(RESTART_AFTER)
    # Read just before the restart: nothing moves the dead engine's rows until a consumer runs
    # again, and a commit the database was finishing for it when it died has landed by now.
    at_kill = snapshot().since(earlier)
    service.start_worker()
    return at_kill


def backend(settings) -> str:
    return "postgres+redis" if settings.database_url else "sqlite"


def received_by_platform(service: LiveService, account) -> collections.Counter:
    sent = requests.get(f"{service.sim_url}/_sim/sent", timeout=30).json()["data"]
    return collections.Counter(item["biz_opaque_callback_data"] for item in sent
                               if item["phone_number_id"] == account.phone_id)


def events_by(tenant_id: int, name: str, key: str) -> collections.Counter:
    return collections.Counter(event.payload[key] for event in Event.select().where(
        (Event.tenant == tenant_id) & (Event.name == name)))


def assert_whole(label: str, persona: Persona, account, service: LiveService, rows: dict, kills: list[HeldAtKill],
                 event_key: str) -> None:
    received = received_by_platform(service, account)
    twice = {callback: count for callback, count in received.items() if count > 1}
    assert not twice, f"sent twice: {twice}"
    assert set(received) <= set(rows)
    unconfirmed = {public_id for public_id, row in rows.items() if row.error_code == "send_unconfirmed"}
    in_flight = set().union(*(ids(kill.started) for kill in kills))
    print(f"\n{label}: " + "; ".join(
        f"kill {n}: {len(kill.started)} started, {len(kill.claimed)} only claimed"
        for n, kill in enumerate(kills, 1))
        + f"; received {len(received)} of {len(rows)}; send_unconfirmed {len(unconfirmed)}")
    # Every send the platform received ends as the platform says, announced once.
    assert {public_id: rows[public_id].status for public_id in received
            if rows[public_id].status not in ("sent", "delivered", "read")} == {}
    assert events_by(persona.id, "message.sent", event_key) == {public_id: 1 for public_id in received}
    # What never reached it failed unconfirmed, and only if its send had started at a kill.
    assert unconfirmed <= in_flight, [(rows[p].send_started_at, rows[p].failed_at, rows[p].attempts)
                                      for p in sorted(unconfirmed - in_flight)][:20]
    assert len(unconfirmed) <= sum(len(kill.started) for kill in kills)
    assert set(rows) == set(received) | unconfirmed
    assert events_by(persona.id, "message.failed", event_key) == {public_id: 1 for public_id in unconfirmed}
    # Claimed but not started at a kill: sent later, each once (or in flight at a later kill).
    only_claimed = set().union(*(ids(kill.claimed) for kill in kills))
    assert only_claimed - set(received) <= in_flight
    wallet = credits.wallet_of(persona.id)
    assert wallet.reserved == 0
    assert replay_ledger(persona.id) == (wallet.balance, wallet.reserved)
    assert wallet.balance == 20_000 - len(received)


@pytest.mark.parametrize("size, mps", [pytest.param(5000, 1000, id="5000-at-1000mps"),
                                       pytest.param(400, 20, id="400-at-20mps")])
def test_a_campaign_outlives_its_consumer_killed_at_20_and_60_percent(live_service, storage, size, mps):
    persona = Persona(f"Kill at {mps}", credits=20_000)
    account = live_number(live_service, persona, mps=mps, mode="internal")
    wa_ids = [f"5215{mps:04d}{n:05d}7" for n in range(size)]  # none of the simulator's special endings
    response = api(live_service, persona, "POST", "/campaigns", json=campaign_body(account, wa_ids))
    assert response.status_code == 201, response.text
    campaign = Campaign.get(Campaign.public_id == response.json()["data"]["id"])
    mine = CampaignRecipient.campaign == campaign.id

    def accepted() -> int:
        return CampaignRecipient.select().where(mine & CampaignRecipient.wam_id.is_null(False)).count()

    def snapshot() -> HeldAtKill:
        R = CampaignRecipient
        return held(R, R.select(R.public_id, R.claim_token, R.send_started_at).where(mine))

    kills = []
    for share in (0.2, 0.6):
        wait_until(lambda share=share: accepted() >= share * size, timeout=120, interval=0.05,
                   message=f"{share:.0%} of the campaign sent")
        kills.append(kill_and_restart(live_service, snapshot, kills))
    assert accepted() < size, "the last kill came too late to test anything"

    def completed():
        return Campaign.get_by_id(campaign.id).status == "completed" and not CampaignRecipient.select().where(
            mine & (CampaignRecipient.status == "sent")).exists()

    wait_until(completed, timeout=240, interval=0.5, message="the campaign to complete and settle")
    rows = {row.public_id: row for row in CampaignRecipient.select().where(mine)}
    assert_whole(f"{size} recipients at {mps} msgs/s ({backend(storage)})", persona, account, live_service, rows,
                 kills, "recipient_id")


def test_single_messages_in_flight_outlive_their_consumer_killed(live_service, storage):
    persona = Persona("Kill single messages", credits=20_000)
    account = live_number(live_service, persona, mps=40, mode="internal")
    customers = [f"52159{n:07d}7" for n in range(200)]
    for customer in customers:
        let_write(account, customer)
    with atomic():  # one commit, one wake: the engine finds all 200 due at once
        for customer in customers:
            create_message(persona.id, MessageInput.model_validate({
                "account_id": account.public_id, "to": customer, "type": "text", "text": {"body": "Hola"}}))
    mine = Message.tenant == persona.id

    def accepted() -> int:
        return Message.select().where(mine & Message.wam_id.is_null(False)).count()

    def snapshot() -> HeldAtKill:
        return held(Message, Message.select(Message.public_id, Message.claim_token, Message.send_started_at)
                    .where(mine))

    wait_until(lambda: accepted() >= 40, timeout=60, interval=0.05, message="sends under way")
    kills = [kill_and_restart(live_service, snapshot, [])]
    assert accepted() < 200, "the kill came too late to test anything"
    wait_until(lambda: not Message.select().where(mine & (Message.status == "queued")).exists(), timeout=180,
               interval=0.5, message="every message to settle")
    rows = {row.public_id: row for row in Message.select().where(mine)}
    assert_whole(f"200 single messages at 40 msgs/s ({backend(storage)})", persona, account, live_service, rows,
                 kills, "message_id")
