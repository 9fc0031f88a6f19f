"""The receivables' reads written as statements built once answer what the peewee serializers
they replaced answer, in every state a debt, a payment feed or a reply feed goes through, on
both engines."""

from __future__ import annotations

import datetime as dt

import pytest
from peewee import JOIN

from models.clock import utcnow
from models.ids import new_id
from models.receivables import debt_reads, debts, export, payments, promises, responses
from models.receivables.money import amount_json, to_minor
from models.receivables.tables import Debt, Installment, PaymentLink, PaymentReversal
from models.store.db import atomic, connection
from tests.receivables_fixtures import debt_body, get_debt, make_account, payment_body, post


@pytest.fixture
def account(alice):
    return make_account(alice)


def links_of(debt: Debt) -> list[dict]:
    """A debt's payment links as the read built them through peewee (the reference)."""
    rows = (PaymentLink.select(PaymentLink, Installment.external_id.alias("installment_external_id"))
            .join(Installment, join_type=JOIN.LEFT_OUTER, on=(PaymentLink.installment == Installment.id))
            .where((PaymentLink.tenant == debt.tenant_id) & (PaymentLink.debt == debt.id))
            .order_by(PaymentLink.id.desc()).objects())
    return [payments.link_dict(link, link.installment_external_id) for link in rows]


def export_json(row: dict) -> dict:
    """An export row as the API showed it through peewee (the reference): amounts as JSON numbers."""
    currency = row["moneda"]
    return {**row, **{name: amount_json(to_minor(row[name], currency), currency)
                      for name in ("monto", "saldo_pendiente", "monto_sin_asignar")}}


def old_debt_read(tenant_id: int, external_id: str) -> dict:
    """The debt as GET /cartera/deudas/{id} answered it before `debt_reads`."""
    debt = debts.get_debt(tenant_id, external_id)
    return {**debts.debt_detail(debt), "links_de_pago": links_of(debt)}


def add_link(debt_external_id: str, tenant_id: int, *, installment: str | None = None, status: str = "active",
             expires_in: dt.timedelta = dt.timedelta(hours=72), amount: int = 2500) -> None:
    debt = Debt.get((Debt.tenant == tenant_id) & (Debt.external_id == debt_external_id))
    installment_id = None if installment is None else Installment.get(
        (Installment.debt == debt.id) & (Installment.external_id == installment)).id
    now = utcnow()
    PaymentLink.create(public_id=new_id("plk_"), tenant=tenant_id, debt=debt.id, installment=installment_id,
                       amount=amount, currency=debt.moneda, origin="api", checkout_url="https://pay.example/c",
                       status=status, expires_at=now + expires_in, paid_at=now if status == "paid" else None)


def test_a_debt_reads_as_before_in_every_state(client, alice, charlie, account):
    assert post(client, alice, "/deudas", debt_body(account.public_id)).status_code == 201
    assert post(client, alice, "/deudas", debt_body(account.public_id, "D-2", moneda="CLP", monto_original=3000,
                                                    saldo_pendiente=3000, referencia=None, cuotas=[
                                                        {"external_id": "C-1", "numero": 1, "monto": 3000,
                                                         "vence": "2020-01-10", "estado": "pending"}])
                ).status_code == 201
    states = []

    def check(external_id: str = "D-1") -> None:
        with connection():
            expected = old_debt_read(alice.id, external_id)
            assert debt_reads.read_debt(alice.id, external_id) == expected
        answered = get_debt(client, alice, external_id)
        assert answered.status_code == 200 and answered.json["data"]["deuda"] == expected
        states.append(expected)

    check()  # new: no payment, no link
    check("D-2")  # no decimals, overdue, no reference
    assert post(client, alice, "/pagos", payment_body("P-1", monto=150)).status_code == 201  # over two installments
    check()
    assert post(client, alice, "/pagos", payment_body("P-2", monto=25, pagado_en="2030-11-01T10:00:00Z")
                ).status_code == 201  # paid earlier: listed first
    with connection():
        debts.record_service_payment(alice.id, "D-1", "10.50", "transfer")
        add_link("D-1", alice.id)
        add_link("D-1", alice.id, installment="D-1-3", amount=11450)
        add_link("D-1", alice.id, expires_in=dt.timedelta(hours=-1))  # expired
        add_link("D-1", alice.id, status="paid")
    check()
    assert post(client, alice, "/deudas/D-1/resolver", {"status": "written_off", "reason": "bad debt"}
                ).status_code == 200
    check()
    assert len({repr(state) for state in states}) == len(states)
    assert [link["status"] for link in states[-1]["links_de_pago"]] == ["paid", "expired", "active", "active"]


def test_another_companys_debt_is_not_found(client, alice, charlie, account):
    assert post(client, alice, "/deudas", debt_body(account.public_id)).status_code == 201
    answered = get_debt(client, charlie, "D-1")
    assert answered.status_code == 404
    assert answered.json["error"]["code"] == "debt_not_found"
    assert answered.json["error"]["details"] == {"external_id": "D-1"}


def old_feed_page(rows: list[dict], limit: int, cursor: int) -> dict:
    page = rows[:limit]
    return {"success": True, "data": page,
            "meta": {"next_cursor": page[-1]["cursor"] if page else cursor, "has_more": len(rows) > len(page)}}


def feed_pages_read_as_before(client, persona, path: str, old_rows) -> int:
    """Every page of the feed at `path`, at several sizes and from several cursors, with and
    without `since`, is what the old rows give; returns how many items the whole feed holds."""
    whole = list(old_rows(persona.id, since=None, after=0, limit=None))
    moments = [None, dt.datetime(2000, 1, 1, tzinfo=dt.UTC), dt.datetime(2100, 1, 1, tzinfo=dt.UTC)]
    for since in moments:
        for limit in (1, 2, 5, 500):
            for cursor in (0, 1, 3, 10**6):
                params = {"limit": limit, "cursor": cursor, **({"since": since.isoformat()} if since else {})}
                answered = client.simulate_get(f"/api/v1/cartera/{path}", params=params, headers=persona.headers)
                assert answered.status_code == 200, answered.text
                with connection():
                    rows = [*old_rows(persona.id, since=since, after=cursor, limit=limit + 1)]
                assert answered.json == old_feed_page(rows, limit, cursor), (path, params)
    return len(whole)


def old_payment_rows(tenant_id, *, since, after, limit):
    return [export_json(row) for row in export.export_rows(tenant_id, since=since, after=after, limit=limit)]


def test_the_payments_feed_reads_as_before(client, alice, charlie, account):
    assert feed_pages_read_as_before(client, alice, "pagos", old_payment_rows) == 0  # empty
    for external_id in ("D-1", "D-2"):
        assert post(client, alice, "/deudas", debt_body(account.public_id, external_id)).status_code == 201
    with connection():
        first = debts.record_service_payment(alice.id, "D-1", "150", "transfer")
        debts.record_service_payment(alice.id, "D-2", "400.25", "cash")  # more than owed: some unassigned
        with atomic():
            reversal = PaymentReversal.create(
                public_id=new_id("brev_"), tenant=alice.id, payment=first.id, kind="refund", amount=5025,
                currency="USD", unassigned=25, balance_after=20025, reversed_at=utcnow())
            export.export_reversal(reversal)
        debts.record_service_payment(alice.id, "D-1", "1", "transfer")
    total = feed_pages_read_as_before(client, alice, "pagos", old_payment_rows)
    assert total == 4
    kinds = [item["tipo"] for item in old_payment_rows(alice.id, since=None, after=0, limit=None)]
    assert kinds == ["pago", "pago", "reverso", "pago"]
    assert client.simulate_get("/api/v1/cartera/pagos", headers=charlie.headers).json["data"] == []


def old_response_rows(tenant_id, *, since, after, limit):
    return list(responses.response_rows(tenant_id, since=since, after=after, limit=limit))


def test_the_responses_feed_reads_as_before(client, alice, charlie, account):
    assert feed_pages_read_as_before(client, alice, "respuestas", old_response_rows) == 0
    for external_id in ("D-1", "D-2"):
        assert post(client, alice, "/deudas", debt_body(account.public_id, external_id)).status_code == 201
    with connection():
        first, second = (Debt.get((Debt.tenant == alice.id) & (Debt.external_id == name)) for name in ("D-1", "D-2"))
        today = debts.tenant_today(alice.id)
        promises.promise(first, today + dt.timedelta(days=3))
        promises.dispute(second, "I paid this in cash", origin="whatsapp")
        promises.promise(first, today + dt.timedelta(days=5), origin="whatsapp")  # replaces the first
        with atomic():
            responses.export_response(second, "whatsapp")  # a payment the debtor says they made
    assert feed_pages_read_as_before(client, alice, "respuestas", old_response_rows) == 4
    kinds = [item["tipo"] for item in old_response_rows(alice.id, since=None, after=0, limit=None)]
    assert kinds == ["promesa", "disputa", "promesa", "pago_informado"]
    assert client.simulate_get("/api/v1/cartera/respuestas", headers=charlie.headers).json["data"] == []


def test_the_report_reads_as_before(client, alice, charlie, account):
    from models.receivables.report import report
    from models.tenancy.tables import Tenant

    def check() -> dict:
        with connection():
            expected = report(Tenant.get_by_id(alice.id)).as_dict()
        answered = client.simulate_get("/api/v1/cartera/reporte", headers=alice.headers)
        assert answered.status_code == 200 and answered.json["data"] == expected
        return expected

    assert check()["aging"] == []
    assert post(client, alice, "/deudas", debt_body(account.public_id)).status_code == 201
    assert post(client, alice, "/deudas", debt_body(account.public_id, "D-2", cuotas=[
        {"external_id": "C-1", "numero": 1, "monto": 300, "vence": "2020-01-10", "estado": "pending"}])
                ).status_code == 201
    with connection():
        debts.record_service_payment(alice.id, "D-1", "20", "transfer")
    assert {row["currency"] for row in check()["aging"]} == {"USD"}
    Tenant.update(timezone="Pacific/Kiritimati").where(Tenant.id == alice.id).execute()  # a day ahead of UTC
    assert check()["tenant"] == Tenant.get_by_id(alice.id).public_id
