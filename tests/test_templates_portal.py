"""The portal's template form and template health: a developer writes a template with a variable,
a URL button and a quick reply; the same rules as the API refuse a bad one, saying where on the
form; the number's page shows each template's status, a rejection's reason, its quality and a
pause. In the portal's app, and end to end over real HTTP on the live service."""

from __future__ import annotations

import re

import pytest
import requests

from models.numbers.tables import MessagingAccount, Template
from models.tenancy.tables import AuditEntry
from tests.accounts_fixtures import *  # noqa: F403  (fixtures)
from tests.accounts_fixtures import connect_number, sqlite_only
from tests.conftest import Persona
from tests.live import LiveService, env_for, wait_until
from tests.portal_fixtures import PASSWORD, make_user, signed_in
from tests.test_templates_api import sim_template
from tests.test_webhooks_live import live_number

FORM = {
    "name": "order_ready", "language": "es", "category": "UTILITY",
    "header": "Pedido {{1}}", "header_example": "A-12",
    "body": "Hola {{1}}, tu pedido {{2}} está listo.", "body_examples": "Ana\nA-12",
    "footer": "Tienda Ejemplo",
    "button_type_0": "URL", "button_text_0": "Ver pedido", "button_value_0": "https://shop.example/orders/{{1}}",
    "button_example_0": "https://shop.example/orders/A-12",
    "button_type_1": "QUICK_REPLY", "button_text_1": "Gracias",
}


def test_a_developer_writes_a_template_from_the_form(client, alice, simulator):
    account_id = connect_number(client, alice)
    developer = make_user(alice.id, "developer", "dev@alice.example.com")
    browser = signed_in(client, developer)
    browser.get(f"/portal/numbers/{account_id}")
    result = browser.post(f"/portal/numbers/{account_id}/templates", FORM)
    assert result.status_code == 303, result.text
    template = Template.get(Template.name == "order_ready")
    assert (template.status, template.variable_count, template.header_type) == ("pending", 2, "text")
    buttons = sim_template(simulator, "order_ready", "es")["components"][3]["buttons"]
    assert [button["type"] for button in buttons] == ["URL", "QUICK_REPLY"]
    assert AuditEntry.get(AuditEntry.action == "template.created").details["name"] == "order_ready"
    page = browser.get(result.headers["Location"])
    assert "Template submitted" in page.text and 'status-pending' in page.text


@sqlite_only
def test_a_broken_template_is_refused_where_it_is_wrong_and_the_form_kept(client, alice, simulator):
    account_id = connect_number(client, alice)
    browser = signed_in(client, make_user(alice.id, "developer"), headers={"Accept-Language": "es"})
    browser.get(f"/portal/numbers/{account_id}")
    result = browser.post(f"/portal/numbers/{account_id}/templates",
                          {**FORM, "body": "Hola {{1}}, tu pedido {{2}}", "footer": "Tienda {{1}}"})
    assert result.status_code == 422
    assert "La plantilla no se envió" in result.text
    assert "Cuerpo: the body may not end with a variable" in result.text
    assert "Pie: a footer takes no variables" in result.text
    assert 'value="Pedido {{1}}"' in result.text  # what was typed stays
    assert not Template.select().where(Template.name == "order_ready").exists()


@sqlite_only
def test_a_viewer_sees_template_health_but_cannot_write(client, alice, simulator):
    account_id = connect_number(client, alice)
    account = MessagingAccount.get(MessagingAccount.public_id == account_id)
    Template.update(status="rejected", rejected_reason="INVALID_FORMAT").where(
        (Template.account == account.id) & (Template.name == "promo_pending")).execute()
    Template.update(status="paused", quality_score="RED", status_detail="FIRST_PAUSE: paused for 3 hours",
                    previous_category="UTILITY").where(
        (Template.account == account.id) & (Template.name == "order_update")).execute()
    viewer = signed_in(client, make_user(alice.id, "viewer"), headers={"Accept-Language": "pt-BR"})
    page = viewer.get(f"/portal/numbers/{account_id}").text
    assert "Rejeitado: INVALID_FORMAT" in page
    assert "Pausa ou ritmo: FIRST_PAUSE: paused for 3 hours" in page
    assert "movido de" in page and "Qualidade baixa" in page
    assert "Novo modelo" not in page
    refused = viewer.post(f"/portal/numbers/{account_id}/templates", FORM)
    assert refused.status_code == 403


# -- end to end, over real HTTP ------------------------------------------------------------------

class Browser:
    """A requests session signed in to the live portal, posting each form with the last CSRF token."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        self.session = requests.Session()
        self.csrf = ""

    def get(self, path: str) -> requests.Response:
        response = self.session.get(self.base_url + path, timeout=10)
        if found := re.search(r'name="csrf_token" value="([^"]+)"', response.text):
            self.csrf = found.group(1)
        return response

    def post(self, path: str, fields: dict) -> requests.Response:
        return self.session.post(self.base_url + path, data={**fields, "csrf_token": self.csrf}, timeout=10,
                                 allow_redirects=False)


@pytest.fixture
def live(storage, immediate_queue, tmp_path):
    immediate_queue.immediate = False
    service = LiveService(env_for(storage), tmp_path).start()
    yield service
    service.stop()


@pytest.mark.parametrize("storage", ["sqlite", "postgres+redis"], indirect=True)
@pytest.mark.timeout(120)
def test_the_portal_shows_a_template_approved_then_a_rejection_and_a_pause(live):
    company = Persona("Portal Templates Co")
    account = live_number(live, company.id, mps=20)
    user = make_user(company.id, "developer", "dev@templates.example.com")
    browser = Browser(live.api_url)
    browser.get("/portal/login")
    signed = browser.post("/portal/login", {"email": user.email, "password": PASSWORD, "next": "/portal"})
    assert signed.status_code == 303, signed.text
    number_page = f"/portal/numbers/{account.public_id}"
    browser.get(number_page)

    assert browser.post(f"{number_page}/templates", FORM).status_code == 303
    row = 'id="template-order_ready-es"'
    wait_until(lambda: 'status-approved' in _row(browser.get(number_page).text, row), timeout=30,
               message="the template approved on the number's page")

    browser.get(number_page)
    promo = {**FORM, "name": "promo_utility", "body": "Hola {{1}}, tu pedido {{2}} tiene 20% de descuento."}
    assert browser.post(f"{number_page}/templates", promo).status_code == 303
    wait_until(lambda: "Rejected: TAG_CONTENT_MISMATCH" in _row(browser.get(number_page).text,
                                                                'id="template-promo_utility-es"'),
               timeout=30, message="the rejection's reason on the page")

    requests.post(f"{live.sim_url}/_sim/templates/pause", json={"name": "order_ready", "language": "es"},
                  timeout=5).raise_for_status()
    # The pause and the quality rating come in webhooks of their own, in either order.
    wait_until(lambda: all(text in _row(browser.get(number_page).text, row)
                           for text in ("status-paused", "FIRST_PAUSE", "Low quality")),
               timeout=30, message="the pause and the low quality on the page")


def _row(page: str, marker: str) -> str:
    start = page.find(marker)
    return page[start:page.find("</tr>", start)] if start >= 0 else ""


