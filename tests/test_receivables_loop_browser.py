"""The whole collection loop in the system Chromium on the live stack (gunicorn, the consumer, the
platform and payment gateway simulators as processes), on both backends.

A debt comes in through `svcctl cartera import` (CSV) under a company's dunning plan (steps 0,
+3, +10). `svcctl cartera remind` sends the plan's first step; the reminder's button, as the
platform simulator recorded it, opens the debtor's page in Spanish on a phone; the debtor pays one
installment on the gateway simulator and, back on the page, sees it applied once (the gateway
notifying again changes nothing); a promise made on the page holds the +3 step; the day after the
promised date `debt.promise_broken` reaches the company's endpoint, signed, and the plan resumes;
a "No reconozco" press in WhatsApp disputes the debt and no step of it is due any more; the report
counts each of these once.

Later days are collection runs given their `now`, as in test_dunning_plans; their messages are
sent by the live worker.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
import requests

from jobs.queue import build_huey
from models.events import webhooks
from models.numbers.tables import PlatformWebhookBatch
from models.receivables.collection import due_reminders, send_due_reminders
from models.receivables.tables import Debt, DebtDispute, DebtPromise, GatewayNotification, Payment
from tests.browser_fixtures import *  # noqa: F403  (browser: the system Chromium)
from tests.live import PaymentsLiveService, env_for, wait_until
from tests.payments_fixtures import collecting_company
from tests.test_payments_live import link_in, sent_to
from tests.webhooks_fixtures import *  # noqa: F403  (receiver, webhook_ca, webhook_settings)
from tests.webhooks_fixtures import configure, verify

DEBTOR_PHONE = "573001234569"
CSV_HEADER = ("external_id,external_version,account_id,deudor_nombre,deudor_documento,deudor_telefono,moneda,"
              "referencia,monto_original,saldo_pendiente,tipo,auto_send,cuota_external_id,cuota_numero,"
              "cuota_monto,cuota_vence,cuota_estado")


@pytest.fixture
def service(storage, tmp_path, immediate_queue, webhook_ca, webhook_settings):
    # This process's collection runs queue their work where the live worker takes it from.
    immediate_queue.immediate = False
    own_storage = immediate_queue.storage
    immediate_queue.storage = build_huey(storage).storage
    # The whole day is inside the sending window, so the reminder goes out whenever this runs.
    env = {**env_for(storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1], "SVC_QUIET_HOURS_START": "00:00",
           "SVC_QUIET_HOURS_END": "00:00"}
    live = PaymentsLiveService(env, tmp_path).start()
    # This process's collection runs put the same page links in their buttons as the service's.
    configure(storage, public_url=live.api_url)
    yield live
    live.stop()
    immediate_queue.storage = own_storage


def templates_to(service: PaymentsLiveService) -> list[dict]:
    return [item for item in sent_to(service, DEBTOR_PHONE) if item["type"] == "template"]


def settled() -> bool:
    """Every webhook batch the platform posted has been processed."""
    return not PlatformWebhookBatch.select().where(PlatformWebhookBatch.processed_at.is_null()).exists()


def svcctl_ok(service: PaymentsLiveService, *args: str) -> str:
    done = service.svcctl(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def company(service: PaymentsLiveService, alice, tmp_path) -> tuple[str, dict]:
    """Alice's number has the link template, her company a seller on the gateway, a plan with steps
    0, +3 and +10, and a debt of two installments due today imported from a CSV file. Returns
    her number's id and the template."""
    number, template = collecting_company(service, alice)
    tenant = alice.tenant.public_id

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"nombre": "Cobro", "pasos": [{"dias": 0}, {"dias": 3}, {"dias": 10}]}))
    svcctl_ok(service, "cartera", "plans", "create", "--tenant", tenant, str(plan))

    today = dt.datetime.now(dt.UTC).date().isoformat()
    debt = f"C-1,1,{number.public_id},Ana,CC-7,{DEBTOR_PHONE},COP,Factura C-1,150000,150000,installments,true"
    book = tmp_path / "book.csv"
    book.write_text("\n".join([CSV_HEADER, f"{debt},C-1-1,1,100000,{today},pending",
                               f"{debt},C-1-2,2,50000,{today},pending", ""]))
    imported = json.loads(svcctl_ok(service, "cartera", "import", "--tenant", tenant, "--json", str(book)))
    assert (imported["created"], imported["errors"]) == (1, 0), imported
    return number.public_id, template


def noon(days: int) -> dt.datetime:
    """Noon UTC, `days` from today: a later day's collection run."""
    return dt.datetime.combine(dt.datetime.now(dt.UTC).date() + dt.timedelta(days=days), dt.time(12))


def steps_of(report: dict) -> dict[str, dict]:
    return {row["step"]: row for row in report["steps"]}


@pytest.mark.timeout(300)
def test_the_collection_loop_from_import_to_report(service, alice, receiver, browser, tmp_path):
    _number, template = company(service, alice, tmp_path)
    _endpoint, secret = webhooks.create_endpoint(alice.id, receiver.url(), ["debt.promise_broken"])

    # (1) The plan's first step goes out.
    reminded = json.loads(svcctl_ok(service, "cartera", "remind", "--json"))
    assert len(reminded["campaigns"]) == 1
    [first] = wait_until(lambda: templates_to(service), message="the reminder")
    assert first["template"] == "payment_reminder_link"

    # (2) Its button opens the page, in Spanish, on a phone.
    url = link_in(first, template)
    page = browser.new_page(viewport={"width": 360, "height": 740}, locale="en-US")
    page.goto(url)
    assert page.url.startswith(f"{service.api_url}/d/dl_")
    token_url = page.url
    assert page.get_attribute("html", "lang") == "es"
    text = page.inner_text("main").replace("\u00a0", " ")
    assert "Factura C-1" in text and "COP 150.000" in text and "Pagar esta cuota" in text
    assert page.evaluate("document.documentElement.scrollWidth") <= 360

    # (3) One installment, paid on the gateway's checkout; back on the page it is applied.
    page.click("form.pay:has(input[name=installment][value='C-1-1']) button")
    assert page.url.startswith(service.gateway_url) and "COP 100000" in page.inner_text("#amount")
    page.click("#pay")
    page.wait_for_selector("#result")
    assert page.inner_text("#result") == "approved"
    transaction_id = page.inner_text("#payment-id")
    page.click("#back")
    assert "Gracias" in page.wait_for_selector("#notice").inner_text() and page.url.startswith(token_url)
    wait_until(lambda: Payment.select().count() == 1, message="the gateway's payment to be recorded")
    page.goto(token_url)
    assert "Debes COP 50.000" in page.inner_text("main").replace("\u00a0", " ")
    # The gateway notifies the same payment twice more: the balance dropped once.
    requests.post(f"{service.gateway_url}/_sim/payments/{transaction_id}/notify", timeout=5,
                  json={"times": 2, "delay": 0.2, "shuffle": True})

    def notified_and_processed():
        deliveries = requests.get(f"{service.gateway_url}/_sim/notifications", timeout=5).json()
        done = len(deliveries) == 4 and all(item["status"] == 200 for item in deliveries)
        waiting = GatewayNotification.select().where(GatewayNotification.status == "received").count()
        return done and waiting == 0

    wait_until(notified_and_processed, message="the repeated notifications to be processed")
    debt = Debt.get(Debt.external_id == "C-1")
    assert (debt.saldo_pendiente, debt.status, Payment.select().count()) == (5000000, "partial", 1)

    # (4) A promise on the page holds the +3 step.
    promised = (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=5)).isoformat()
    page.click("details:has(form.promise) summary")
    page.fill("form.promise input[name=date]", promised)
    page.click("form.promise button")  # the page again, through a redirect
    page.wait_for_selector("p.promised")
    assert page.url.startswith(token_url)
    assert DebtPromise.get().promised_date.isoformat() == promised
    assert due_reminders(noon(3)) == [] and send_due_reminders(noon(3)) == []

    # (5) The day after the promised date: the promise is broken, signed to the endpoint, and
    # the plan resumes at its +3 step.
    assert len(send_due_reminders(noon(6))) == 1
    [delivery] = receiver.wait_for(1, timeout=30)
    assert verify(delivery, secret)
    event = json.loads(delivery.body)
    assert event["event"] == "debt.promise_broken"
    assert event["data"] == {"deuda_external_id": "C-1", "promised_date": promised, "saldo_pendiente": 50000,
                             "moneda": "COP"}
    second = wait_until(lambda: (sent := templates_to(service)) and len(sent) == 2 and sent[1],
                        message="the resumed step's reminder")

    # (6) "No reconozco", pressed on that reminder, disputes the debt: no step of it is due again.
    pressed = requests.post(f"{service.sim_url}/_sim/press", json={"wamid": second["wamid"], "index": 3},
                            timeout=10)
    assert pressed.status_code == 200 and pressed.json()["payload"] == "cartera:dispute:C-1"
    wait_until(lambda: DebtDispute.select().count() == 1 and settled(), message="the dispute")
    for day in (10, 30):
        assert [item for item in due_reminders(noon(day)) if item.debt_external_id == "C-1"] == []
    assert send_due_reminders(noon(10)) == []

    # (7) The report counts each of these once, for the reminder that preceded it.
    report = json.loads(svcctl_ok(service, "cartera", "report", "--tenant", alice.tenant.public_id, "--json"))
    steps = steps_of(report)
    assert set(steps) == {"due", "after"}
    figures = ("reminded", "opened", "promised", "disputed", "paid")
    assert {name: steps["due"][name] for name in figures} == dict(zip(figures, (1, 1, 1, 0, 1), strict=True))
    assert {name: steps["after"][name] for name in figures} == dict(zip(figures, (1, 0, 0, 1, 0), strict=True))
    assert steps["due"]["recovered"] == [{"currency": "COP", "amount": 100000.0}]
    assert sum(row["reminded"] for row in report["campaigns"]) == 2
    assert len(receiver.requests) == 1  # broken once
