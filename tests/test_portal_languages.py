"""The portal in the reader's language, through the real app: the user's choice, else the
browser's Accept-Language, else the company's locale; numbers, money and dates in the reader's
locale and the company's time zone; amounts typed the reader's way; errors said in the language."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from babel import Locale

from config import formats
from models.receivables.tables import Payment
from models.store.db import atomic
from models.tenancy import credits, portal
from models.tenancy.tables import AuditEntry, LedgerEntry, PortalUser, Tenant
from models.tenancy.tenants import update_tenant
from tests.live import ROOT
from tests.portal_fixtures import *  # noqa: F403
from tests.portal_fixtures import PortalClient, make_user, signed_in
from tests.receivables_fixtures import debt_body, make_account, post

NBSP = "\u00a0"
CHILEAN_BROWSER = {"Accept-Language": "es-CL,es;q=0.9,en;q=0.8"}
BRAZILIAN_BROWSER = {"Accept-Language": "pt-BR,pt;q=0.9"}


def lang_of(html: str) -> str:
    return re.search(r'<html lang="([^"]+)"', html).group(1)


def company(persona, locale: str, timezone: str = "UTC") -> None:
    update_tenant(persona.tenant.public_id, timezone=timezone, locale=locale)


def test_a_spanish_browser_sees_spanish_pages_from_the_sign_in_on(client, alice, owner):
    browser = PortalClient(client, headers=CHILEAN_BROWSER)
    login = browser.get("/portal/login")
    assert lang_of(login.text) == "es" and "Iniciar sesión" in login.text and "Sign in" not in login.text
    assert login.headers["content-language"] == "es" and "Accept-Language" in login.headers["vary"]
    assert browser.sign_in(owner.email).status_code == 303
    overview = browser.get("/portal")
    assert lang_of(overview.text) == "es"
    for spanish in ("Resumen", "Créditos disponibles", "Envíos de hoy", "Campañas", "Cerrar sesión", "propietario"):
        assert spanish in overview.text, spanish
    for english in ("Overview", "Credits available", "Sends today", "Sign out"):
        assert english not in overview.text, english


@pytest.mark.parametrize("header, language", [
    ("pt-BR,pt;q=0.9", "pt-BR"),
    ("pt", "pt-BR"),  # Portuguese without a country is Brazil's, the only one the pages speak
    ("pt-PT", "pt-BR"),
    ("en;q=0.5, es-MX;q=0.9", "es"),  # by q-value, not by order
    ("de-DE, es;q=0.2, en;q=0.1", "es"),  # the first language the pages speak, by weight
    ("es;q=0, en", "en"),  # q=0: not wanted at all
    ("ES-co", "es"),
    ("*, es;q=0.5", "es"),
])
def test_the_browser_language_is_negotiated_by_its_weights(client, alice, owner, header, language):
    company(alice, "en_US")
    page = signed_in(client, owner, {"Accept-Language": header}).get("/portal")
    assert lang_of(page.text) == language


@pytest.mark.parametrize("header", [None, "de-DE,fr;q=0.8", "q=0.5;;,", "x" * 5000])
def test_without_a_language_the_pages_speak_the_company_falls_back_to_its_locale(client, alice, owner, header):
    company(alice, "pt_BR", "America/Sao_Paulo")
    page = signed_in(client, owner, {"Accept-Language": header} if header else None).get("/portal")
    assert lang_of(page.text) == "pt-BR" and "Visão geral" in page.text and "Créditos disponíveis" in page.text


def test_a_company_in_english_with_an_unknown_browser_language_reads_english(client, alice, owner):
    page = signed_in(client, owner, {"Accept-Language": "de-DE"}).get("/portal")
    assert lang_of(page.text) == "en" and "Credits available" in page.text


def test_the_users_own_choice_overrides_the_browser_and_is_audited(client, alice, owner):
    company(alice, "es_CL")
    browser = signed_in(client, owner, CHILEAN_BROWSER)
    assert "Idioma" in browser.get("/portal/security").text
    saved = browser.post("/portal/security/language", {"language": "pt_BR"})
    assert saved.status_code == 303 and saved.headers["location"].endswith("/portal/security?ok=language_saved")
    page = browser.get("/portal/security", ok="language_saved")
    assert lang_of(page.text) == "pt-BR" and "Idioma salvo." in page.text
    assert PortalUser.get_by_id(owner.id).language == "pt_BR"
    # Another user of the company still reads their browser's language.
    other = signed_in(client, make_user(alice.id, "viewer"), CHILEAN_BROWSER)
    assert lang_of(other.get("/portal").text) == "es"
    # Back to the browser's.
    browser.get("/portal/security")
    assert browser.post("/portal/security/language", {"language": ""}).status_code == 303
    assert lang_of(browser.get("/portal").text) == "es" and PortalUser.get_by_id(owner.id).language is None
    changes = [entry.details for entry in AuditEntry.select().where(AuditEntry.action == "user.language_changed")
               .order_by(AuditEntry.id)]
    assert changes == [{"language": "pt_BR"}, {"language": None}]


def test_an_unknown_language_is_refused_in_the_readers_language_and_changes_nothing(client, alice, owner):
    browser = signed_in(client, owner, CHILEAN_BROWSER)
    browser.get("/portal/security")
    refused = browser.post("/portal/security/language", {"language": "fr"})
    assert refused.status_code == 422 and "Elige uno de los idiomas." in refused.text
    assert PortalUser.get_by_id(owner.id).language is None


def test_the_choice_holds_halfway_through_two_factor_and_on_the_sign_in_before_it(client, alice, owner):
    portal.set_language(owner, "pt_BR")
    browser = PortalClient(client, headers=CHILEAN_BROWSER)
    assert lang_of(browser.get("/portal/login").text) == "es"  # nobody is signed in: the browser's
    browser.sign_in(owner.email)
    assert lang_of(browser.get("/portal").text) == "pt-BR"


def test_an_invitation_speaks_the_inviting_companys_locale_without_a_browser_language(client, alice):
    company(alice, "es_CO", "America/Bogota")
    _invitation, token = portal.invite(alice.id, "ana@alice.example.com", "developer")
    page = PortalClient(client).get(f"/portal/invitations/{token}")
    assert lang_of(page.text) == "es" and "Únete a Alice Corp" in page.text and "desarrollador" in page.text
    assert lang_of(PortalClient(client, headers=BRAZILIAN_BROWSER).get(f"/portal/invitations/{token}").text) == "pt-BR"


def _debt(client, alice, external_id: str, currency: str, outstanding: str):
    account = make_account(alice)
    body = debt_body(account.public_id, external_id, moneda=currency, monto_original=outstanding,
                     saldo_pendiente=outstanding, cuotas=[])
    created = post(client, alice, "/deudas", body)
    assert created.status_code == 201, created.text


def test_money_numbers_and_dates_follow_the_locale_and_the_company_time_zone(client, alice, owner):
    company(alice, "es_CL", "America/Santiago")
    _debt(client, alice, "CL-1", "CLP", "150000")
    _debt(client, alice, "BR-1", "BRL", "1234.50")
    credits.grant(alice.id, 1_233_567, reason="carga inicial")
    with atomic():  # a moment known in both zones: 18:04 UTC is 15:04 in Santiago (summer time)
        LedgerEntry.update(created_at=dt.datetime(2026, 3, 14, 18, 4)).where(LedgerEntry.tenant == alice.id).execute()

    chilean = signed_in(client, owner, CHILEAN_BROWSER)
    listing = chilean.get("/portal/receivables").text
    assert f"CLP{NBSP}150.000" in listing and f"BRL{NBSP}1.234,50" in listing
    ledger = chilean.get("/portal/credits").text
    assert "1.234.567" in ledger and "14 mar 2026, 15:04" in ledger
    assert "America/Santiago" in ledger  # the zone the times are in is said once, at the foot
    # The page's script writes the live counters in the same formats (tests/test_portal_languages_browser.py).
    assert '<html lang="es" data-formats="es-CL">' in ledger

    brazilian = signed_in(client, make_user(alice.id, "viewer"), BRAZILIAN_BROWSER)
    listing = brazilian.get("/portal/receivables").text
    assert f"R${NBSP}1.234,50" in listing and f"CLP{NBSP}150.000" in listing
    assert "14 de mar. de 2026 15:04" in brazilian.get("/portal/credits").text


@pytest.mark.parametrize("header, company_locale, shown", [
    ("es", "es_CL", f"CLP{NBSP}150.000"),  # the language alone: the company's country
    ("es-MX", "es_CL", f"CLP{NBSP}150,000"),  # the browser names a country: its formats
    ("es-419", "es_CL", f"CLP{NBSP}150.000"),  # a region of several countries names none
    ("es", "en_US", f"CLP{NBSP}150,000"),  # neither: Latin American Spanish's own (es_419)
    ("en-US", "es_CL", f"CLP{NBSP}150,000"),  # the company's country is for its own language only
    (None, "es_CL", f"CLP{NBSP}150.000"),
])
def test_the_formats_country_comes_from_the_browser_then_the_company(client, alice, owner, header, company_locale,
                                                                      shown):
    company(alice, company_locale)
    _debt(client, alice, "CL-1", "CLP", "150000")
    page = signed_in(client, owner, {"Accept-Language": header} if header else None).get("/portal/receivables")
    assert shown in page.text


def test_a_chilean_types_an_amount_the_chilean_way(client, alice, owner):
    company(alice, "es_CL", "America/Santiago")
    _debt(client, alice, "CL-1", "CLP", "300000")
    browser = signed_in(client, owner, CHILEAN_BROWSER)
    page = browser.get("/portal/receivables/debt", id="CL-1").text
    assert "Monto en CLP, p. ej. 150.000" in page and "Registrar un pago" in page
    recorded = browser.post("/portal/receivables/debt/payments", {"id": "CL-1", "amount": "150.000", "method": "cash"})
    assert recorded.status_code == 303, recorded.text
    assert Payment.get().monto == 150000  # CLP has no minor unit: 150000 pesos, not 150
    page = browser.get("/portal/receivables/debt", id="CL-1", ok="payment_recorded").text
    assert f"CLP{NBSP}150.000 de CLP{NBSP}300.000" in page and "efectivo" in page


@pytest.mark.parametrize("header, typed, example", [
    ({"Accept-Language": "en-US"}, "150.000", "150,000"),  # 150 pesos and three decimals that CLP has not
    ({"Accept-Language": "es-CL"}, "1.500,5", "150.000"),
    ({"Accept-Language": "es-CL"}, "1,500.00", "150.000"),
    ({"Accept-Language": "es-CL"}, "doce mil", "150.000"),
])
def test_an_amount_that_does_not_read_as_the_locale_writes_is_refused_with_an_example(
        client, alice, owner, header, typed, example):
    company(alice, "es_CL")
    _debt(client, alice, "CL-1", "CLP", "300000")
    browser = signed_in(client, owner, header)
    browser.get("/portal/receivables/debt", id="CL-1")
    refused = browser.post("/portal/receivables/debt/payments", {"id": "CL-1", "amount": typed, "method": "cash"})
    assert refused.status_code == 422 and example in refused.text and "CLP" in refused.text
    assert not Payment.select().exists()


def test_errors_and_refusals_are_said_in_the_readers_language(client, alice, owner):
    browser = signed_in(client, owner, BRAZILIAN_BROWSER)
    missing = browser.get("/portal/nowhere")
    assert missing.status_code == 404 and "Essa página não existe no portal." in missing.text
    foreign = browser.get("/portal/campaigns/cmp_doesnotexist")
    assert foreign.status_code == 404 and "Não há nada aqui, ou pertence a outra empresa." in foreign.text
    # A domain error by its code: the last owner stays an owner.
    browser.get("/portal/users")
    kept = browser.post(f"/portal/users/{owner.public_id}/role", {"role": "viewer"})
    assert kept.status_code == 409 and "Uma empresa precisa ter pelo menos um proprietário." in kept.text
    # A domain error by the field it names.
    invalid = browser.post("/portal/users", {"email": "not-an-email", "role": "viewer"})
    assert invalid.status_code == 422 and "Digite um e-mail válido." in invalid.text
    # A form without its token.
    expired = browser.post("/portal/keys", {"scopes": "credits:read"}, csrf=False)
    assert expired.status_code == 403 and "Formulário expirado" in expired.text
    # A role that may not: named in the language too.
    viewer = signed_in(client, make_user(alice.id, "viewer"), CHILEAN_BROWSER)
    viewer.get("/portal/keys")
    refused = viewer.post("/portal/keys", {"scopes": "credits:read"})
    assert refused.status_code == 403 and "Tu rol (lector) no permite modificar las claves de API." in refused.text


def test_a_status_word_agrees_with_what_it_describes(client, alice, owner):
    """One English word, two Spanish ones: the catalog's context is the kind of thing described."""
    make_account(alice)
    browser = signed_in(client, owner, CHILEAN_BROWSER)
    assert '<span class="status status-active">activa</span>' in browser.get("/portal/keys").text  # una clave
    assert '<span class="status status-active">activo</span>' in browser.get("/portal/numbers").text  # un número


def test_a_tenant_row_made_before_the_languages_reads_english(client, alice, owner):
    assert Tenant.get_by_id(alice.id).locale == "en_US" and PortalUser.get_by_id(owner.id).language is None
    assert lang_of(signed_in(client, owner).get("/portal").text) == "en"


def test_the_formats_docs_portal_md_shows_are_the_ones_written():
    """docs/portal.md's table of formats, row by row, against config/formats.py."""
    rows = re.findall(r"^\| `(\w+)` \| `([^`]+)` \| `([^`]+)` \| `([^`]+)` \| `([^`]+)` \|$",
                      (ROOT / "docs" / "portal.md").read_text(), re.M)
    assert [row[0] for row in rows] == ["es_CL", "es_MX", "pt_BR", "en_US"]
    moment, zone = dt.datetime(2026, 3, 14, 18, 4), ZoneInfo("America/Santiago")
    for name, pesos, reais, dollars, when in rows:
        locale = Locale.parse(name)
        shown = [formats.money(Decimal("150000"), "CLP", locale), formats.money(Decimal("1234.50"), "BRL", locale),
                 formats.money(Decimal("1234.50"), "USD", locale), formats.datetime(moment, locale, zone)]
        assert [text.replace(NBSP, " ").replace("\u202f", " ") for text in shown] == [pesos, reais, dollars, when]
