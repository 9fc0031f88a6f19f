"""The debtor's page through the Falcon app, on both backends: one token per debtor and company
that shows only that debtor's debts with that company, in the company's language; expired,
unknown and forged tokens, forms without their token and too many requests each get a page of
their own; paying an installment makes a gateway link for it (the gateway simulator over HTTP);
a promise to pay by a date and a dispute with a reason are recorded and pause collection.
The whole loop, reminder to payment applied, is tests/test_debtor_links_live.py."""

from __future__ import annotations

import datetime as dt
import html
import re

import pytest
import requests

from models.clock import utcnow
from models.events.tables import Event
from models.receivables import debtor_links, debts, promises, snapshots
from models.receivables.collection import due_reminders
from models.receivables.inputs import parse_debt
from models.receivables.tables import (
    Debt,
    DebtDispute,
    DebtorLink,
    DebtPromise,
    Payment,
    PaymentLink,
    PaymentLinkPart,
    PaymentReversal,
)
from models.tenancy.tables import Tenant
from tests.campaigns_fixtures import make_number
from tests.payments_fixtures import *  # noqa: F403  (gateway_sim, gateway)
from tests.receivables_fixtures import debt_body


def add_debt(persona, number, external_id: str, *, document: str, phone: str, name: str = "Ana Pérez",
             currency: str = "CLP", installments=((1, 100000, "2031-01-10"), (2, 50000, "2031-02-10")),
             reference: str | None = None) -> Debt:
    total = sum(amount for _n, amount, _due in installments)
    body = debt_body(number.public_id, external_id, moneda=currency, monto_original=total, saldo_pendiente=total,
                     referencia=reference or f"Factura {external_id}",
                     deudor={"nombre": name, "documento": document, "telefono": phone},
                     cuotas=[{"external_id": f"{external_id}-{n}", "numero": n, "monto": amount, "vence": due}
                             for n, amount, due in installments])
    snapshots.upsert_debt(persona.id, parse_debt(body), today=dt.date(2031, 1, 1))
    return Debt.get((Debt.tenant == persona.id) & (Debt.external_id == external_id))


def set_locale(persona, locale: str, timezone: str = "America/Santiago") -> None:
    Tenant.update(locale=locale, timezone=timezone).where(Tenant.id == persona.id).execute()


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page)).replace("\u00a0", " ")


def form_fields(page: str, installment: str) -> dict[str, str]:
    """The hidden fields of the pay form of one installment."""
    [form] = [found for found in re.findall(r"<form.*?</form>", page, re.S) if f'value="{installment}"' in found]
    return dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form))


@pytest.fixture
def ana(alice):
    """Ana owes Alice Corp two debts; Luis owes Alice Corp one; Ana (same document and phone)
    also owes Charlie Ltd one."""
    set_locale(alice, "es_CL")
    number = make_number(alice.id)
    first = add_debt(alice, number, "F-1", document="11-1", phone="56911110001")
    add_debt(alice, number, "F-2", document="11-1", phone="56911110001", installments=((1, 30000, "2031-03-01"),))
    add_debt(alice, number, "L-9", document="22-2", phone="56922220002", name="Luis Soto")
    return debtor_links.issue(alice.id, first.debtor_id)


def test_the_page_shows_only_the_debtors_debts_with_that_company(client, alice, charlie, ana):
    other = make_number(charlie.id)
    charlie_debt = add_debt(charlie, other, "C-7", document="11-1", phone="56911110001")
    charlie_token = debtor_links.issue(charlie.id, charlie_debt.debtor_id)
    assert charlie_token != ana

    answer = client.simulate_get(f"/d/{ana}")
    assert answer.status_code == 200, answer.text
    page = text_of(answer.text)
    assert "Alice Corp" in page and "Hola Ana Pérez" in page
    assert "F-1" in page and "F-2" in page and "Factura F-1" in page
    assert "L-9" not in page and "Luis" not in page and "C-7" not in page and "Charlie" not in page
    # es_CL: Chilean pesos and Spanish dates; installments with due dates and what is left of each.
    assert "CLP 150.000" in page and "CLP 100.000" in page and "10 ene 2031" in page
    assert "CLP 180.000" in page  # the total over both debts
    assert answer.headers["content-language"] == "es"
    assert answer.headers["referrer-policy"] == "no-referrer"

    charlie_page = text_of(client.simulate_get(f"/d/{charlie_token}").text)
    assert "Charlie Ltd" in charlie_page and "C-7" in charlie_page and "F-1" not in charlie_page


def test_one_token_per_debtor_and_company_sent_again_by_every_reminder(alice, ana):
    debtor_id = Debt.get(Debt.external_id == "F-1").debtor_id
    assert debtor_links.issue(alice.id, debtor_id) == ana
    [link] = DebtorLink.select().where(DebtorLink.debtor == debtor_id)
    # Only the token's SHA-256 is stored, never the token.
    assert link.token_hash == debtor_links.token_hash(ana) and ana not in str(link.__data__)
    assert link.expires_at > utcnow() + debtor_links.LINK_TTL - dt.timedelta(minutes=1)


def test_expired_unknown_and_forged_tokens_get_a_page_of_their_own(client, alice, ana):
    DebtorLink.update(expires_at=utcnow() - dt.timedelta(seconds=1)).execute()
    expired = client.simulate_get(f"/d/{ana}")
    assert expired.status_code == 410 and "Este link venció" in text_of(expired.text)
    assert "Alice Corp" in expired.text  # the company's own language and name

    forged = ana[:-4] + ("AAAA" if not ana.endswith("AAAA") else "BBBB")
    for token, language in ((forged, "en"), ("dl_nothing", "pt-BR"), ("anything", "es")):
        answer = client.simulate_get(f"/d/{token}", headers={"Accept-Language": language})
        assert answer.status_code == 404, answer.text
        assert answer.headers["content-language"] == language
        assert {"en": "Link not found", "pt-BR": "Link não encontrado", "es": "Link no encontrado"}[language] \
            in answer.text

    # A new reminder after expiry makes a new token; the old one stays dead.
    debtor_id = Debt.get(Debt.external_id == "F-1").debtor_id
    fresh = debtor_links.issue(alice.id, debtor_id)
    assert fresh != ana
    assert client.simulate_get(f"/d/{fresh}").status_code == 200
    assert client.simulate_get(f"/d/{ana}").status_code == 404


@pytest.mark.parametrize("locale,words", [
    ("es_CO", ["Pagar esta cuota", "Pagos realizados", "COP 100.000"]),
    ("pt_BR", ["Pagar esta parcela", "Pagamentos feitos", "R$ 100.000,00"]),
    ("en_US", ["Pay this installment", "Payments made", "COP 100,000"]),
])
def test_the_page_speaks_the_companys_language(client, alice, gateway, locale, words):
    set_locale(alice, locale)
    number = make_number(alice.id)
    debt = add_debt(alice, number, "B-1", document="33-3", phone="5511999990000",
                    currency="BRL" if locale == "pt_BR" else "COP")
    token = debtor_links.issue(alice.id, debt.debtor_id)
    # The company's language, whatever the browser asks for.
    answer = client.simulate_get(f"/d/{token}", headers={"Accept-Language": "de"})
    page = text_of(answer.text)
    assert answer.status_code == 200
    for word in words:
        assert word in page, (word, page)


def test_a_form_without_its_token_is_refused_with_a_page(client, alice, gateway, ana):
    page = client.simulate_get(f"/d/{ana}").text
    fields = form_fields(page, "F-1-1")
    luis = Debt.get(Debt.external_id == "L-9").debtor_id
    debtor_links.issue(alice.id, luis)
    luis_form = debtor_links.form_token(DebtorLink.get(DebtorLink.debtor == luis))
    for missing in ({**fields, "csrf_token": ""}, {k: v for k, v in fields.items() if k != "csrf_token"},
                    {**fields, "csrf_token": "x" * 64},
                    {**fields, "csrf_token": luis_form}):  # another debtor's page's form token
        refused = client.simulate_post(f"/d/{ana}", params=None, body=_encode(missing),
                                       headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert refused.status_code == 403 and "Formulario vencido" in text_of(refused.text)
    assert PaymentLink.select().count() == 0


def test_paying_one_installment_sends_the_debtor_to_the_gateway_for_its_amount(client, alice, gateway, ana):
    page = client.simulate_get(f"/d/{ana}").text
    fields = form_fields(page, "F-1-2")
    assert fields["action"] == "pay" and fields["scope"] == "installment"
    answer = client.simulate_post(f"/d/{ana}", body=_encode(fields),
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 303, answer.text
    checkout = answer.headers["location"]
    assert checkout.startswith(gateway.sim.base_url)
    assert "CLP 50000" in requests.get(checkout, timeout=5).text  # the second installment's amount
    [link] = PaymentLink.select()
    assert (link.origin, link.amount) == ("page", 50000)

    # Another debtor's debt cannot be named from this page.
    foreign = {**fields, "debt": "L-9", "installment": "L-9-1"}
    refused = client.simulate_post(f"/d/{ana}", body=_encode(foreign),
                                   headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert refused.status_code == 404 and PaymentLink.select().count() == 1


def test_too_many_requests_get_the_429_page(client, alice, ana):
    # Fixed one-minute windows: the limit is reached within two windows' worth of requests.
    answers = []
    while len(answers) <= 2 * debtor_links.PER_LINK_LIMIT and (not answers or answers[-1].status_code == 200):
        answers.append(client.simulate_get(f"/d/{ana}"))
    refused = answers[-1]
    assert len(answers) > debtor_links.PER_LINK_LIMIT
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
    assert "Demasiadas solicitudes" in text_of(refused.text)


def _encode(fields: dict[str, str]) -> str:
    from urllib.parse import urlencode

    return urlencode(fields)


def post(client, token: str, fields: dict[str, str]):
    return client.simulate_post(f"/d/{token}", body=_encode(fields),
                                headers={"Content-Type": "application/x-www-form-urlencoded"})


def action_fields(page: str, action: str, debt: str) -> dict[str, str]:
    [form] = [found for found in re.findall(r"<form.*?</form>", page, re.S)
              if f'name="action" value="{action}"' in found and f'value="{debt}"' in found]
    return dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form))


def test_a_promise_to_pay_by_a_date_within_the_limit(client, alice, ana):
    fields = action_fields(client.simulate_get(f"/d/{ana}").text, "promise", "F-1")
    today = debts.tenant_today(alice.id)
    for too_soon_or_late in (today, today + dt.timedelta(days=promises.PROMISE_MAX_DAYS + 1)):
        refused = post(client, ana, {**fields, "date": too_soon_or_late.isoformat()})
        assert refused.status_code == 422 and "como máximo a 30 días" in text_of(refused.text)
    assert post(client, ana, {**fields, "date": "mañana"}).status_code == 422
    assert DebtPromise.select().count() == 0

    promised = post(client, ana, {**fields, "date": (today + dt.timedelta(days=5)).isoformat()})
    assert promised.status_code == 303 and promised.headers["location"] == f"/d/{ana}?ok=promised"
    page = text_of(client.simulate_get(promised.headers["location"]).text)
    assert "La empresa ya sabe la fecha" in page and "Prometiste pagar a más tardar el" in page
    # A later promise replaces it.
    assert post(client, ana, {**fields, "date": (today + dt.timedelta(days=9)).isoformat()}).status_code == 303
    assert [(row.status, row.promised_date) for row in DebtPromise.select().order_by(DebtPromise.id)] == [
        ("replaced", today + dt.timedelta(days=5)), ("active", today + dt.timedelta(days=9))]
    # Another debtor's debt cannot be promised from this page.
    assert post(client, ana, {**fields, "debt": "L-9", "date": (today + dt.timedelta(days=2)).isoformat()}) \
        .status_code == 404


def test_a_dispute_with_a_reason(client, alice, ana):
    fields = action_fields(client.simulate_get(f"/d/{ana}").text, "dispute", "F-2")
    assert post(client, ana, {**fields, "reason": "   "}).status_code == 422
    assert post(client, ana, {**fields, "reason": "x" * 501}).status_code == 422
    disputed = post(client, ana, {**fields, "reason": "Ya la pagué en la tienda <b>"})
    assert disputed.status_code == 303 and disputed.headers["location"] == f"/d/{ana}?ok=disputed"
    answer = client.simulate_get(disputed.headers["location"])
    assert "Reclamaste esta deuda: Ya la pagué en la tienda &lt;b&gt;" in answer.text  # written as text
    assert 'name="action" value="dispute"' not in answer.text.split('data-debt="F-2"', 1)[1]
    again = post(client, ana, {**fields, "reason": "otra vez"})
    assert again.status_code == 409 and "ya está en reclamo" in text_of(again.text)
    assert [(row.reason, row.status) for row in DebtDispute.select()] == [("Ya la pagué en la tienda <b>", "open")]


def test_collection_leaves_promised_and_disputed_debts_alone(alice):
    Tenant.update(timezone="UTC").where(Tenant.id == alice.id).execute()
    number = make_number(alice.id)
    day = dt.date(2031, 1, 10)
    noon = dt.datetime(2031, 1, 10, 12, 0)
    made = {name: add_debt(alice, number, name, document=f"doc-{name}", phone=f"5699000000{n}",
                           installments=((1, 1000, day.isoformat()),))
            for n, name in enumerate(("KEPT", "PROMISED", "DISPUTED"))}
    Debt.update(auto_send=True).execute()
    assert {item.debt_external_id for item in due_reminders(noon)} == {"KEPT", "PROMISED", "DISPUTED"}
    promises.promise(made["PROMISED"], day + dt.timedelta(days=3), today=day)
    promises.dispute(made["DISPUTED"], "no es mía")
    assert {item.debt_external_id for item in due_reminders(noon)} == {"KEPT"}
    # Once the promised day has passed, the promised debt is reminded again; the dispute holds.
    later = noon + dt.timedelta(days=4)
    assert {item.debt_external_id for item in due_reminders(later)} == {"KEPT", "PROMISED"}


def test_paying_everything_pays_each_debt_once_and_a_refund_comes_off_the_last_first(client, alice, gateway, ana):
    page = client.simulate_get(f"/d/{ana}").text
    [form] = [found for found in re.findall(r"<form.*?</form>", page, re.S) if 'value="all"' in found]
    fields = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form))
    assert fields["currency"] == "CLP" and "Pagar todo: CLP 180.000" in text_of(form)
    answer = post(client, ana, fields)
    assert answer.status_code == 303, answer.text
    assert "CLP 180000" in requests.get(answer.headers["location"], timeout=5).text
    [link] = PaymentLink.select()
    assert (link.amount, link.origin) == (180000, "page")
    assert [(part.debt.external_id, part.amount) for part in link.parts.order_by(PaymentLinkPart.position)] == [
        ("F-1", 150000), ("F-2", 30000)]

    # The debtor pays 160.000 of it: the first debt whole, 10.000 of the second; told twice, recorded once.
    paid = gateway.pay({"checkout_url": answer.headers["location"]}, amount="160000")
    for _ in range(2):
        path, headers, body = gateway.notification(paid["id"])
        assert client.simulate_post(path, body=body, headers=headers).status_code == 200
    recorded = {row.transaction_id: (row.debt.external_id, row.monto) for row in Payment.select()}
    assert recorded == {f"{paid['id']}/1": ("F-1", 150000), f"{paid['id']}/2": ("F-2", 10000)}
    balances = dict(Debt.select(Debt.external_id, Debt.saldo_pendiente).tuples())
    assert (balances["F-1"], balances["F-2"]) == (0, 20000)
    assert Event.select().where(Event.name == "debt.payment_received").count() == 2

    # 20.000 given back: the second debt's 10.000 first, then 10.000 of the first.
    gateway.control(f"payments/{paid['id']}/refund", amount="20000")
    path, headers, body = gateway.notification(paid["id"])
    client.simulate_post(path, body=body, headers=headers)
    balances = dict(Debt.select(Debt.external_id, Debt.saldo_pendiente).tuples())
    assert (balances["F-1"], balances["F-2"]) == (10000, 30000)
    assert sorted(row.amount for row in PaymentReversal.select()) == [10000, 10000]


def test_one_address_trying_many_tokens_gets_the_429_page(client, alice):
    # Guessing tokens is counted per client address, whatever tokens it tries.
    answers = []
    while len(answers) <= 2 * debtor_links.PER_ADDRESS_LIMIT and (not answers or answers[-1].status_code == 404):
        answers.append(client.simulate_get(f"/d/dl_guess{len(answers):06d}", headers={"Accept-Language": "pt-BR"}))
    assert len(answers) > debtor_links.PER_ADDRESS_LIMIT
    assert answers[-1].status_code == 429 and "Solicitações demais" in text_of(answers[-1].text)
