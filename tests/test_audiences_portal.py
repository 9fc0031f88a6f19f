"""The portal's campaign form (portal/audiences.py) over the portal's real HTTP stack and a
real database: a CSV or XLSX upload, its columns, the rows left out and why, the cost, and the
campaign created through the API's operation; and every way the form is refused."""

from __future__ import annotations

import csv
import io
import re
import secrets

import openpyxl
import pytest

from models.sending.tables import Campaign, CampaignRecipient
from models.tenancy import credits
from models.tenancy.tables import AuditEntry
from tests.campaigns_fixtures import campaign_simulator, make_number, sim  # noqa: F401  (the simulator fixtures)
from tests.conftest import *  # noqa: F403  (fixtures)
from tests.portal_fixtures import PortalClient, make_user, signed_in

TEMPLATE = {
    "name": "order_ready", "language": "es", "status": "approved", "category": "UTILITY",
    "body_text": "Hola {{1}}, tu pedido {{2}} está listo.", "header_type": "text", "variable_count": 2,
    "variables": ["{{1}}", "{{2}}"],
    "components": [
        {"type": "HEADER", "format": "TEXT", "text": "Tu pedido"},
        {"type": "BODY", "text": "Hola {{1}}, tu pedido {{2}} está listo."},
        {"type": "FOOTER", "text": "Tienda Ejemplo"},
        {"type": "BUTTONS", "buttons": [
            {"type": "URL", "text": "Ver pedido", "url": "https://shop.example/orders/{{1}}"},
            {"type": "QUICK_REPLY", "text": "Gracias"}]},
    ],
}


def audience_csv(good: int, bad_phones: int = 0, missing: int = 0, duplicates: int = 0) -> bytes:
    lines = ["telefono,nombre,pedido,codigo"]
    lines += [f"+56 9 {10000000 + i},Ana {i},A-{i},c{i}" for i in range(good)]
    lines += [f"12{i},Bad {i},B-{i},b{i}" for i in range(bad_phones)]
    lines += [f"5691{i:07d},,M-{i},m{i}" for i in range(missing)]
    lines += [f"56 9 {10000000 + i},Again {i},D-{i},d{i}" for i in range(duplicates)]
    return ("\n".join(lines) + "\n").encode()


def multipart(fields: list[tuple[str, str]], file: tuple[str, bytes] | None) -> tuple[bytes, str]:
    boundary = secrets.token_hex(12)
    body = io.BytesIO()
    for name, value in fields:
        body.write(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    if file is not None:
        body.write(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{file[0]}"\r\n'
                   f'Content-Type: application/octet-stream\r\n\r\n'.encode() + file[1] + b"\r\n")
    body.write(f"--{boundary}--\r\n".encode())
    return body.getvalue(), f"multipart/form-data; boundary={boundary}"


def upload(browser: PortalClient, template_id, filename: str, content: bytes, csrf: str | None = None):
    body, content_type = multipart([("csrf_token", browser.csrf if csrf is None else csrf),
                                    ("template", str(template_id))], (filename, content))
    return browser._keep(browser.client.simulate_post(
        "/portal/campaigns/new", body=body, cookies=browser.cookies, remote_addr=browser.remote_addr,
        headers={**browser.headers, "Content-Type": content_type}))


@pytest.fixture
def wizard(client, alice, sim):  # noqa: F811  (the fixture)
    account = make_number(alice.id, sim, templates=[TEMPLATE])
    template_id = account.templates[0].id
    browser = signed_in(client, make_user(alice.id, "developer"), headers={"Accept-Language": "es"})
    browser.get("/portal/campaigns/new")
    return browser, template_id, account


def test_a_csv_becomes_a_campaign_with_bad_rows_named_and_duplicates_dropped(wizard, alice):
    browser, template_id, account = wizard
    result = upload(browser, template_id, "clientes.csv", audience_csv(40, bad_phones=2, missing=1, duplicates=3))
    assert result.status_code == 303, result.text
    page = browser.get(result.headers["Location"])
    text = page.text
    assert page.status_code == 200
    assert re.search(r'data-count="recipients">40<', text) and re.search(r'data-count="bad">3<', text)
    assert re.search(r'data-count="duplicates">3<', text) and "40 créditos" in text
    assert "no es un número de teléfono" in text and "sin valor en nombre" in text
    assert "Hola Ana 0, tu pedido A-0 está listo." in text  # the guessed columns, filled in
    assert "Tienda Ejemplo" in text and "https://shop.example/orders/c0" in text
    # The mapping is a GET: the suffix from another column changes only the page.
    remapped = browser.get(page.headers.get("Location") or f"/portal/campaigns/new/{draft_of(result)}",
                           phone="0", var_1="2", var_2="1", button_0="2")
    assert "Hola A-0, tu pedido Ana 0 está listo." in remapped.text
    sent = browser.post(f"/portal/campaigns/new/{draft_of(result)}/send",
                        {"phone": "0", "var_1": "1", "var_2": "2", "button_0": "3", "when": "now", "name": "Junio"})
    assert sent.status_code == 303, sent.text
    campaign = Campaign.get(Campaign.public_id == sent.headers["Location"].split("/")[-1].split("?")[0])
    assert (campaign.source, campaign.total_recipients, campaign.external_reference) == ("portal", 40, "Junio")
    first = CampaignRecipient.get((CampaignRecipient.campaign == campaign.id) & (CampaignRecipient.position == 1))
    assert (first.wa_id, first.vars, first.buttons) == ("56910000000", ["Ana 0", "A-0"],
                                                         [{"index": 0, "type": "url", "text": "c0"}])
    assert AuditEntry.get(AuditEntry.action == "campaign.created").target == campaign.public_id
    # The same form sent again leads to the same campaign.
    again = browser.post(f"/portal/campaigns/new/{draft_of(result)}/send",
                         {"phone": "0", "var_1": "1", "var_2": "2", "button_0": "3", "when": "now"})
    assert again.headers["Location"].startswith(f"/portal/campaigns/{campaign.public_id}")
    assert Campaign.select().count() == 1


def draft_of(result) -> str:
    return result.headers["Location"].rsplit("/", 1)[-1]


def test_an_xlsx_is_read_like_a_csv(wizard):
    browser, template_id, _account = wizard
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["phone", "name", "order", "code"])
    for i in range(10):
        sheet.append([56910000000 + i, f"Ana {i}", f"A-{i}", f"c{i}"])
    buffer = io.BytesIO()
    book.save(buffer)
    result = upload(browser, template_id, "clientes.xlsx", buffer.getvalue())
    assert result.status_code == 303, result.text
    page = browser.get(result.headers["Location"]).text
    assert re.search(r'data-count="recipients">10<', page) and "+56910000000" in page


@pytest.mark.parametrize(("filename", "content", "said"), [
    ("clientes.txt", b"telefono\n56910000000\n", "Sube un archivo CSV"),
    ("clientes.csv", b"", "no tiene filas"),
    ("clientes.csv", b"telefono,nombre\n", "no tiene filas"),
    ("clientes.csv", audience_csv(5001), "filas además de su encabezado: divídelo"),
    ("clientes.xlsx", b"not a zip", "no se pudo leer"),
    ("clientes.csv", "telefono\n5691\xe9\n".encode("latin-1"), "no se pudo leer"),
])
def test_a_file_that_cannot_be_an_audience_is_refused_with_its_reason(wizard, filename, content, said):
    browser, template_id, _account = wizard
    result = upload(browser, template_id, filename, content)
    assert result.status_code == 422
    assert said in result.text
    assert not list(Campaign.select())


def test_a_missing_mapping_a_foreign_draft_and_a_missing_csrf_token_are_refused(wizard, client, charlie, alice):
    browser, template_id, _account = wizard
    refused = upload(browser, template_id, "clientes.csv", audience_csv(3), csrf="wrong")
    assert refused.status_code == 403
    result = upload(browser, template_id, "clientes.csv", audience_csv(3))
    draft = draft_of(result)
    missing = browser.post(f"/portal/campaigns/new/{draft}/send", {"phone": "0", "var_1": "1", "when": "now"})
    assert missing.status_code == 422 and "Elige una columna" in missing.text
    no_token = browser.post(f"/portal/campaigns/new/{draft}/send",
                            {"phone": "0", "var_1": "1", "var_2": "2", "button_0": "3"}, csrf=False)
    assert no_token.status_code == 403
    outsider = signed_in(client, make_user(charlie.id, "owner"))
    assert outsider.get(f"/portal/campaigns/new/{draft}").status_code == 404
    colleague = signed_in(client, make_user(alice.id, "owner"))
    assert colleague.get(f"/portal/campaigns/new/{draft}").status_code == 404
    assert outsider.get("/portal/campaigns/new/..%2F..%2Fsecret").status_code == 404
    assert not list(Campaign.select())


def test_a_viewer_cannot_upload(client, alice):
    account = make_number(alice.id, templates=[TEMPLATE])
    viewer = signed_in(client, make_user(alice.id, "viewer"))
    viewer.get("/portal/campaigns/new")
    result = upload(viewer, account.templates[0].id, "clientes.csv", audience_csv(3))
    assert result.status_code == 403


def test_a_paused_template_is_warned_about_and_refused(wizard):
    browser, template_id, account = wizard
    result = upload(browser, template_id, "clientes.csv", audience_csv(3))
    from models.numbers.tables import Template
    Template.update(status="paused", status_detail="FIRST_PAUSE").where(Template.id == template_id).execute()
    page = browser.get(result.headers["Location"]).text
    assert 'id="template-warning"' in page and "pausó esta plantilla" in page, page
    refused = browser.post(f"/portal/campaigns/new/{draft_of(result)}/send",
                           {"phone": "0", "var_1": "1", "var_2": "2", "button_0": "3", "when": "now"})
    assert refused.status_code == 422
    assert not list(Campaign.select())


def test_a_time_of_the_company_is_sent_at_that_time_in_utc(wizard, alice):
    browser, template_id, _account = wizard
    from models.tenancy.tables import Tenant
    Tenant.update(timezone="America/Santiago").where(Tenant.id == alice.id).execute()
    result = upload(browser, template_id, "clientes.csv", audience_csv(3))
    draft = draft_of(result)
    fields = {"phone": "0", "var_1": "1", "var_2": "2", "button_0": "3", "when": "later"}
    past = browser.post(f"/portal/campaigns/new/{draft}/send", {**fields, "send_at": "2020-01-01T10:00"})
    assert past.status_code == 422 and "en el futuro" in past.text
    import datetime as dt
    from zoneinfo import ZoneInfo
    local = (dt.datetime.now(ZoneInfo("America/Santiago")) + dt.timedelta(days=2)).replace(
        hour=10, minute=30, second=0, microsecond=0, tzinfo=None)
    sent = browser.post(f"/portal/campaigns/new/{draft}/send", {**fields, "send_at": local.isoformat()})
    assert sent.status_code == 303, sent.text
    campaign = Campaign.get()
    expected = local.replace(tzinfo=ZoneInfo("America/Santiago")).astimezone(dt.UTC).replace(tzinfo=None)
    assert (campaign.status, campaign.send_at) == ("queued", expected)


def test_the_recipients_csv_of_the_api_and_the_portal_list_every_recipient(wizard, client, alice, charlie):
    browser, template_id, _account = wizard
    credits.grant(alice.id, 1000)  # past one page of the export (EXPORT_PAGE)
    result = upload(browser, template_id, "clientes.csv", audience_csv(1203))
    sent = browser.post(f"/portal/campaigns/new/{draft_of(result)}/send",
                        {"phone": "0", "var_1": "1", "var_2": "2", "button_0": "3", "when": "now"})
    assert sent.status_code == 303, sent.text
    campaign_id = sent.headers["Location"].split("/")[-1].split("?")[0]
    from_api = client.simulate_get(f"/api/v1/campaigns/{campaign_id}/recipients.csv", headers=alice.headers)
    assert from_api.status_code == 200 and from_api.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(from_api.text)))
    assert len(rows) == 1203 and rows[0]["wa_id"] == "56910000000" and rows[-1]["wa_id"] == "56910001202"
    assert {row["status"] for row in rows} <= {"pending", "queued", "sent", "delivered", "read", "failed"}
    from_portal = browser.get(f"/portal/campaigns/{campaign_id}/recipients.csv")
    assert [row["wa_id"] for row in csv.DictReader(io.StringIO(from_portal.text))] == [row["wa_id"] for row in rows]
    page = browser.get(f"/portal/campaigns/{campaign_id}").text
    assert re.search(r'id="summary-line">1[.,\u00a0\u202f]?203 destinatarios', page)
    assert client.simulate_get(f"/api/v1/campaigns/{campaign_id}/recipients.csv",
                               headers=charlie.headers).status_code == 404
