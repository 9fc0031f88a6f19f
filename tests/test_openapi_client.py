"""The API document, used as an integrator uses it: a third-party generator (openapi-python-client,
in its tool environment `.venv/tools/openapi-client`) makes a client from the document the live service
serves, and that client drives the service (gunicorn, the consumer, the platform and payment
gateway simulators as processes): a webhook endpoint, a number, debts and payments, a campaign, a
single message, credits, a promise and a dispute on the debtor's page. Every answer, errors
included, must parse into the generated models with nothing left in `additional_properties` where
the document lists fields: the document names every field the service answers.

The same flow makes the service post every event it has. Each delivery the test's receivers get
must match the document's `webhooks` section: its body the event's schema (a JSON Schema
validator, formats checked), its headers the documented signature headers, its signature the
endpoint's secret.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import httpx
import pytest
import requests
from jsonschema import Draft202012Validator

from models.clock import utcnow
from models.events import webhooks
from models.events.tables import ALL_EVENTS, CORE_EVENTS, PAYMENT_EVENT, PING_EVENT
from models.receivables import debtor_links, payments
from models.receivables.tables import Debt, DebtPromise, Installment, Reminder
from tests.conftest import Persona
from tests.live import ROOT, PaymentsLiveService, env_for, wait_until
from tests.openapi_fixtures import event_errors, webhook_post
from tests.test_debtor_links_live import form_of
from tests.webhooks_fixtures import *  # noqa: F403  (fixtures)
from tests.webhooks_fixtures import Receiver, verify

pytestmark = [pytest.mark.parametrize("storage", ["sqlite"], indirect=True), pytest.mark.timeout(300)]

GENERATOR = ROOT / ".venv" / "tools" / "openapi-client" / "bin" / "openapi-python-client"
PACKAGE = "generated_service_client"
# Ends in 7: the simulator gives this user a username beside the business-scoped id.
CONTACT = "573001112237"
REDIRECT_URL = "https://example.com/connected"


@pytest.fixture
def service(storage, tmp_path, immediate_queue, webhook_ca, webhook_settings):
    immediate_queue.immediate = False
    live = PaymentsLiveService({**env_for(storage), "SVC_WEBHOOK_CA_BUNDLE": webhook_ca[1]}, tmp_path).start()
    yield live
    live.stop()


def generate(document: bytes, directory: Path) -> ModuleType:
    """Run the generator on the document and import the package it writes.

    `post_hooks: []`: the generator would otherwise run a formatter on its output, and warn when
    there is none; the formatting of generated code is no concern here. Any other warning (a
    schema or operation it could not turn into code) fails the run (`--fail-on-warning`).
    """
    if not GENERATOR.exists():
        pytest.fail(f"{GENERATOR.relative_to(ROOT)} is missing: run scripts/install-test-deps "
                    "(scripts/test runs it) to create the generator's tool environment")
    (directory / "openapi.json").write_bytes(document)
    (directory / "generator.yaml").write_text("post_hooks: []\n")
    run = subprocess.run([str(GENERATOR), "generate", "--path", str(directory / "openapi.json"),
                          "--output-path", str(directory / PACKAGE), "--meta", "none",
                          "--config", str(directory / "generator.yaml"), "--fail-on-warning"],
                         cwd=directory, capture_output=True, text=True, timeout=120)
    output = run.stdout + run.stderr
    assert run.returncode == 0 and "warning" not in output.lower(), output
    sys.path.insert(0, str(directory))
    return importlib.import_module(PACKAGE)


@pytest.fixture
def generated_package(service, tmp_path):
    document = requests.get(f"{service.api_url}/api/v1/openapi.json", timeout=10)
    assert document.status_code == 200
    package = generate(document.content, tmp_path)
    yield package
    sys.path.remove(str(tmp_path))
    for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def assert_complete(value: Any, where: str) -> None:
    """No field the service answered fell into `additional_properties` of a model that lists its
    fields (a free-form object, such as an error's `details`, lists none)."""
    if attrs.has(type(value)):
        names = [field.name for field in attrs.fields(type(value)) if field.name != "additional_properties"]
        extra = getattr(value, "additional_properties", {})
        assert not (names and extra), f"{where}: {type(value).__name__} does not document {sorted(extra)}"
        for name in names:
            assert_complete(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            assert_complete(item, f"{where}[{index}]")


class GeneratedClient:
    """Calls through the generated package: `call("campaigns.post_campaigns", 201, body=...)`."""

    def __init__(self, package: ModuleType, base_url: str, key: str):
        self.package = package
        self.models = importlib.import_module(f"{package.__name__}.models")
        # An answer with a status the document does not list raises instead of parsing to None.
        self.client = package.AuthenticatedClient(base_url=base_url, token=key, raise_on_unexpected_status=True,
                                                  timeout=httpx.Timeout(30.0))

    def call(self, operation: str, expected: int | tuple[int, ...], **arguments) -> Any:
        module = importlib.import_module(f"{self.package.__name__}.api.{operation}")
        response = module.sync_detailed(client=self.client, **arguments)
        allowed = expected if isinstance(expected, tuple) else (expected,)
        assert response.status_code in allowed, (operation, response.status_code, response.content)
        assert response.parsed is not None, operation
        assert_complete(response.parsed, operation)
        return response.parsed

    def error(self, operation: str, expected: int, code: str, **arguments) -> None:
        answer = self.call(operation, expected, **arguments)
        assert isinstance(answer, self.models.ErrorEnvelope), (operation, answer)
        assert answer.error.code == code, (operation, answer)

    def body(self, model: str, data: dict) -> Any:
        return getattr(self.models, model).from_dict(data)


def connect_number(service: PaymentsLiveService, api: GeneratedClient) -> str:
    """Onboarding as a company runs it: the link from the API, the simulator's signup page."""
    link = api.call("accounts.post_accounts_coexistence_link", 201, body=api.body("CoexistenceLinkInput", {
        "redirect_url": REDIRECT_URL, "label": "Collections", "external_reference": "crm-7"}))
    done = requests.post(f"{service.api_url}/onboarding/{link.data.attempt_id}/simulate", allow_redirects=False,
                         timeout=30)
    assert done.status_code == 303 and "success=true" in done.headers["Location"], done.text
    return httpx.URL(done.headers["Location"]).params["account_id"]


def sim(service: PaymentsLiveService, path: str, **body) -> dict:
    response = requests.post(f"{service.sim_url}/_sim/{path}", json=body, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def wait_for_events(receivers: list[Receiver], names: set[str], timeout: float = 60) -> None:
    def missing() -> set[str]:
        return names - {request.headers["X-Service-Event"] for receiver in receivers
                        for request in list(receiver.requests)}

    try:
        wait_until(lambda: not missing(), timeout=timeout, interval=0.2, message="the events")
    except AssertionError:
        raise AssertionError(f"never delivered: {sorted(missing())}") from None


def register_endpoints(api: GeneratedClient, hooks: Receiver) -> Any:
    """An endpoint for every event a company can choose (returned); a second one, deactivated."""
    endpoint = api.call("webhooks.post_webhooks_endpoints", 201, body=api.body("EndpointInput", {
        "url": hooks.url(), "events": list(CORE_EVENTS)})).data
    spare = api.call("webhooks.post_webhooks_endpoints", 201, body=api.body("EndpointInput", {
        "url": hooks.url(path="/spare"), "events": ["campaign.created"]})).data
    api.call("webhooks.delete_webhooks_endpoints_endpoint_id", 200, endpoint_id=spare.id)
    api.call("webhooks.get_webhooks_endpoints", 200)
    return endpoint


def author_template(api: GeneratedClient, account_id: str) -> None:
    """A template submitted in the platform's own shape; the simulator's review approves it
    (template.status_changed), and then it is listed among the number's approved templates."""
    api.call("accounts.post_accounts_account_id_templates", 201, account_id=account_id,
             idempotency_key="template-1", body=api.body("TemplateInput", {
                 "name": "order_ready", "language": "es", "category": "UTILITY", "components": [
                     {"type": "BODY", "text": "Hola {{1}}, tu pedido está listo.",
                      "example": {"body_text": [["Ana"]]}},
                     {"type": "BUTTONS", "buttons": [{"type": "QUICK_REPLY", "text": "Gracias"}]}]}))
    wait_until(lambda: "order_ready" in [template.name for template in api.call(
        "accounts.get_accounts_account_id_templates", 200, account_id=account_id).data],
        timeout=30, interval=0.5, message="the template's approval")


def sync_receivables(service: PaymentsLiveService, api: GeneratedClient, account_id: str) -> None:
    """A debt of the contact, a batch (one element refused), an ERP payment, a resolution; then a
    payment link paid on the gateway's checkout (debt.payment_received)."""
    debt = {"external_id": "FAC-1", "account_id": account_id, "external_version": 1,
            "deudor": {"nombre": "Ana Pérez", "documento": "CC-1", "telefono": CONTACT},
            "moneda": "COP", "referencia": "Factura 1", "monto_original": 300000, "saldo_pendiente": 300000,
            "cuotas": [{"external_id": "FAC-1-1", "numero": 1, "monto": 150000, "vence": "2031-01-31"},
                       {"external_id": "FAC-1-2", "numero": 2, "monto": 150000, "vence": "2031-02-28"}]}
    api.call("cartera.post_cartera_deudas", 201, idempotency_key="debt-1", body=api.body("DebtInput", debt))
    other_debtor = {**debt["deudor"], "documento": "CC-2", "telefono": "573009990002"}
    api.call("cartera.post_cartera_deudas_lote", 200, idempotency_key="batch-1", body=api.body("DebtBatchInput", {
        "deudas": [{**debt, "external_id": "FAC-2", "cuotas": [], "deudor": other_debtor},
                   {**debt, "external_id": "FAC-3", "account_id": "wacc_unknown"}]}))
    api.call("cartera.post_cartera_pagos", 201, idempotency_key="pay-1", body=api.body("PaymentInput", {
        "external_id": "PAY-1", "deuda_external_id": "FAC-1", "monto": 50000, "moneda": "COP",
        "metodo": "transfer", "pagado_en": "2026-01-15T10:00:00-05:00"}))
    api.call("cartera.post_cartera_deudas_external_id_resolver", 200, external_id="FAC-2",
             idempotency_key="resolve-2", body=api.body("ResolveInput", {"status": "cancelled", "reason": "duplicate"}))

    link = api.call("cartera.post_cartera_deudas_external_id_payment_link", 201, external_id="FAC-1",
                    idempotency_key="link-1", body=api.body("PaymentLinkInput", {})).data
    paid = requests.post(f"{service.gateway_url}/_sim/payments", timeout=10,
                         json={"pref_id": link.checkout_url.split("pref_id=", 1)[1], "outcome": "approve"})
    assert paid.status_code == 201, paid.text
    wait_until(lambda: api.call("cartera.get_cartera_pagos", 200).data, timeout=30, interval=0.5,
               message="the gateway payment")
    detail = api.call("cartera.get_cartera_deudas_external_id", 200, external_id="FAC-1").data.deuda
    assert sorted(payment.origin for payment in detail.pagos) == ["erp", "service"] and detail.links_de_pago


def speak_on_the_page(service: PaymentsLiveService, api: GeneratedClient, company: Persona) -> None:
    """The debtor opens their page (its token issued as a reminder would) and promises to pay
    FAC-1, then disputes it (debt.promise_made, debt.disputed); the ERP reads both in its feed."""
    debtor_id = Debt.get((Debt.tenant == company.id) & (Debt.external_id == "FAC-1")).debtor_id
    url = f"{service.api_url}/d/{debtor_links.issue(company.id, debtor_id)}"
    browser = requests.Session()
    page = browser.get(url, timeout=10)
    assert page.status_code == 200, page.text
    promise = form_of(page.text, 'value="promise"')
    promise["date"] = (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=5)).isoformat()
    assert browser.post(url, data=promise, allow_redirects=False, timeout=10).status_code == 303
    dispute = {**form_of(page.text, 'value="dispute"'), "reason": "Ya la pagué en efectivo"}
    assert browser.post(url, data=dispute, allow_redirects=False, timeout=10).status_code == 303
    said = api.call("cartera.get_cartera_respuestas", 200).data
    assert [(row.tipo, row.origin) for row in said] == [("promesa", "page"), ("disputa", "page")]


def follow_a_plan(service: PaymentsLiveService, api: GeneratedClient) -> None:
    """A dunning plan that escalates, the page's dispute resolved by the company, and the calendar
    moved on past the page's promise and the plan's last step: the next collection run reports
    both (debt.promise_broken, debt.escalated).

    Time is moved as the collection tests move it: the promise's date and the last reminder are
    written in the past, as the page and an earlier run would have left them days ago."""
    plan = api.call("cartera.post_cartera_planes", 201, idempotency_key="plan-1", body=api.body("PlanInput", {
        "nombre": "Firme", "pasos": [{"dias": 0}], "maximo_semanal": 2})).data
    api.call("cartera.get_cartera_planes", 200)
    api.call("cartera.get_cartera_planes_plan_id", 200, plan_id=plan.id)
    api.call("cartera.put_cartera_planes_plan_id", 200, plan_id=plan.id, idempotency_key="plan-2",
             body=api.body("PlanInput", {"nombre": "Firme", "pasos": [{"dias": 0}], "maximo_semanal": 3}))
    api.error("cartera.post_cartera_planes", 422, "validation_failed", idempotency_key="plan-3",
              body=api.body("PlanInput", {"nombre": "Mal", "pasos": [{"dias": 400}]}))
    debt = Debt.get(Debt.external_id == "FAC-1")
    api.call("cartera.post_cartera_deudas_external_id_disputa_resolver", 200, external_id="FAC-1",
             idempotency_key="dispute-1")
    today = utcnow().date()
    moved = (DebtPromise.update(promised_date=today - dt.timedelta(days=2))
             .where((DebtPromise.debt == debt.id) & (DebtPromise.status == "active")).execute())
    assert moved == 1
    installment = Installment.get((Installment.debt == debt.id) & (Installment.numero == 1))
    Reminder.create(debt=debt.id, installment=installment.id, stage="due", status="queued", campaign_id="cmp_earlier",
                    created_at=utcnow() - dt.timedelta(days=2))
    ran = service.svcctl("cartera", "remind")
    assert ran.returncode == 0, ran.stdout + ran.stderr


def run_campaigns(api: GeneratedClient, account_id: str) -> None:
    """One recipient accepted, one refused at send, one failing after acceptance; then a second
    campaign cancelled at once."""
    recipients = [{"wa_id": "573001110001", "external_contact_id": "contact-1"}, {"wa_id": "573001110000"},
                  {"wa_id": "573001119999"}]
    campaign = api.call("campaigns.post_campaigns", 201, body=api.body("CampaignInput", {
        "account_id": account_id, "template_name": "hello_world", "external_reference": "promo-1",
        "recipients": recipients})).data
    wait_until(lambda: api.call("campaigns.get_campaigns_campaign_id", 200, campaign_id=campaign.id).data.status
               == "completed", timeout=60, interval=0.5, message="the campaign to complete")
    api.call("campaigns.get_campaigns", 200)
    api.call("campaigns.get_campaigns_campaign_id_recipients", 200, campaign_id=campaign.id)
    # Cancelling races the dispatcher: cancelled, or already started; both answers are documented.
    second = api.call("campaigns.post_campaigns", 201, body=api.body("CampaignInput", {
        "account_id": account_id, "template_name": "hello_world", "recipients": [{"wa_id": "573001110002"}]})).data
    api.call("campaigns.post_campaigns_campaign_id_cancel", (200, 409), campaign_id=second.id)


def converse(service: PaymentsLiveService, api: GeneratedClient, account: Any, hooks: Receiver) -> None:
    """The contact writes (naming the contact's open debts), is answered with a single message
    inside the window, and the business app replies too (an echo). Then the platform blocks the
    number's business account: the next send pauses it (account.paused)."""
    sim(service, "inbound", **{"from": CONTACT, "to": account.phone_id, "text": "Quiero pagar"})
    wait_for_events([hooks], {"message.inbound.created"})
    text = {"account_id": account.id, "to": CONTACT, "type": "text", "text": {"body": "Le enviamos el enlace"}}
    message = api.call("messages.post_messages", 202, body=api.body("MessageInput", text)).data
    wait_until(lambda: api.call("messages.get_messages_message_id", 200, message_id=message.id).data.status
               == "sent", timeout=30, interval=0.5, message="the single message to be sent")
    sim(service, "echo", **{"from": account.phone_id, "to": CONTACT, "text": "Ya te respondo"})

    sim(service, f"numbers/{account.phone_id}", blocked=368)
    api.call("messages.post_messages", 202, body=api.body("MessageInput", text))


def test_a_generated_client_drives_the_service_and_every_posted_event_matches_the_document(
        service, generated_package, make_receiver, tmp_path):
    company = Persona("Generated Client Co", credits=100, rate_limit=100_000)
    api = GeneratedClient(generated_package, service.api_url, company.key_string)
    hooks, payment_hooks = make_receiver(), make_receiver()

    api.call("meta.get_openapi_json", 200)
    api.call("health.get_health", 200)
    api.call("access.post_access_requests", 201, body=api.body("AccessRequestInput", {
        "company_name": "Prospect SA", "contact_name": "Eva", "contact_email": "eva@prospect.example"}))
    endpoint = register_endpoints(api, hooks)
    # The payment endpoint and the gateway seller are the company's settings (portal or svcctl).
    _payment_endpoint, payment_secret = webhooks.set_payment_endpoint(company.id, payment_hooks.url(path="/payments"))
    seller = requests.post(f"{service.gateway_url}/_sim/sellers", timeout=5).json()
    payments.connect_gateway(company.id, seller["access_token"], seller["webhook_secret"])

    account_id = connect_number(service, api)
    api.call("accounts.get_accounts", 200)
    account = api.call("accounts.get_accounts_account_id", 200, account_id=account_id).data
    api.call("accounts.get_accounts_account_id_templates", 200, account_id=account_id)
    author_template(api, account_id)
    sync_receivables(service, api, account_id)
    speak_on_the_page(service, api, company)
    follow_a_plan(service, api)
    run_campaigns(api, account_id)
    converse(service, api, account, hooks)
    api.call("credits_.get_credits_balance", 200)
    api.call("credits_.get_credits_ledger", 200)
    api.error("campaigns.get_campaigns_campaign_id", 404, "campaign_not_found", campaign_id="cmp_missing")
    api.error("campaigns.get_campaigns", 422, "validation_failed", per_page=500)
    api.error("cartera.post_cartera_deudas_external_id_resolver", 404, "debt_not_found", external_id="FAC-404",
              idempotency_key="resolve-404", body=api.body("ResolveInput", {"status": "paid", "reason": "n/a"}))
    tested = service.svcctl("webhooks", "test", endpoint.id)  # the test event, as an administrator sends it
    assert tested.returncode == 0, tested.stdout + tested.stderr

    wait_for_events([hooks, payment_hooks], {*ALL_EVENTS, PING_EVENT})
    document = json.loads((tmp_path / "openapi.json").read_text())
    for receiver, secret in ((hooks, endpoint.signing_secret), (payment_hooks, payment_secret)):
        for request in list(receiver.requests):
            check_delivery(document, request, secret)
    assert {request.headers["X-Service-Event"] for request in payment_hooks.requests} == {PAYMENT_EVENT}


def check_delivery(document: dict, request, secret: str) -> None:
    name = request.headers["X-Service-Event"]
    body = json.loads(request.body)
    assert body["event"] == name
    assert event_errors(document, name, body) == [], body
    for header in webhook_post(document, name)["parameters"]:
        value = request.headers.get(header["name"])
        assert value is not None, f"{name}: no {header['name']} header"
        assert not list(Draft202012Validator(header["schema"]).iter_errors(value)), (name, header["name"], value)
    assert verify(request, secret), f"{name}: the signature does not verify"
