"""What the reminders recovered: reminders sent as collection campaigns through the real engine
and the platform simulator, their statuses, and what the debtors did after them, counted once
each and attributed to the last reminder within 7 days; aging buckets and DSO by hand."""

from __future__ import annotations

import datetime as dt
import html
import json
import re
import zlib

import pytest
from typer.testing import CliRunner

from models.clock import utcnow
from models.receivables import debtor_links, debts, promises, snapshots
from models.receivables.collection import send_due_reminders
from models.receivables.inputs import parse_debt
from models.receivables.report import report
from models.receivables.tables import Debt, DebtDispute, DebtorPageOpen, DebtPromise, Payment
from models.sending.statuses import apply_status_updates
from models.sending.tables import Campaign, CampaignRecipient
from models.tenancy.tables import Tenant
from svcctl.main import app as svcctl_app
from tests.campaigns_fixtures import *  # noqa: F403  (sim, app, client: the app pointed at the simulator)
from tests.campaigns_fixtures import make_number, status_update
from tests.portal_fixtures import *  # noqa: F403  (owner: a signed-in company's user)
from tests.portal_fixtures import signed_in
from tests.receivables_fixtures import API, debt_body

DAY = dt.timedelta(days=1)
NOW = utcnow()
TODAY = NOW.date()
# The reminder runs: the first 20 days ago at noon, the second 3 days later.
RUN = dt.datetime.combine(TODAY - 20 * DAY, dt.time(12))


def sync(persona, account, external_id: str, due_dates: list[dt.date], **changes):
    installments = [{"external_id": f"{external_id}-{n}", "numero": n, "monto": 100, "vence": day.isoformat()}
                    for n, day in enumerate(due_dates, start=1)]
    phone = f"5691{zlib.crc32(external_id.encode()) % 10**7:07d}"
    fields = {"auto_send": True, "monto_original": 100 * len(due_dates), "saldo_pendiente": 100 * len(due_dates),
              "cuotas": installments, "deudor": {"nombre": f"Cliente {external_id}", "documento": f"doc-{external_id}",
                                                 "telefono": phone}}
    body = debt_body(account.public_id, external_id, **{**fields, **changes})
    return snapshots.upsert_debt(persona.id, parse_debt(body), today=RUN.date())


def debt(external_id: str) -> Debt:
    return Debt.get(Debt.external_id == external_id)


def messages(campaign_id: str) -> dict[str, CampaignRecipient]:
    campaign = Campaign.get(Campaign.public_id == campaign_id)
    return {row.external_contact_id: row for row in
            CampaignRecipient.select().where(CampaignRecipient.campaign == campaign.id)}


def page_opened(tenant_id: int, external_id: str, at: dt.datetime) -> None:
    """The debtor opens their page through their token, at `at`."""
    token = debtor_links.issue(tenant_id, debt(external_id).debtor_id)
    debtor_links.mark_opened(debtor_links.open_link(token))
    last = DebtorPageOpen.select().order_by(DebtorPageOpen.id.desc()).get()
    DebtorPageOpen.update(opened_at=at).where(DebtorPageOpen.id == last.id).execute()


@pytest.fixture
def scenario(alice, sim):
    """Four debtors reminded in two runs, then what each did (docs/receivables.md's example)."""
    number = make_number(alice.id, sim)
    sync(alice, number, "A", [RUN.date() + 3 * DAY])  # run 1: before; run 2: due
    sync(alice, number, "B", [RUN.date()])  # run 1: due; run 2: after
    sync(alice, number, "C", [RUN.date() - 3 * DAY])  # run 1: after
    sync(alice, number, "E", [RUN.date() - 3 * DAY])  # run 1: after
    # Never reminded (no auto_send): only aging and DSO see them.
    sync(alice, number, "F", [TODAY + 5 * DAY, TODAY - 45 * DAY, TODAY - 75 * DAY, TODAY - 120 * DAY],
         auto_send=False)
    sync(alice, number, "G", [TODAY], auto_send=False, moneda="CLP")
    Debt.update(created_at=NOW - 100 * DAY).where(Debt.external_id == "F").execute()

    first, = send_due_reminders(RUN)
    second, = send_due_reminders(RUN + 3 * DAY)
    one, two = messages(first), messages(second)
    assert sorted(one) == ["A", "B", "C", "E"] and sorted(two) == ["A", "B"]
    # When each went out, and what the platform reported.
    for rows, sent_at in ((one, RUN), (two, RUN + 3 * DAY)):
        CampaignRecipient.update(sent_at=sent_at).where(
            CampaignRecipient.id.in_([row.id for row in rows.values()])).execute()
    apply_status_updates([status_update(number, one[key].wam_id, "delivered") for key in ("A", "B", "C")]
                         + [status_update(number, one["C"].wam_id, "read"),
                            status_update(number, two["A"].wam_id, "read")])

    page_opened(alice.id, "A", RUN + DAY)  # -> run 1's A (before)
    page_opened(alice.id, "C", RUN + DAY)  # -> run 1's C (after), twice: one reminder opened
    page_opened(alice.id, "C", RUN + 2 * DAY)
    made = promises.promise(debt("B"), TODAY + 5 * DAY, today=TODAY)  # -> run 1's B (due)
    DebtPromise.update(created_at=RUN + DAY).where(DebtPromise.id == made.id).execute()
    disputed = promises.dispute(debt("C"), "no la reconozco")  # -> run 1's C (after)
    DebtDispute.update(created_at=RUN + 2 * DAY).where(DebtDispute.id == disputed.id).execute()
    # A pays half a day after run 2's reminder (its last); E 6 days 11 hours after run 1's.
    debts.record_service_payment(alice.id, "A", 50, "cash", paid_at=RUN + 3 * DAY + dt.timedelta(hours=12))
    debts.record_service_payment(alice.id, "E", 100, "cash", paid_at=RUN + 6 * DAY + dt.timedelta(hours=11))
    # B pays 8 days after its last reminder (run 2): no reminder recovered it.
    debts.record_service_payment(alice.id, "B", 100, "cash", paid_at=RUN + 11 * DAY)
    return {"first": first, "second": second, "tenant": Tenant.get_by_id(alice.id)}


def funnel(reminded, delivered, read, opened, promised, disputed, paid, recovered=None):
    return {"reminded": reminded, "delivered": delivered, "read": read, "opened": opened, "promised": promised,
            "disputed": disputed, "paid": paid,
            "recovered": [{"currency": "USD", "amount": recovered}] if recovered else []}


def test_each_event_counts_once_for_the_last_reminder_within_7_days(scenario):
    data = report(scenario["tenant"]).as_dict()
    assert data["attribution_days"] == 7
    assert data["steps"] == [
        {"step": "before", "offset_days": -3, **funnel(1, 1, 0, 1, 0, 0, 0)},
        {"step": "due", "offset_days": 0, **funnel(2, 2, 1, 0, 1, 0, 1, 50.0)},
        {"step": "after", "offset_days": 3, **funnel(3, 1, 1, 1, 0, 1, 1, 100.0)},
    ]
    assert data["campaigns"] == sorted([
        {"campaign_id": scenario["first"], **funnel(4, 3, 1, 2, 1, 1, 1, 100.0)},
        {"campaign_id": scenario["second"], **funnel(2, 1, 1, 0, 0, 0, 1, 50.0)},
    ], key=lambda row: row["campaign_id"])
    # B's payment, 8 days after its last reminder, is in no row: 150 of the 250 paid were recovered.
    assert Payment.select().count() == 3


def test_the_period_is_when_reminders_were_sent(scenario):
    data = report(scenario["tenant"], since=RUN + DAY).as_dict()
    assert [row["campaign_id"] for row in data["campaigns"]] == [scenario["second"]]
    assert [(row["step"], row["reminded"], row["paid"]) for row in data["steps"]] == [("due", 1, 1), ("after", 1, 0)]
    assert report(scenario["tenant"], until=RUN).as_dict()["steps"] == []


def test_aging_and_dso_by_hand(scenario):
    data = report(scenario["tenant"]).as_dict()
    # USD: F-1 not due yet; A's 50 left (17 days) and C's 100 (23 days); F's 45, 75 and 120 days.
    assert data["aging"] == [
        {"currency": "CLP", "current": 100, "days_1_30": 0, "days_31_60": 0, "days_61_90": 0, "days_over_90": 0,
         "total": 100},
        {"currency": "USD", "current": 100.0, "days_1_30": 150.0, "days_31_60": 100.0, "days_61_90": 100.0,
         "days_over_90": 100.0, "total": 550.0},
    ]
    # Receivables 550 USD; credit sales of 90 days: A, B, C, E (F entered 100 days ago) = 400.
    # 550 / 400 x 90 = 123.75 days. CLP: 100 / 100 x 90.
    assert data["dso"] == [
        {"currency": "CLP", "receivables": 100, "credit_sales": 100, "days": 90.0},
        {"currency": "USD", "receivables": 550.0, "credit_sales": 400.0, "days": 123.8},
    ]


def test_the_api_and_the_cli_give_the_same_figures(scenario, client, alice):
    since = (RUN - DAY).replace(tzinfo=dt.UTC).isoformat()
    response = client.simulate_get(f"{API}/reporte", params={"since": since}, headers=alice.headers)
    assert response.status_code == 200, response.text
    from_api = response.json["data"]
    result = CliRunner().invoke(svcctl_app, ["cartera", "report", "--tenant", scenario["tenant"].public_id,
                                             "--since", since, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == from_api
    assert from_api["steps"][1]["recovered"] == [{"currency": "USD", "amount": 50.0}]
    # Without --tenant: every active company, this one among them with the same figures.
    every = CliRunner().invoke(svcctl_app, ["cartera", "report", "--since", since, "--json"])
    assert every.exit_code == 0, every.output
    assert [item for item in json.loads(every.output) if item["tenant"] == from_api["tenant"]] == [from_api]
    table = CliRunner().invoke(svcctl_app, ["cartera", "report", "--tenant", scenario["tenant"].public_id])
    assert table.exit_code == 0 and "days_over_90" in table.output


def test_a_bad_period_is_refused_in_the_envelope(alice, client):
    response = client.simulate_get(f"{API}/reporte", params={"since": "yesterday"}, headers=alice.headers)
    assert response.status_code == 422
    assert response.json["success"] is False and "since" in response.json["error"]["details"]["errors"]
    response = client.simulate_get(f"{API}/reporte", params={"since": "2026-02-01T00:00:00Z",
                                                             "until": "2026-01-01T00:00:00Z"}, headers=alice.headers)
    assert response.status_code == 422 and "until" in response.json["error"]["details"]["errors"]


def test_the_portal_page_draws_the_charts_in_the_readers_language(scenario, client, owner):
    browser = signed_in(client, owner, headers={"Accept-Language": "pt-BR"})
    page = browser.get("/portal/receivables/report")
    assert page.status_code == 200, page.text
    text = html.unescape(page.text)
    # One chart a step and one a currency of the aging, drawn here: no script, nothing fetched.
    assert text.count("<svg") == 3 + 2 and "<script" not in text.split("<main")[-1]
    assert re.findall(r'src="https?:', text) == []
    # The "due" step's funnel: 2 reminded is the longest bar, 1 delivered… half of it.
    due_chart = text.split("<svg")[2]
    assert re.findall(r'<rect x="160" y="3" width="(\d+)"', due_chart) == ["360", "360", "180", "0", "180", "0",
                                                                           "180"]
    assert "Lembrados" in text and "Aging em USD" in text
    assert "US$\u00a0150,00" in text  # the aging's 1-30 days, written as Brazil writes money
    assert "123,8" in text  # DSO


def test_the_portal_refuses_a_bad_date_with_its_page(client, owner):
    browser = signed_in(client, owner)
    assert browser.get("/portal/receivables/report", since="yesterday").status_code == 422
