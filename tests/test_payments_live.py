"""End to end on the live stack (gunicorn, the consumer, the platform simulator and the payment
gateway simulator as processes): a collection reminder opens the debtor's page; in the system
Chromium the debtor pays the debt on the simulated checkout and comes back to the page; the
debt's balance drops, the company's receiver gets `debt.payment_received` once, signed, and the
ERP's export lists the payment once, however many times, late and out of order, the gateway
notifies it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys

import pytest
import requests

from config import get_settings
from messaging.client import GraphClient
from models.events import webhooks
from models.events.tables import Event
from models.receivables import payments, snapshots
from models.receivables.inputs import parse_debt
from models.receivables.tables import Debt, GatewayNotification, Payment
from tests.campaigns_fixtures import TEMPLATES, make_number
from tests.live import ROOT, LiveService, PaymentsLiveService, env_for, free_port, wait_until
from tests.payments_fixtures import add_link_template
from tests.receivables_fixtures import debt_body
from tests.test_onboarding_browser import browser  # noqa: F401  (the Chromium fixture)
from tests.webhooks_fixtures import *  # noqa: F403  (receiver, webhook_ca, webhook_settings)
from tests.webhooks_fixtures import verify

pytestmark = [pytest.mark.parametrize("storage", ["sqlite"], indirect=True), pytest.mark.slow]

DEBTOR_PHONE = "573001234567"


@pytest.fixture
def service(storage, tmp_path, immediate_queue, webhook_ca, webhook_settings):
    immediate_queue.immediate = False
    # The whole day is inside the sending window, so the reminder goes out whenever this runs.
    env = {**env_for(storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1], "SVC_QUIET_HOURS_START": "00:00",
           "SVC_QUIET_HOURS_END": "00:00"}
    live = PaymentsLiveService(env, tmp_path).start()
    yield live
    live.stop()


def sent_to(service: LiveService, wa_id: str) -> list[dict]:
    sent = requests.get(f"{service.sim_url}/_sim/sent", timeout=5).json()["data"]
    return [item for item in sent if item["to"] == wa_id]


def link_in(message: dict, template: dict) -> str:
    """The URL the reminder's button opens: the template's button URL with the sent suffix in it.
    The body carries no link."""
    [body] = [c for c in message["components"] if c["type"] == "body"]
    assert len(body["parameters"]) == 2 and "/pay/" not in str(body)
    [button] = [c for c in message["components"] if c["type"] == "button" and c.get("sub_type") == "url"]
    [declared] = [c["buttons"] for c in template["components"] if c["type"] == "BUTTONS"]
    return declared[int(button["index"])]["url"].replace("{{1}}", button["parameters"][0]["text"])


def remind_with_a_link(service: PaymentsLiveService, alice) -> tuple[dict, str]:
    """Alice's number has the link template, her company a seller on the gateway, and a debt due
    today: `svcctl cartera remind` sends its reminder. Returns what the platform got and the URL
    its button opens."""
    link_template = add_link_template(service.sim_url, service.api_url)
    signup = requests.post(f"{service.sim_url}/_sim/signup", json={"mps": 20}, timeout=5).json()
    with GraphClient(service.sim_url, app_id=get_settings().app_id, app_secret=service.env["SVC_APP_SECRET"]) as graph:
        token = graph.exchange_code(signup["code"])
    number = make_number(alice.id, phone_id=signup["phone_number_id"], token=token,
                         templates=[*TEMPLATES, link_template])
    seller = requests.post(f"{service.gateway_url}/_sim/sellers", timeout=5).json()
    payments.connect_gateway(alice.id, seller["access_token"], seller["webhook_secret"])
    today = dt.datetime.now(dt.UTC).date().isoformat()
    body = debt_body(number.public_id, "E2E-1", moneda="COP", monto_original=150000, saldo_pendiente=150000,
                     auto_send=True, deudor={"nombre": "Ana", "documento": "CC-1", "telefono": DEBTOR_PHONE},
                     cuotas=[{"external_id": "E2E-1-1", "numero": 1, "monto": 150000, "vence": today}])
    snapshots.upsert_debt(alice.id, parse_debt(body))

    # The periodic task's work, run now: the reminder goes out as a campaign with the link.
    reminded = service.svcctl("cartera", "remind", "--json")
    assert reminded.returncode == 0, reminded.stderr
    assert len(json.loads(reminded.stdout)["campaigns"]) == 1
    [message] = wait_until(lambda: sent_to(service, DEBTOR_PHONE), message="the reminder")
    assert message["template"] == "payment_reminder_link"
    url = link_in(message, link_template)
    assert url.startswith(f"{service.api_url}/pay/dl_")  # the debtor's page (docs/receivables.md)
    return message, url


@pytest.mark.timeout(120)
def test_a_reminder_sends_its_link_in_the_button_and_the_link_opens_the_checkout(service, alice):
    message, url = remind_with_a_link(service, alice)

    [body] = [c for c in message["components"] if c["type"] == "body"]
    assert [p["text"] for p in body["parameters"]] == ["Ana", "COP 150.000,00"]
    session = requests.Session()
    opened = session.get(url, timeout=10)  # the debtor taps "Pay now": /pay/dl_… opens the page
    assert opened.history and opened.history[0].status_code == 303
    assert opened.status_code == 200 and opened.url.startswith(f"{service.api_url}/d/dl_")
    [form] = [found for found in re.findall(r"<form.*?</form>", opened.text, re.S) if 'value="debt"' in found]
    paid = session.post(opened.url, data=dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form)), timeout=10)
    assert paid.history and paid.history[0].status_code == 303
    assert paid.status_code == 200 and paid.url.startswith(f"{service.gateway_url}/checkout/v1/redirect")
    assert "COP 150000" in paid.text  # the gateway simulator's checkout, for the debt's balance


@pytest.mark.timeout(120)
def test_a_reminder_is_paid_from_the_phone_and_reaches_the_erp_once(service, alice, receiver, browser):  # noqa: F811
    _endpoint, secret = webhooks.set_payment_endpoint(alice.id, receiver.url())
    _message, url = remind_with_a_link(service, alice)
    today = dt.datetime.now(dt.UTC).date().isoformat()

    # The debtor taps the link: their page, on a phone's width; paying the debt goes to the checkout.
    page = browser.new_page(viewport={"width": 360, "height": 740})
    page.goto(url)
    assert page.url.startswith(f"{service.api_url}/d/dl_") and "Factura" in page.inner_text("main")
    assert page.evaluate("document.documentElement.scrollWidth") <= 360  # nothing wider than the phone
    page.click("form.pay:has(input[value=debt]) button")
    assert page.url.startswith(service.gateway_url) and "COP 150000" in page.inner_text("#amount")
    page.click("#pay")
    page.wait_for_selector("#result")
    assert page.inner_text("#result") == "approved"
    transaction_id = page.inner_text("#payment-id")
    page.click("#back")  # the gateway's way back: the debtor's page again, through a redirect
    page.wait_for_selector("#notice")
    assert page.url.startswith(f"{service.api_url}/d/dl_")

    wait_until(lambda: Debt.get(Debt.external_id == "E2E-1").saldo_pendiente == 0, message="the balance to drop")
    [delivery] = receiver.wait_for(1, timeout=30)
    assert verify(delivery, secret)
    event = json.loads(delivery.body)
    assert event["event"] == "debt.payment_received"
    assert event["data"]["pago"]["transaction_id"] == transaction_id and event["data"]["status"] == "paid"

    # The gateway reports the payment three more times, late and out of order.
    requests.post(f"{service.gateway_url}/_sim/payments/{transaction_id}/notify", timeout=5,
                  json={"times": 3, "delay": 0.5, "shuffle": True})

    def all_delivered_and_processed():
        deliveries = requests.get(f"{service.gateway_url}/_sim/notifications", timeout=5).json()
        # payment.created twice (one copy a redelivery), then the three reports.
        done = len(deliveries) == 5 and all(item["status"] == 200 for item in deliveries)
        waiting = GatewayNotification.select().where(GatewayNotification.status == "received").count()
        return done and waiting == 0

    wait_until(all_delivered_and_processed, message="every notification to be processed")
    assert GatewayNotification.select().count() == 4  # the redelivered copy was dropped at the door
    assert Payment.select().count() == 1
    assert Event.select().where(Event.name == "debt.payment_received").count() == 1
    assert len(receiver.requests) == 1

    exported = service.svcctl("cartera", "payments", "export", "--tenant", alice.tenant.public_id,
                              "--since", today, "--format", "jsonl")
    assert exported.returncode == 0, exported.stderr
    [row] = [json.loads(line) for line in exported.stdout.splitlines()]
    assert (row["transaction_id"], row["monto"], row["moneda"], row["tipo"]) == (transaction_id, "150000.00",
                                                                                  "COP", "pago")


@pytest.mark.timeout(120)
def test_svcctl_up_sim_gives_the_demo_number_the_link_template_with_its_button(storage, tmp_path):
    """`svcctl up --sim` (what `scripts/up` runs) declares `payment_reminder_link` on the simulator
    with its "Pay now" button to the service's own payment page, and the demo number syncs it."""
    api_port, sim_port, gateway_port = free_port(), free_port(), free_port()
    env = {**os.environ, "SVC_DATA_DIR": str(tmp_path / "data"), "PYTHONUNBUFFERED": "1", "COLUMNS": "250"}
    log_path = tmp_path / "up.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "svcctl.main", "up", "--sim", "--bind", f"127.0.0.1:{api_port}",
             "--sim-bind", f"127.0.0.1:{sim_port}", "--payments-sim-bind", f"127.0.0.1:{gateway_port}"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    api = f"http://127.0.0.1:{api_port}"
    try:
        printed = wait_until(lambda: re.search(r"number\s+(wacc_\w+).*?key\s+(svc_live_\S+)", log_path.read_text(),
                                               re.S), timeout=60, message="the demo number and key")
        number, key = printed.groups()

        def link_template():
            try:
                answer = requests.get(f"{api}/api/v1/accounts/{number}/templates", timeout=5,
                                      headers={"Authorization": f"Bearer {key}"})
            except requests.RequestException:
                return None  # the API is still starting
            found = [t for t in answer.json().get("data", []) if t["name"] == "payment_reminder_link"
                     and t["language"] == "es"]
            return found[0] if found else None

        template = wait_until(link_template, timeout=30, message="the demo number's link template")
        assert template["body_text"] == "Hola {{1}}, tu saldo pendiente es {{2}}." and template["variable_count"] == 2
        [buttons] = [c["buttons"] for c in template["components"] if c["type"] == "BUTTONS"]
        assert [(b["type"], b["text"], b.get("url")) for b in buttons] == [
            ("URL", "Pay now", f"{api}/pay/{{{{1}}}}"), ("QUICK_REPLY", "Ya pagué", None),
            ("QUICK_REPLY", "Pagaré en 7 días", None), ("QUICK_REPLY", "No reconozco", None)]
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=40)


@pytest.mark.timeout(300)
def test_svcctl_up_sim_plays_the_collection_loop_on_the_demo_company(storage, tmp_path):
    """`svcctl up --sim` seeds the demo company's loop: a debt due yesterday, its reminder sent,
    the platform simulator pressing "Pagaré en 7 días", the gateway simulator paying part of it;
    it prints the debtor's page, which shows the promise and the payment. A second start keeps
    the data and plays nothing again."""
    api_port, sim_port, gateway_port = free_port(), free_port(), free_port()
    env = {**os.environ, "SVC_DATA_DIR": str(tmp_path / "data"), "PYTHONUNBUFFERED": "1", "COLUMNS": "250"}
    command = [sys.executable, "-m", "svcctl.main", "up", "--sim", "--bind", f"127.0.0.1:{api_port}",
               "--sim-bind", f"127.0.0.1:{sim_port}", "--payments-sim-bind", f"127.0.0.1:{gateway_port}"]
    api = f"http://127.0.0.1:{api_port}"

    def start(log_path):
        with open(log_path, "ab") as log:
            return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def stop(process):
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=40)

    first_log = tmp_path / "up.log"
    process = start(first_log)
    try:
        paid_line = r"paid\s+(COP\s[\d.,]+) on the gateway simulator; balance (COP\s[\d.,]+)"
        printed = wait_until(lambda: re.search(paid_line, first_log.read_text()), timeout=150, message="the demo loop")
        text = first_log.read_text()
        assert re.search(r"key\s+svc_live_\S+", text)
        assert re.search(r"sign in\s+owner@demo\.example\.com / \S+", text)
        assert re.search(r"debt\s+DEMO-1001, COP\s200[.,]000[.,]00, first installment due "
                         + (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)).isoformat(), text)
        assert re.search(r"reminded\s+\+573005550101", text) and re.search(r"promised\s+\d{4}-\d\d-\d\d", text)
        paid, balance = (re.sub(r"\s", " ", value) for value in printed.groups())
        assert (paid, balance) == ("COP 50.000,00", "COP 150.000,00")
        page_url = re.search(rf"debtor\s+({re.escape(api)}/d/dl_[\w-]+)", text).group(1)
        page = requests.get(page_url, timeout=10)
        assert page.status_code == 200
        shown = re.sub(r"<[^>]+>", " ", page.text).replace("\u00a0", " ")
        # The demo company speaks English (its default locale).
        assert "Factura 1001" in shown and "You owe COP 150,000" in re.sub(r"\s+", " ", shown)
        assert re.search(r"Payments made .* COP 50,000", re.sub(r"\s+", " ", shown))
        assert 'class="said promised"' in page.text
    finally:
        stop(process)
    # Again on the same data: the loop is not played twice.
    second_log = tmp_path / "up-again.log"
    process = start(second_log)
    try:
        wait_until(lambda: "was played at an earlier start" in second_log.read_text(), timeout=90,
                   message="the second start's banner")
    finally:
        stop(process)
