"""The payment gateway simulator and a company connected to it; signed notifications as the
gateway sends them. `from tests.payments_fixtures import *` brings the fixtures."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import requests

from config import get_settings
from gateway.mercadopago import sign
from gateway.simulator import GatewaySimulator
from messaging.client import GraphClient
from models.receivables import payments
from models.tenancy.tables import Tenant
from tests.campaigns_fixtures import TEMPLATES, make_number, template_row

__all__ = ["gateway_sim", "gateway", "Seller"]

def add_link_template(sim_url: str, public_url: str | None = None) -> dict:
    """The business creates the payment-link template on the platform (the simulator's control
    endpoint stands in for WhatsApp Manager): the simulator's built-in ones are DECISIONS' four.
    Its button opens `public_url` (the service's, by default this process's settings'). Returns
    the template as the service stores it (a `Template` row's fields), as a sync would."""
    response = requests.post(f"{sim_url}/_sim/templates", timeout=5,
                             json=payments.link_template_definition(public_url or get_settings().public_url))
    response.raise_for_status()
    return template_row(response.json())


def collecting_company(service, persona) -> tuple:
    """The persona's company collects in Spanish (es_CO, UTC) on a live service: a number signed up
    on its simulator with the link template, and a seller connected on its gateway simulator.
    Returns the number and the template."""
    Tenant.update(locale="es_CO", timezone="UTC").where(Tenant.id == persona.id).execute()
    template = add_link_template(service.sim_url, service.api_url)
    signup = requests.post(f"{service.sim_url}/_sim/signup", json={"mps": 20}, timeout=5).json()
    with GraphClient(service.sim_url, app_id=get_settings().app_id, app_secret=service.env["SVC_APP_SECRET"]) as graph:
        token = graph.exchange_code(signup["code"])
    number = make_number(persona.id, phone_id=signup["phone_number_id"], token=token, templates=[*TEMPLATES, template])
    seller = requests.post(f"{service.gateway_url}/_sim/sellers", timeout=5).json()
    payments.connect_gateway(persona.id, seller["access_token"], seller["webhook_secret"])
    return number, template


@pytest.fixture(scope="session")
def gateway_sim():
    # Notifications off: tests in-process post them themselves (the live tests let it send).
    simulator = GatewaySimulator(notify=False)
    simulator.start()
    yield simulator
    simulator.stop()


class Seller:
    """A company's account on the simulated gateway, stored as `svcctl payments connect` does."""

    def __init__(self, simulator: GatewaySimulator, persona):
        self.sim = simulator
        self.persona = persona
        credentials = requests.post(f"{simulator.base_url}/_sim/sellers", timeout=5).json()
        self.access_token, self.secret = credentials["access_token"], credentials["webhook_secret"]
        payments.connect_gateway(persona.id, self.access_token, self.secret)

    def pay(self, link: dict, outcome: str = "approve", **options) -> dict:
        """The payer completes the checkout of `link` (an API link or a /pay redirect target)."""
        checkout = link["checkout_url"]
        preference_id = checkout.split("pref_id=", 1)[1]
        response = requests.post(f"{self.sim.base_url}/_sim/payments", timeout=5,
                                 json={"pref_id": preference_id, "outcome": outcome, **options})
        assert response.status_code == 201, response.text
        return response.json()

    def control(self, path: str, **body) -> dict:
        response = requests.post(f"{self.sim.base_url}/_sim/{path}", json=body, timeout=5)
        assert response.status_code == 201, response.text
        return response.json()

    def notification(self, payment_id, *, request_id: str | None = None, ts: int | None = None,
                     secret: str | None = None, data: dict | None = None,
                     id_in_query: bool = True) -> tuple[str, dict, bytes]:
        """(path with query, headers, body) of a notification signed as the gateway signs it;
        without `id_in_query`, the id is only in the body and the signature covers none."""
        request_id = request_id or str(uuid.uuid4())
        stamp = str(ts if ts is not None else int(time.time() * 1000))
        body = {"id": 1, "live_mode": False, "type": "payment", "action": "payment.updated", "api_version": "v1",
                "data": {"id": str(payment_id), **(data or {})}}
        signed_id = str(payment_id) if id_in_query else None
        headers = {"x-signature": sign(secret or self.secret, signed_id, request_id, stamp),
                   "x-request-id": request_id, "Content-Type": "application/json"}
        query = f"data.id={payment_id}&type=payment" if id_in_query else "type=payment"
        path = f"{payments.WEBHOOK_PATH}/{self.persona.tenant.public_id}?{query}"
        return path, headers, json.dumps(body).encode()


@pytest.fixture
def gateway(gateway_sim, storage, alice):
    """Alice connected to the simulated gateway; the settings point at it (the storage's, and any
    copy a fixture installed from them)."""
    for settings in {id(storage): storage, id(get_settings()): get_settings()}.values():
        object.__setattr__(settings, "payments_gateway_url", gateway_sim.base_url)
    return Seller(gateway_sim, alice)
