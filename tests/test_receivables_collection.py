"""Collection: which reminders are due (stages, sending window, time zones) and sending them
as `payment_reminder` campaigns through the real campaign engine and the platform simulator."""

from __future__ import annotations

import datetime as dt
import zlib

import pytest

from models.receivables import debts, snapshots
from models.receivables.collection import due_reminders, in_sending_window, send_due_reminders, stage_for
from models.receivables.inputs import parse_debt
from models.receivables.money import format_amount
from models.receivables.tables import Reminder
from models.sending.campaign_counters import campaign_credits
from models.sending.tables import Campaign, CampaignRecipient
from models.tenancy import credits
from models.tenancy.tables import Tenant
from tests.campaigns_fixtures import *  # noqa: F403  (sim, app, client: the app pointed at the simulator)
from tests.campaigns_fixtures import make_number
from tests.receivables_fixtures import debt_body, sqlite_only_mark

# 2031-03-10 15:00 UTC is 12:00 in Santiago (UTC-3 in March) and 15:00 in UTC.
NOON = dt.datetime(2031, 3, 10, 15, 0)
DAY = dt.timedelta(days=1)


@pytest.mark.parametrize("days_from_due,stage", [(-5, None), (-4, None), (-3, "before"), (-1, "before"),
                                                  (0, "due"), (2, "due"), (3, "after"), (40, "after")])
def test_the_stage_follows_the_due_date(days_from_due, stage):
    due_date = dt.date(2031, 3, 10)
    assert stage_for(due_date, due_date + dt.timedelta(days=days_from_due)) == stage


@pytest.mark.parametrize("now,start,end,inside", [
    ("08:00", (8, 0), (20, 0), True), ("07:59", (8, 0), (20, 0), False), ("19:59", (8, 0), (20, 0), True),
    ("20:00", (8, 0), (20, 0), False), ("23:30", (22, 0), (6, 0), True), ("05:59", (22, 0), (6, 0), True),
    ("12:00", (22, 0), (6, 0), False), ("03:00", (0, 0), (0, 0), True), ("23:59", (9, 0), (24, 0), True),
])
def test_the_sending_window(now, start, end, inside):
    assert in_sending_window(dt.time.fromisoformat(now), start, end) is inside


def test_the_balance_is_written_for_people():
    assert format_amount(30000, "USD") == "USD 300,00"
    assert format_amount(123456789, "USD") == "USD 1.234.567,89"
    assert format_amount(150000, "CLP") == "CLP 150.000"
    assert format_amount(1234, "KWD") == "KWD 1,234"


@pytest.fixture
def number(sim, alice):
    return make_number(alice.id, sim)


def sync(persona, account, external_id: str, due_dates: list[dt.date], *, phone: str | None = None, **changes):
    installments = [{"external_id": f"{external_id}-{n}", "numero": n, "monto": 100, "vence": day.isoformat()}
                    for n, day in enumerate(due_dates, start=1)]
    phone = phone or f"5691{zlib.crc32(external_id.encode()) % 10**7:07d}"
    fields = {"auto_send": True, "monto_original": 100 * len(due_dates), "saldo_pendiente": 100 * len(due_dates),
              "cuotas": installments, "deudor": {"nombre": f"Cliente {external_id}", "documento": f"doc-{external_id}",
                                                 "telefono": phone}}
    body = debt_body(account.public_id, external_id, **{**fields, **changes})
    return snapshots.upsert_debt(persona.id, parse_debt(body), today=(NOON - 10 * DAY).date())


def due(now=NOON):
    return sorted((item.debt_external_id, item.installment_external_id, item.stage) for item in due_reminders(now))


class TestWhatIsDue:
    def test_each_installment_in_its_current_stage(self, alice, number):
        today = NOON.date()
        sync(alice, number, "A", [today + 3 * DAY, today + 4 * DAY])
        sync(alice, number, "B", [today])
        sync(alice, number, "C", [today - 3 * DAY])
        sync(alice, number, "D", [today - 60 * DAY])
        assert due() == [("A", "A-1", "before"), ("B", "B-1", "due"), ("C", "C-1", "after"), ("D", "D-1", "after")]

    def test_only_open_auto_send_debts_with_a_phone(self, alice, number):
        today = NOON.date()
        sync(alice, number, "manual", [today], auto_send=False)
        sync(alice, number, "paid", [today], saldo_pendiente=0)
        body = debt_body(number.public_id, "nophone", auto_send=True, deudor={"nombre": "X", "documento": "x-1"},
                         cuotas=[{"external_id": "n1", "numero": 1, "monto": 100, "vence": today.isoformat()}])
        snapshots.upsert_debt(alice.id, parse_debt(body))
        sync(alice, number, "resolved", [today])
        debts.resolve_debt(alice.id, "resolved", "cancelled")
        sync(alice, number, "settled-installment", [today, today + DAY])
        debts.record_service_payment(alice.id, "settled-installment", 100, "cash")
        assert due() == [("settled-installment", "settled-installment-2", "before")]

    @sqlite_only_mark
    def test_nothing_outside_the_sending_window_of_the_tenants_time_zone(self, alice, number):
        Tenant.update(timezone="America/Santiago").where(Tenant.id == alice.id).execute()
        sync(alice, number, "A", [NOON.date()])
        assert due(NOON.replace(hour=10, minute=59)) == []  # 07:59 in Santiago
        assert due(NOON.replace(hour=11, minute=0)) == [("A", "A-1", "due")]  # 08:00 there
        assert due(NOON.replace(hour=23, minute=0)) == []  # 20:00 there

    @sqlite_only_mark
    def test_the_day_is_the_tenants(self, alice, number):
        # 02:00 UTC on the 10th is still the 9th in Santiago (23:00): the installment is not yet due.
        Tenant.update(timezone="America/Santiago").where(Tenant.id == alice.id).execute()
        sync(alice, number, "A", [NOON.date()])
        assert due(dt.datetime(2031, 3, 11, 1, 0)) == []  # 22:00 on the 10th: outside the window
        assert due(dt.datetime(2031, 3, 10, 12, 0)) == [("A", "A-1", "due")]


class TestSending:
    def test_reminders_go_out_once_as_a_collection_campaign(self, alice, number, sim):
        today = NOON.date()
        sync(alice, number, "A", [today], phone="56911110001")
        sync(alice, number, "B", [today + 2 * DAY, today + 4 * DAY], phone="56911110002")
        created = send_due_reminders(NOON)
        assert len(created) == 1
        campaign = Campaign.get(Campaign.public_id == created[0])
        assert (campaign.source, campaign.template_name, campaign.template_language) == (
            "collection", "payment_reminder", "es")
        recipients = {r.external_contact_id: r for r in CampaignRecipient.select().where(
            CampaignRecipient.campaign == campaign.id)}
        assert recipients["A"].vars == ["Cliente A", "USD 100,00"]
        assert recipients["B"].vars == ["Cliente B", "USD 200,00"]
        assert recipients["B"].payload == {"deuda_external_id": "B", "recordatorios": [
            {"cuota_external_id": "B-1", "stage": "before"}]}
        # The simulator lives for the session: only this number's sends are this test's.
        sent = [item for item in sim.sent() if item["phone_number_id"] == number.phone_id]
        assert {item["template"] for item in sent} == {"payment_reminder"}
        assert sorted(item["to"] for item in sent) == ["56911110001", "56911110002"]
        assert credits.wallet_of(alice.id).balance == 998
        # The same run again, or later the same day: nothing new.
        assert send_due_reminders(NOON) == []
        assert send_due_reminders(NOON + dt.timedelta(hours=2)) == []
        # Two days later A is still `due` (sent), B-1 is `due` and B-2 `before`: one message for B.
        later = send_due_reminders(NOON + 2 * DAY)
        assert len(later) == 1
        assert [r.external_contact_id for r in CampaignRecipient.select().where(
            CampaignRecipient.campaign == Campaign.get(Campaign.public_id == later[0]).id)] == ["B"]
        keys = sorted((r.installment.external_id, r.stage) for r in Reminder.select())
        assert keys == [("A-1", "due"), ("B-1", "before"), ("B-1", "due"), ("B-2", "before")]

    @sqlite_only_mark
    def test_a_refused_campaign_leaves_the_reminders_for_the_next_run(self, alice, number):
        sync(alice, number, "A", [NOON.date()])
        number.status = "paused"
        number.save()
        assert send_due_reminders(NOON) == []
        assert Reminder.select().count() == 0
        number.status = "active"
        number.save()
        assert len(send_due_reminders(NOON)) == 1

    def test_paying_or_resolving_withdraws_reminders_not_yet_sent(self, alice, number, immediate_queue):
        today = NOON.date()
        sync(alice, number, "A", [today], phone="56911110001")
        sync(alice, number, "B", [today], phone="56911110002")
        sync(alice, number, "C", [today], phone="56911110003")
        immediate_queue.immediate = False  # the dispatch is queued, not run: the messages wait
        try:
            [campaign_id] = send_due_reminders(NOON)
        finally:
            immediate_queue.immediate = True
        assert credits.wallet_of(alice.id).reserved == 3
        debts.resolve_debt(alice.id, "A", "written_off")
        debts.record_service_payment(alice.id, "B", 100, "gateway")
        campaign = Campaign.get(Campaign.public_id == campaign_id)
        statuses = {r.external_contact_id: r.status for r in CampaignRecipient.select().where(
            CampaignRecipient.campaign == campaign.id)}
        assert statuses == {"A": "cancelled", "B": "cancelled", "C": "pending"}
        assert credits.wallet_of(alice.id).reserved == 1
        assert {r.debt.external_id: r.status for r in Reminder.select().where(Reminder.stage == "due")} == {
            "A": "cancelled", "B": "cancelled", "C": "queued"}
        assert campaign_credits(campaign).released == 2
