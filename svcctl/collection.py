"""The collection loop played once on the demo company by `svcctl up --sim`: a debt due
yesterday under a dunning plan, its reminder sent through the worker, and the simulators playing
the debtor (the platform simulator presses "Pagaré en 7 días", the gateway simulator pays part of
the debt). What happened is printed briefly under the banner, with the debtor's page URL."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

import requests

from config import get_settings
from models.errors import DomainError
from models.numbers.tables import MessagingAccount
from models.receivables import dunning_plans, payments, snapshots
from models.receivables.collection import send_due_reminders
from models.receivables.debts import get_debt, tenant_today
from models.receivables.inputs import parse_debt
from models.receivables.money import format_amount
from models.receivables.payments import LINK_TEMPLATE, LINK_TEMPLATE_LANGUAGE
from models.receivables.tables import Debt, DebtPromise, Payment, Reminder
from models.sending.sendable import approved_template
from models.store.db import connection
from models.tenancy.tenants import get_tenant

DEMO_DEBT = "DEMO-1001"
DEMO_DEBTOR = {"nombre": "Ana Demo", "documento": "CC-1001", "telefono": "573005550101"}
DEMO_PLAN = {"nombre": "Demo", "pasos": [{"dias": -3}, {"dias": 0}, {"dias": 3}, {"dias": 10}],
             "horario_desde": "00:00", "horario_hasta": "00:00"}  # the whole day: the demo runs any time
# Quick replies of the link template (models/receivables/replies.py): 1 paid, 2 promise, 3 dispute.
PROMISE_BUTTON = 2
PAID_NOW = 50000  # COP: part of the first installment, paid on the gateway simulator
WAIT_SECONDS = 60.0  # a loaded machine: the worker syncs templates and sends in its own time


class DemoStalled(Exception):
    """A step of the loop did not happen in time; the service keeps running without the rest."""


def _wait(check: Callable[[], object], what: str, stopping: Callable[[], bool]) -> object:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if stopping():
            raise DemoStalled("the service is stopping")
        with connection():
            found = check()
        if found:
            return found
        time.sleep(0.2)
    raise DemoStalled(f"{what} did not happen in {WAIT_SECONDS:.0f} s")


def _sent_to(sim_url: str, phone: str) -> list[dict]:
    sent = requests.get(f"{sim_url}/_sim/sent", timeout=5).json()["data"]
    return [item for item in sent if item["to"] == phone and item["type"] == "template"]


def play(tenant_public_id: str, number_id: str, sim_url: str, gateway_url: str,
         stopping: Callable[[], bool] = lambda: False) -> list[tuple[str, str]]:
    """Play the loop once per data dir; returns (label, line) pairs for the banner."""
    with connection():
        tenant = get_tenant(tenant_public_id)
        if Debt.select().where((Debt.tenant == tenant.id) & (Debt.external_id == DEMO_DEBT)).exists():
            return [("debtor", f"the demo debt {DEMO_DEBT} was played at an earlier start (see the portal)")]
        account = MessagingAccount.get((MessagingAccount.tenant == tenant.id)
                                       & (MessagingAccount.public_id == number_id))
    # The worker syncs the connected number's templates: the reminder waits for its link button.
    _wait(lambda: _approved(account), "the link template's sync", stopping)
    with connection():
        dunning_plans.create_plan(tenant.id, DEMO_PLAN)
        yesterday = tenant_today(tenant.id) - dt.timedelta(days=1)
        snapshots.upsert_debt(tenant.id, parse_debt({
            "external_id": DEMO_DEBT, "account_id": number_id, "deudor": DEMO_DEBTOR, "moneda": "COP",
            "referencia": "Factura 1001", "monto_original": 200000, "saldo_pendiente": 200000, "auto_send": True,
            "cuotas": [{"external_id": f"{DEMO_DEBT}-1", "numero": 1, "monto": 120000, "vence": yesterday.isoformat()},
                       {"external_id": f"{DEMO_DEBT}-2", "numero": 2, "monto": 80000,
                        "vence": (yesterday + dt.timedelta(days=30)).isoformat()}]}))
    phone = DEMO_DEBTOR["telefono"]

    def reminded() -> list[dict]:
        # A number the worker is still setting up refuses the campaign: the next try sends it.
        if not Reminder.select().where(Reminder.campaign_id.is_null(False)).join(Debt).where(
                Debt.tenant == tenant.id).exists():
            send_due_reminders()
        return _sent_to(sim_url, phone)

    [reminder] = _wait(reminded, "the reminder's send", stopping)[:1]
    [button] = [c for c in reminder["components"] if c["type"] == "button" and c.get("sub_type") == "url"]
    page_url = f"{get_settings().public_url}/d/{button['parameters'][0]['text']}"

    # The debtor presses "Pagaré en 7 días" in WhatsApp (the platform simulator plays them).
    requests.post(f"{sim_url}/_sim/press", json={"wamid": reminder["wamid"], "index": PROMISE_BUTTON},
                  timeout=10).raise_for_status()
    promise = _wait(lambda: DebtPromise.get_or_none(DebtPromise.tenant == tenant.id), "the promise", stopping)

    # Then pays part of the first installment on the gateway's checkout.
    with connection():
        link = payments.create_link(tenant.id, DEMO_DEBT, installment_external_id=f"{DEMO_DEBT}-1", origin="page")
    preference = link["checkout_url"].split("pref_id=", 1)[1]
    requests.post(f"{gateway_url}/_sim/payments", json={"pref_id": preference, "amount": PAID_NOW},
                  timeout=10).raise_for_status()
    _wait(lambda: Payment.select().join(Debt).where(Debt.tenant == tenant.id).exists(), "the payment", stopping)
    with connection():
        debt = get_debt(tenant.id, DEMO_DEBT)
        paid = Payment.select().where(Payment.debt == debt.id).get()
        balance, original, currency = debt.saldo_pendiente, debt.monto_original, debt.moneda
    return [
        ("debt", f"{DEMO_DEBT}, {format_amount(original, currency)}, first installment due {yesterday}"),
        ("reminded", f"+{phone}, plan {DEMO_PLAN['nombre']!r} (sim: {sim_url}/_sim/sent)"),
        ("debtor", page_url),
        ("promised", f"{promise.promised_date} (quick reply pressed on the simulator)"),
        ("paid", f"{format_amount(paid.monto, currency)} on the gateway simulator; balance "
                 f"{format_amount(balance, currency)}"),
    ]


def _approved(account: MessagingAccount) -> bool:
    try:
        approved_template(account, LINK_TEMPLATE, LINK_TEMPLATE_LANGUAGE)
    except DomainError:
        return False
    return True
