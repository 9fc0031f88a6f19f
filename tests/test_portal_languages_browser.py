"""A browser in Spanish or Portuguese gets the portal in its language, end to end: a live stack
(gunicorn, the worker and the simulator as processes), on SQLite and on PostgreSQL + Redis, and
the system Chromium with its locale set as a person in Santiago or São Paulo has it.

A viewer signs in with the browser in Spanish (es-CL) and reads Spanish pages, Chilean amounts
and times in the company's zone; an owner with the browser in Portuguese (pt-BR) reads Portuguese,
and the page's script speaks it too (the copy button, a confirmation). The pages are photographed
for docs/portal.md.
"""

from __future__ import annotations

import datetime as dt

import pytest

from models.tenancy import credits
from models.tenancy.tables import LedgerEntry
from models.tenancy.tenants import update_tenant
from tests.browser_fixtures import *  # noqa: F403
from tests.browser_fixtures import shoot
from tests.live_fixtures import *  # noqa: F403
from tests.portal_fixtures import *  # noqa: F403
from tests.portal_fixtures import PASSWORD, make_user
from tests.receivables_fixtures import debt_body, make_account, post

NBSP = "\u00a0"


def sign_in(page, base: str, email: str) -> None:
    page.goto(base)  # to the sign-in page, and back here after it
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(base)


@pytest.fixture
def chilean_company(client, alice):
    """Alice's company in Santiago with a debt in pesos, one in reais and some credits."""
    update_tenant(alice.tenant.public_id, timezone="America/Santiago", locale="es_CL")
    account = make_account(alice)
    for external_id, currency, amount in (("FAC-1001", "CLP", "150000"), ("FAC-1002", "BRL", "1234.50")):
        body = debt_body(account.public_id, external_id, moneda=currency, monto_original=amount,
                         saldo_pendiente=amount, cuotas=[{"external_id": f"{external_id}-1", "numero": 1,
                                                          "monto": amount, "vence": "2031-01-10",
                                                          "estado": "pending"}])
        assert post(client, alice, "/deudas", body).status_code == 201
    credits.grant(alice.id, 24_500, reason="Compra de créditos")
    # 18:04 UTC is 15:04 in Santiago on that day (summer time).
    LedgerEntry.update(created_at=dt.datetime(2026, 3, 14, 18, 4)).where(LedgerEntry.tenant == alice.id).execute()
    return alice


@pytest.mark.timeout(180)
def test_a_viewer_with_a_spanish_browser_reads_the_portal_in_spanish(live_service, chilean_company, browser):
    base = f"{live_service.api_url}/portal"
    viewer = make_user(chilean_company.id, "viewer", "lectora@alice.example.com")
    context = browser.new_context(locale="es-CL", viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.goto(base)
    assert page.evaluate("document.documentElement.lang") == "es"
    assert page.locator("h1").inner_text() == "Iniciar sesión"
    sign_in(page, base, viewer.email)
    assert page.locator("h1").inner_text() == "Resumen"
    menu = page.locator("nav.menu").inner_text()
    assert all(word in menu for word in ("Claves", "Campañas", "Créditos", "Cartera"))
    assert page.locator(".badge").first.inner_text() == "lector"
    assert page.locator("#credits-available").inner_text() == "25.500"  # 1000 of alice's and 24 500 granted
    shoot(page, "overview-es")

    page.goto(f"{base}/receivables")
    amounts = page.locator("td.num").all_inner_texts()
    assert f"CLP{NBSP}150.000" in amounts and f"BRL{NBSP}1.234,50" in amounts
    page.goto(f"{base}/credits")
    assert "14 mar 2026, 15:04" in page.locator("table").inner_text()
    assert "Sign out" not in page.content() and "Cerrar sesión" in page.content()
    context.close()


@pytest.mark.timeout(180)
def test_an_owner_with_a_portuguese_browser_reads_portuguese_from_the_pages_and_their_script(
        live_service, chilean_company, owner, browser):
    base = f"{live_service.api_url}/portal"
    context = browser.new_context(locale="pt-BR", viewport={"width": 1280, "height": 860})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_service.api_url)
    page = context.new_page()
    sign_in(page, base, owner.email)
    assert page.evaluate("document.documentElement.lang") == "pt-BR"
    assert page.locator("h1").inner_text() == "Visão geral"

    page.goto(f"{base}/receivables/debt?id=FAC-1002")
    assert f"R${NBSP}1.234,50" in page.locator("dl.facts").inner_text()
    assert page.locator("input[name=amount]").get_attribute("placeholder") == "Valor em BRL, por exemplo 1.234,50"
    shoot(page, "debt-pt-BR")

    # The script's words come from the page: the copy button, then a confirmation.
    page.goto(f"{base}/keys")
    page.check("input[value='credits:read']")
    page.click("text=Criar chave")
    copy = page.locator("button.copy")
    assert copy.inner_text() == "Copiar"
    copy.click()
    page.wait_for_function("document.querySelector('button.copy').textContent === 'Copiado'")
    page.goto(f"{base}/keys")
    asked = []

    def answer(dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    page.locator("button.danger").first.click()
    page.wait_for_url(f"{base}/keys?ok=key_revoked")
    assert asked and asked[0].startswith("Revogar key_") and asked[0].endswith("definitivamente?")
    assert "A chave foi revogada" in page.locator(".notice").inner_text()
    context.close()
