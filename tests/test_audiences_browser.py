"""The campaign form end to end in Chromium, on a live stack (gunicorn, the huey consumer and the
simulator as processes), on SQLite and on PostgreSQL + Redis.

A viewer with a Spanish browser reads Spanish pages and is offered no form. A developer writes a
template with a variable, a URL button and a quick reply, sees it pending and then approved by the
simulator's review, and a second one rejected with its reason; uploads 3000 rows (5 bad phones,
20 duplicates), reads the bad rows and the cost, schedules the campaign in the company's time
zone; the consumer is restarted meanwhile; the campaign starts at its time and completes, and its
per-recipient CSV lists every recipient. A campaign on the template once the platform paused it is
warned about and refused. The form is photographed for docs/portal.md in es and pt-BR.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from zoneinfo import ZoneInfo

import pytest
import requests

from models.numbers.tables import Template
from models.sending import campaign_reads
from models.sending.tables import Campaign
from models.tenancy import credits
from models.tenancy.tenants import update_tenant
from tests.browser_fixtures import *  # noqa: F403
from tests.browser_fixtures import shoot
from tests.conftest import Persona
from tests.live import wait_until
from tests.live_fixtures import *  # noqa: F403
from tests.portal_fixtures import PASSWORD, make_user
from tests.test_campaigns_live import live_number

pytestmark = [pytest.mark.timing(cores=False), pytest.mark.timeout(420)]  # a start to the second
ON_TIME = 1.0
AHEAD = 40  # seconds between the form's time and now: the pages and a restart fit in it
ZONE = "America/Santiago"


def sign_in(page, base: str, email: str) -> None:
    page.goto(f"{base}/portal")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{base}/portal")


def audience() -> bytes:
    lines = ["telefono,nombre,codigo"]
    lines += [f"+56 9 {20000000 + i},Cliente {i},P{i}" for i in range(2975)]
    lines += [f"12{i},Sin teléfono {i},X{i}" for i in range(5)]
    lines += [f"569{20000000 + i},Otra vez {i},D{i}" for i in range(20)]
    return ("\n".join(lines) + "\n").encode()


def write_template(page, base: str, number_page: str, name: str, body: str) -> None:
    page.goto(base + number_page)
    page.fill("input[name=name]", name)
    page.fill("input[name=language]", "es")
    page.select_option("select[name=category]", "UTILITY")
    page.fill("textarea[name=body]", body)
    page.fill("textarea[name=body_examples]", "Ana")
    page.select_option("select[name=button_type_0]", "URL")
    page.fill("input[name=button_text_0]", "Ver pedido")
    page.fill("input[name=button_value_0]", "https://shop.example/orders/{{1}}")
    page.fill("input[name=button_example_0]", "https://shop.example/orders/A-12")
    page.select_option("select[name=button_type_1]", "QUICK_REPLY")
    page.fill("input[name=button_text_1]", "Gracias")
    page.click("#new-template button[type=submit]")
    page.wait_for_url(re.compile(r".*ok=template_submitted"))


def upload(page, base: str, template_label: str, content: bytes) -> None:
    page.goto(f"{base}/portal/campaigns/new")
    page.select_option("select[name=template]", label=template_label)
    page.set_input_files("input[name=file]", {"name": "clientes.csv", "mimeType": "text/csv", "buffer": content})
    page.click("main button[type=submit]")
    page.wait_for_url(re.compile(r".*/portal/campaigns/new/[A-Za-z0-9_-]+$"))


def test_a_developer_sends_a_scheduled_campaign_from_a_file(live_service, browser):
    base = live_service.api_url
    company = Persona("Tienda Ejemplo", credits=0)
    update_tenant(company.tenant.public_id, timezone=ZONE, locale="es_CL")
    credits.grant(company.id, 5000, reason="Compra de créditos")
    account = live_number(live_service, company, mps=1000, templates=[])
    number_page = f"/portal/numbers/{account.public_id}"

    viewer = make_user(company.id, "viewer", "lectora@tienda.example.com")
    reader = browser.new_context(locale="es-CL").new_page()
    sign_in(reader, base, viewer.email)
    reader.goto(f"{base}/portal/campaigns")
    assert reader.locator("h1").inner_text() == "Campañas"
    assert reader.locator("#new-campaign").count() == 0

    developer = make_user(company.id, "developer", "dev@tienda.example.com")
    context = browser.new_context(locale="es-CL", viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, base, developer.email)
    write_template(page, base, number_page, "pedido_listo", "Hola {{1}}, tu pedido está listo.")
    row = page.locator("#template-pedido_listo-es")
    assert "status-pending" in row.inner_html()
    wait_until(lambda: page.reload() and "status-approved" in row.inner_html(), timeout=30,
               message="the template approved on the number's page")
    write_template(page, base, number_page, "promo_pedido", "Hola {{1}}, tu pedido tiene 20% de descuento.")
    wait_until(lambda: page.reload() and "TAG_CONTENT_MISMATCH" in page.locator(
        "#template-promo_pedido-es").inner_text(), timeout=30, message="the rejection's reason")

    upload(page, base, f"pedido_listo (es) · {account.phone_number}", audience())
    assert page.locator('[data-count="recipients"]').inner_text() == "2.975"
    assert page.locator('[data-count="bad"]').inner_text() == "5"
    assert page.locator('[data-count="duplicates"]').inner_text() == "20"
    assert page.locator('[data-count="cost"]').inner_text() == "2.975 créditos"
    bad = page.locator("#bad-rows tbody tr")
    assert bad.count() == 5 and "no es un número de teléfono" in bad.first.inner_text()
    assert bad.first.locator("td").first.inner_text() == "2977"  # its row in the file, the header being 1
    bubble = page.locator(".bubble").first
    assert "Hola Cliente 0, tu pedido está listo." in bubble.inner_text()
    assert bubble.locator(".wa-button").first.get_attribute("title") == "https://shop.example/orders/P0"
    shoot(page, "campaign-new-es")
    portuguese = browser.new_context(locale="pt-BR", viewport={"width": 1280, "height": 900}).new_page()
    sign_in(portuguese, base, developer.email)
    upload(portuguese, base, f"pedido_listo (es) · {account.phone_number}", audience())
    assert "2.975 créditos" in portuguese.locator('[data-count="cost"]').inner_text()
    assert "não é um número de telefone" in portuguese.locator("#bad-rows").inner_text()
    shoot(portuguese, "campaign-new-pt-BR")

    local = (dt.datetime.now(ZoneInfo(ZONE)) + dt.timedelta(seconds=AHEAD)).replace(microsecond=0, tzinfo=None)
    page.check("input[name=when][value=later]")
    page.fill("input[name=send_at]", local.isoformat())
    page.click("#send button[type=submit]")
    page.wait_for_url(re.compile(r".*/portal/campaigns/cmp_\w+\?ok=campaign_scheduled"))
    campaign_id = page.url.split("/")[-1].split("?")[0]
    campaign = Campaign.get(Campaign.public_id == campaign_id)
    assert campaign.send_at == local.replace(tzinfo=ZoneInfo(ZONE)).astimezone(dt.UTC).replace(tzinfo=None)
    assert (campaign.status, campaign.total_recipients, campaign.source) == ("queued", 2975, "portal")

    live_service.kill("worker")
    live_service.start_worker()

    def completed():
        now = Campaign.get(Campaign.id == campaign.id)
        return now if now.status == "completed" else None

    done = wait_until(completed, timeout=180, interval=0.5, message="the campaign to complete")
    late = (done.started_at - done.send_at).total_seconds()
    assert 0 <= late <= ON_TIME, f"started {late:.3f}s after its send_at"

    # The page, open since the campaign was scheduled, reloads itself once the campaign has ended:
    # its counters card is then no longer live.
    page.locator('section[data-live=""]').wait_for(timeout=30_000)
    assert "2.975 destinatarios" in page.locator("#summary-line").inner_text()
    with page.expect_download() as download:
        page.click("#recipients-csv")
    rows = list(csv.DictReader(io.StringIO(download.value.path().read_text())))
    assert len(rows) == 2975
    assert rows[0]["wa_id"] == "56920000000" and rows[-1]["wa_id"] == "56920002974"
    # The simulator fails a few sends as the platform does: each with its code.
    assert {row["status"] for row in rows} <= {"sent", "delivered", "read", "failed"}
    handed = [row for row in rows if row["status"] != "failed"]
    assert all(row["message_id"] and row["sent_at"].endswith("Z") for row in handed)
    assert all(row["error_code"] for row in rows if row["status"] == "failed")
    counts = campaign_reads.campaign_dict(done)
    assert len(handed) == counts["sent"] + counts["delivered"] + counts["read"]

    requests.post(f"{live_service.sim_url}/_sim/templates/pause", json={"name": "pedido_listo", "language": "es"},
                  timeout=5).raise_for_status()
    wait_until(lambda: Template.get(Template.name == "pedido_listo").status == "paused", timeout=30,
               message="the pause to reach the service")
    upload(page, base, f"pedido_listo (es) · {account.phone_number} · en pausa", audience())
    assert "pausó esta plantilla" in page.locator("#template-warning").inner_text()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#send button[type=submit]")
    assert "no se puede enviar" in page.locator("main").inner_text()
    assert Campaign.select().count() == 1
