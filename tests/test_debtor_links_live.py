"""The debtor's page end to end on the live stack (gunicorn, the consumer, the platform simulator
and the payment gateway simulator as processes), on both backends: `svcctl cartera remind` sends
the reminder whose button opens the page; the debtor pays one installment at the gateway,
comes back, and sees it applied once the gateway's notification is recorded. No log line and
no metric holds the token."""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from urllib.parse import urlencode

import pytest
import requests

from models.receivables import snapshots
from models.receivables.inputs import parse_debt
from models.receivables.tables import Debt, Payment
from tests.live import PaymentsLiveService, env_for, wait_until
from tests.payments_fixtures import collecting_company
from tests.receivables_fixtures import debt_body
from tests.test_payments_live import link_in, sent_to

DEBTOR_PHONE = "573001234568"


@pytest.fixture
def service(storage, tmp_path, immediate_queue):
    immediate_queue.immediate = False
    # The whole day is inside the sending window, so the reminder goes out whenever this runs.
    env = {**env_for(storage), "SVC_QUIET_HOURS_START": "00:00", "SVC_QUIET_HOURS_END": "00:00"}
    live = PaymentsLiveService(env, tmp_path).start()
    yield live
    live.stop()


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page)).replace("\u00a0", " ")


def form_of(page: str, marker: str) -> dict[str, str]:
    [form] = [found for found in re.findall(r"<form.*?</form>", page, re.S) if marker in found]
    return dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form))


def remind(service: PaymentsLiveService, alice) -> str:
    """A debt of two installments, the first due today, on a number with the link template and a
    company with a gateway: the reminder goes out; returns the URL its button opens."""
    number, template = collecting_company(service, alice)
    today = dt.datetime.now(dt.UTC).date()
    body = debt_body(number.public_id, "P-1", moneda="COP", monto_original=150000, saldo_pendiente=150000,
                     auto_send=True, referencia="Factura P-1",
                     deudor={"nombre": "Ana", "documento": "CC-9", "telefono": DEBTOR_PHONE},
                     cuotas=[{"external_id": "P-1-1", "numero": 1, "monto": 100000, "vence": today.isoformat()},
                             {"external_id": "P-1-2", "numero": 2, "monto": 50000,
                              "vence": (today + dt.timedelta(days=30)).isoformat()}])
    snapshots.upsert_debt(alice.id, parse_debt(body))
    reminded = service.svcctl("cartera", "remind", "--json")
    assert reminded.returncode == 0, reminded.stderr
    [message] = wait_until(lambda: sent_to(service, DEBTOR_PHONE), message="the reminder")
    assert message["template"] == "payment_reminder_link"
    return link_in(message, template)


@pytest.mark.timeout(180)
def test_a_reminder_opens_the_page_and_one_installment_is_paid_at_the_gateway(service, alice):
    url = remind(service, alice)
    token = url.rsplit("/", 1)[1]
    assert url == f"{service.api_url}/pay/{token}" and token.startswith("dl_")

    browser = requests.Session()
    opened = browser.get(url, timeout=10)  # /pay/dl_… leads to /d/dl_…
    assert opened.history[0].status_code == 303 and opened.url == f"{service.api_url}/d/{token}"
    assert opened.status_code == 200 and opened.headers["content-language"] == "es"
    page = text_of(opened.text)
    assert "Factura P-1" in page and "COP 150.000" in page and "Pagar esta cuota" in page

    # The debtor pays the first installment: the page sends them to the gateway's checkout.
    fields = form_of(opened.text, 'value="P-1-1"')
    to_gateway = browser.post(opened.url, data=fields, allow_redirects=False, timeout=10)
    assert to_gateway.status_code == 303 and to_gateway.headers["location"].startswith(service.gateway_url)
    checkout = browser.get(to_gateway.headers["location"], timeout=10)
    assert "COP 100000" in checkout.text
    preference = re.search(r"name='pref_id' value='([^']+)'", checkout.text).group(1)
    result = browser.post(f"{service.gateway_url}/checkout/v1/pay", timeout=10,
                          data={"pref_id": preference, "outcome": "approve"})
    assert "approved" in result.text
    back = html.unescape(re.search(r"id='back' href='([^']+)'", result.text).group(1))
    assert back.startswith(f"{service.api_url}/d/back?") and token not in back  # the gateway never sees it

    # Back on the page: the payment shows once the gateway's notification is recorded.
    returned = browser.get(back, timeout=10)
    assert returned.history[0].status_code == 303 and returned.url.startswith(f"{service.api_url}/d/{token}")
    assert "Gracias" in text_of(returned.text)
    wait_until(lambda: Payment.select().count() == 1, message="the gateway's payment to be recorded")
    page = text_of(browser.get(f"{service.api_url}/d/{token}", timeout=10).text)
    assert "COP 50.000" in page and "No hay pagos" not in page and "Todavía no hay pagos" not in page
    assert "pagada" in page  # the first installment
    debt = Debt.get(Debt.external_id == "P-1")
    assert (debt.saldo_pendiente, debt.status) == (5000000, "partial")  # minor units: COP 50.000,00
    assert Payment.get().monto == 10000000

    # Neither the access log, the other processes' logs, nor the metrics hold the token. The page's
    # requests reach the metrics within a second, from whichever worker answered them.
    def metrics_with_the_page() -> str | None:
        text = requests.get(f"{service.api_url}/metrics", timeout=10).text
        return text if 'route="/d/{token}"' in text else None

    metrics = wait_until(metrics_with_the_page, timeout=5, message="the page's route in the metrics")
    assert token not in metrics
    wait_until(lambda: "/d/…" in service.log("api"), message="the access log lines")
    for name in ("api", "worker", "gateway", "sim"):
        assert token not in service.log(name), name


@pytest.mark.timeout(180)
def test_the_live_page_refuses_forms_without_their_token_and_unknown_links(service, alice):
    url = remind(service, alice)
    token = url.rsplit("/", 1)[1]
    page_url = f"{service.api_url}/d/{token}"
    opened = requests.get(page_url, timeout=10)
    fields = {name: value for name, value in form_of(opened.text, 'value="P-1-1"').items() if name != "csrf_token"}
    refused = requests.post(page_url, data=urlencode(fields), timeout=10,
                            headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert refused.status_code == 403 and "Formulario vencido" in text_of(refused.text)
    unknown = requests.get(f"{service.api_url}/d/dl_{'x' * 32}", headers={"Accept-Language": "pt-BR"}, timeout=10)
    assert unknown.status_code == 404 and "Link não encontrado" in unknown.text
    assert Payment.select().count() == 0 and json.dumps(dict(refused.headers)).find(token) == -1
