"""Fixtures for campaigns, messages and dispatch: a real simulator over HTTP, connected numbers
with their templates, and the app pointed at that simulator.

`from tests.campaigns_fixtures import *` brings the fixtures; helpers are imported by name.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools

import pytest
import requests
from falcon import testing
from peewee import fn

from config import get_settings, use_settings
from messaging.client import GraphClient, template_from_graph
from messaging.simulator.server import Simulator
from messaging.webhooks import StatusUpdate
from models.clock import utcnow
from models.ids import new_id
from models.numbers.accounts import open_window
from models.numbers.tables import MessagingAccount, Template
from models.sending.campaign_counters import add_to_counters, count_moved
from models.sending.campaigns import create_campaign
from models.sending.tables import COUNTERS, Campaign, CampaignCounters, CampaignRecipient
from models.setup import init_db
from models.store.db import connection, db
from models.store.secrets import encrypt
from models.tenancy.tables import LedgerEntry, Wallet

__all__ = ["campaign_simulator", "sim", "app", "client", "number", "queue_only"]

# The simulator's built-in templates, as the template sync stores them.
TEMPLATES = [
    {"name": "hello_world", "language": "en_US", "status": "approved", "category": "UTILITY",
     "body_text": "Hello World", "header_type": None, "variable_count": 0},
    {"name": "payment_reminder", "language": "es", "status": "approved", "category": "UTILITY",
     "body_text": "Hola {{1}}, tu saldo pendiente es {{2}}.", "header_type": None, "variable_count": 2},
    {"name": "order_update", "language": "en_US", "status": "approved", "category": "MARKETING",
     "body_text": "Your order {{1}} has shipped", "header_type": "image", "variable_count": 1},
    {"name": "promo_pending", "language": "en_US", "status": "pending", "category": "MARKETING",
     "body_text": "New deals {{1}}", "header_type": None, "variable_count": 1},
]

_serial = itertools.count(1)
_wa_serial = itertools.count(1)


def wa(suffix: str = "") -> str:
    """A recipient number no other test uses (the session's simulator remembers throttles per
    number): plain ones end in 7, so they never hit the simulator's 0000 / 0429 / 9999 behaviours."""
    return f"529{next(_wa_serial):07d}{suffix or '7'}"


@pytest.fixture(scope="session")
def campaign_simulator():
    # One per session; status webhooks are off (no receiver in-process): tests that need
    # statuses feed `apply_status_updates` or run the live service.
    simulator = Simulator(duplicate_rate=0.0)
    simulator.start()
    yield simulator
    simulator.stop()


@pytest.fixture
def sim(campaign_simulator, storage):
    campaign_simulator.configure(app_secret=storage.app_secret, webhook_url=None)
    requests.post(f"{campaign_simulator.base_url}/_sim/reset", timeout=5).raise_for_status()
    settings = dataclasses.replace(storage, graph_url=campaign_simulator.base_url)
    use_settings(settings)
    init_db(settings)
    with connection():
        yield campaign_simulator


@pytest.fixture
def app(sim):
    from api.app import create_app

    return create_app(get_settings())


class Client(testing.TestClient):
    """The app's client; the test's own connection is open again after each request."""

    def simulate_request(self, *args, **kwargs):
        try:
            return super().simulate_request(*args, **kwargs)
        finally:
            db.connect(reuse_if_open=True)


@pytest.fixture
def client(app):
    return Client(app)


def sim_signup(base_url: str, app_secret: str, mps: int) -> tuple[str, str]:
    """A number on a simulator (in-process or not): its phone number id and access token."""
    import requests

    signup = requests.post(f"{base_url}/_sim/signup", json={"mps": mps}, timeout=5).json()
    with GraphClient(base_url, app_id=get_settings().app_id, app_secret=app_secret) as graph:
        return signup["phone_number_id"], graph.exchange_code(signup["code"])


def make_number(tenant_id: int, simulator: Simulator | None = None, *, mps: int = 20, status: str = "active",
                ready: bool = True, daily_limit: int | None = None, templates=TEMPLATES,
                connection_mode: str = "coexistence", phone_id: str | None = None,
                token: str | None = None) -> MessagingAccount:
    """A connected number of `tenant_id`, with its templates: a real one on `simulator` when given
    (or the given phone id and token), else one the platform does not know."""
    serial = next(_serial)
    if simulator is not None:
        phone_id, token = sim_signup(simulator.base_url, get_settings().app_secret, mps)
    phone_id, token = phone_id or f"9{serial:08d}", token or "not-a-token"
    # One commit: a live service's template sync never sees the number without its templates.
    with db.atomic():
        account = MessagingAccount.create(
            public_id=new_id("wacc_"), tenant=tenant_id, label=f"number {serial}",
            phone_number=f"+1555010{serial:04d}", name=f"Business {serial}", status=status,
            connection_mode=connection_mode, business_account_id="102290129340398",
            phone_id=phone_id if ready else None, access_token=encrypt(token) if ready else None,
            subscribed_to_webhooks=ready, quality_rating="GREEN", daily_limit=daily_limit, mps=mps,
            connected_at=utcnow() if ready else None)
        for template in templates:
            Template.create(account=account.id, platform_id=str(1500000000000000 + serial), **template)
    return account


def template_row(graph_template: dict) -> dict:
    """A platform template as `make_number` stores it (what `svcctl templates sync` would write)."""
    shaped = template_from_graph(graph_template)
    return {name: shaped[name] for name in ("name", "language", "status", "category", "body_text", "header_type",
                                            "variable_count", "variables", "components")}


@pytest.fixture
def number(sim, alice):
    """Alice's connected number on the simulator."""
    return make_number(alice.id, sim)


def campaign_body(account: MessagingAccount, wa_ids, template: str = "hello_world", **extra) -> dict:
    return {"account_id": account.public_id, "template_name": template,
            "recipients": [{"wa_id": wa_id} for wa_id in wa_ids], **extra}


def create_for(persona, account: MessagingAccount, wa_ids, **extra) -> Campaign:
    """A campaign created through the domain operation the API calls."""
    return create_campaign(persona.id, campaign_body(account, wa_ids, **extra))


@pytest.fixture
def queue_only(immediate_queue):
    """Creation without the in-process dispatch: campaigns stay `queued`."""
    immediate_queue.immediate = False
    yield
    immediate_queue.immediate = True


def status_update(account: MessagingAccount, wamid: str, status: str, *, callback: str | None = None,
                  at: dt.datetime | None = None, error_code: int | None = None) -> StatusUpdate:
    errors = [{"code": error_code, "title": "Message undeliverable", "message": "Message undeliverable",
               "error_data": {"details": "The recipient could not be reached."}}] if error_code else []
    return StatusUpdate(phone_number_id=account.phone_id, wamid=wamid, status=status,
                        timestamp=(at or dt.datetime.now(dt.UTC)), recipient_id=None, callback_data=callback,
                        errors=errors)


def let_write(account: MessagingAccount, wa_id: str, when: dt.datetime | None = None) -> None:
    """The customer wrote to the number: the 24-hour window is open."""
    open_window(account.id, wa_id, when or utcnow())


def ledger_types(tenant_id: int) -> list[tuple[str, int]]:
    return [(e.type, e.amount) for e in LedgerEntry.select().where(LedgerEntry.tenant == tenant_id)
            .order_by(LedgerEntry.id)]


def wallet(tenant_id: int) -> Wallet:
    return Wallet.get(Wallet.tenant == tenant_id)


def set_recipients(where, **columns) -> int:
    """Put the recipients `where` picks in a state directly (`status=...` and any other columns),
    as the sending core would have left them: their campaigns' counters follow, through the same
    additions the core makes. Returns how many rows changed."""
    moves: dict[int, dict[str, int]] = {}
    with db.atomic():
        rows = list(CampaignRecipient.select(CampaignRecipient.id, CampaignRecipient.campaign,
                                             CampaignRecipient.status).where(where).tuples())
        if "status" in columns:
            for _row_id, campaign_id, status in rows:
                count_moved(moves, campaign_id, status, columns["status"])
        CampaignRecipient.update(**columns).where(
            CampaignRecipient.id.in_([row_id for row_id, _, _ in rows])).execute()
        add_to_counters(moves)
    return len(rows)


def counted(campaign_id: int) -> dict[str, int]:
    """The campaign's recipients counted per status, row by row: what its counters must say."""
    counts = dict.fromkeys(COUNTERS, 0)
    counts.update(CampaignRecipient.select(CampaignRecipient.status, fn.COUNT(CampaignRecipient.id))
                  .where(CampaignRecipient.campaign == campaign_id).group_by(CampaignRecipient.status).tuples())
    return counts


def status_counters(campaign_id: int) -> dict[str, int]:
    """The campaign's counters per status, as its reads show them."""
    row = CampaignCounters.get_by_id(campaign_id)
    return {status: getattr(row, status) for status in COUNTERS}


def counters_disagreeing() -> list[int]:
    """The campaigns whose counters per status differ from their recipients counted row by row,
    read in one statement (one snapshot, whatever is committing meanwhile)."""
    sums = ", ".join(f"SUM(CASE WHEN status = '{status}' THEN 1 ELSE 0 END) AS \"{status}\"" for status in COUNTERS)
    differs = " OR ".join(f'm."{status}" <> COALESCE(r."{status}", 0)' for status in COUNTERS)
    return [campaign_id for (campaign_id,) in db.execute_sql(
        f'SELECT m."campaign_id" FROM "campaign_counters" AS m LEFT JOIN (SELECT "campaign_id", {sums} '
        f'FROM "campaign_recipient" GROUP BY "campaign_id") AS r ON r."campaign_id" = m."campaign_id" '
        f"WHERE {differs} ORDER BY m.\"campaign_id\"").fetchall()]
