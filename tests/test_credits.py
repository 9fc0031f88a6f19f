"""Credits: the wallet operations and GET /credits/balance, /credits/ledger."""

from __future__ import annotations

import threading

import pytest

from models.errors import InsufficientCredits, Invalid, WalletPaused
from models.store.db import connection
from models.tenancy import credits
from models.tenancy.tables import LedgerEntry, Wallet


def replay_ledger(tenant_id: int) -> tuple[int, int]:
    """Rebuild (balance, reserved) from the ledger alone, in order."""
    balance = reserved = 0
    for entry in LedgerEntry.select().where(LedgerEntry.tenant == tenant_id).order_by(LedgerEntry.id):
        if entry.type in credits.BALANCE_TYPES:
            balance += entry.amount
        if entry.type == "reserve" or entry.type == "release":
            reserved -= entry.amount
        elif entry.type == "consume":
            reserved += entry.amount
        assert (entry.balance_after, entry.reserved_after) == (balance, reserved)
    return balance, reserved


def test_the_two_phases_keep_the_ledger_and_the_wallet_in_step(alice):
    credits.reserve(alice.id, 10)
    credits.consume(alice.id, 6)
    credits.release(alice.id, 4)
    credits.refund(alice.id, 1)
    credits.adjust(alice.id, -5, reason="correction")
    wallet = credits.wallet_of(alice.id)
    assert (wallet.balance, wallet.reserved, wallet.available) == (990, 0, 990)
    assert replay_ledger(alice.id) == (990, 0)


def test_it_refuses_to_reserve_more_than_is_available(alice):
    credits.reserve(alice.id, 600)
    with pytest.raises(InsufficientCredits) as raised:
        credits.reserve(alice.id, 401)
    assert raised.value.details == {"required": 401, "available": 400}
    assert credits.wallet_of(alice.id).reserved == 600


def test_a_paused_wallet_refuses_reservations(alice):
    credits.set_status(alice.id, "paused")
    with pytest.raises(WalletPaused):
        credits.reserve(alice.id, 1)


def test_an_adjustment_cannot_take_reserved_credits(alice):
    credits.reserve(alice.id, 900)
    with pytest.raises(InsufficientCredits):
        credits.adjust(alice.id, -101)
    credits.adjust(alice.id, -100)
    assert credits.wallet_of(alice.id).available == 0


def test_it_refuses_non_positive_amounts(alice):
    for amount in (0, -3):
        with pytest.raises(Invalid):
            credits.grant(alice.id, amount)
    with pytest.raises(Invalid):
        credits.consume(alice.id, 5)  # nothing reserved


def test_twenty_threads_reserving_never_overspend(alice, storage):
    # 1000 credits; 20 threads each try 10 reservations of 7: 1400 wanted, at most 994 granted.
    outcomes: list[str] = []
    lock = threading.Lock()

    def reserve_many():
        with connection():
            for _ in range(10):
                try:
                    credits.reserve(alice.id, 7)
                    result = "ok"
                except InsufficientCredits:
                    result = "refused"
                with lock:
                    outcomes.append(result)

    threads = [threading.Thread(target=reserve_many) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    wallet = Wallet.get(Wallet.tenant == alice.id)
    granted = outcomes.count("ok")
    assert granted == 1000 // 7
    assert wallet.reserved == granted * 7
    assert wallet.available >= 0
    assert replay_ledger(alice.id) == (wallet.balance, wallet.reserved)
    assert sum(e.amount for e in LedgerEntry.select().where(
        (LedgerEntry.tenant == alice.id) & LedgerEntry.type.in_(credits.BALANCE_TYPES))) == wallet.balance
    # Written concurrently, the entries still take positions 1..n in the order they were written,
    # and the wallet counts them: the ledger's pages walk them all, newest first.
    entries = list(credits.ledger(alice.id))
    assert [e.position for e in entries] == list(range(len(entries), 0, -1)) == list(
        range(wallet.ledger_entries, 0, -1))
    walked = [e.id for page in range(1, len(entries) // 40 + 2) for e in credits.ledger_page(alice.id, page, 40)[0]]
    assert walked == [e.id for e in entries]


def test_the_balance_endpoint_shows_the_wallet(client, alice):
    credits.reserve(alice.id, 30)
    response = client.simulate_get("/api/v1/credits/balance", headers=alice.headers)
    assert response.status_code == 200
    assert response.json == {"success": True, "data": {
        "balance": 1000, "reserved_balance": 30, "available_balance": 970, "status": "active",
        "low_balance_threshold": 0}}


def test_the_balance_endpoint_answers_what_svcctl_shows(client, alice):
    credits.reserve(alice.id, 7)
    credits.set_status(alice.id, "paused")
    credits.set_low_balance_threshold(alice.id, 50)
    response = client.simulate_get("/api/v1/credits/balance", headers=alice.headers)
    assert response.json["data"] == credits.balance_of(alice.id) == credits.wallet_of(alice.id).as_dict() == {
        "balance": 1000, "reserved_balance": 7, "available_balance": 993, "status": "paused",
        "low_balance_threshold": 50}


def test_the_ledger_is_newest_first_and_paginated(client, alice):
    for _ in range(3):
        credits.reserve(alice.id, 1)
    response = client.simulate_get("/api/v1/credits/ledger", params={"per_page": 2}, headers=alice.headers)
    assert response.status_code == 200
    body = response.json
    assert body["meta"] == {"current_page": 1, "per_page": 2, "total": 4, "last_page": 2}
    assert [entry["type"] for entry in body["data"]] == ["reserve", "reserve"]
    assert body["data"][0]["id"] > body["data"][1]["id"]
    last = client.simulate_get("/api/v1/credits/ledger", params={"page": 2, "per_page": 2},
                               headers=alice.headers).json
    assert [entry["type"] for entry in last["data"]] == ["reserve", "manual_grant"]


def test_the_ledger_rejects_a_per_page_over_100(client, alice):
    response = client.simulate_get("/api/v1/credits/ledger", params={"per_page": 101}, headers=alice.headers)
    assert response.status_code == 422
    assert response.json["error"]["code"] == "validation_failed"
    assert "per_page" in response.json["error"]["details"]["errors"]


def test_credit_reads_need_the_credits_scope(client, alice):
    headers = alice.with_key(["campaigns:read"])
    response = client.simulate_get("/api/v1/credits/balance", headers=headers)
    assert response.status_code == 403
    assert response.json["error"]["code"] == "missing_scope"


def test_a_key_sees_only_its_own_wallet(client, alice, charlie):
    credits.reserve(charlie.id, 500)
    response = client.simulate_get("/api/v1/credits/balance", headers=alice.headers)
    assert response.json["data"]["reserved_balance"] == 0


def test_a_balance_read_answers_from_the_process_copy_until_the_wallet_changes(sqlite_storage):
    from models.tenancy.tenants import create_tenant
    from tests.statements import statements_run

    tenant = create_tenant("Copies Co")
    credits.grant(tenant.id, 100)
    with connection(), statements_run() as ran:
        first = credits.balance_of(tenant.id)
        read_once = list(ran)
        assert credits.balance_of(tenant.id) == first
        assert ran == read_once, "an unchanged wallet is answered without a statement"
        assert len(read_once) == 1

        credits.reserve(tenant.id, 30)
        ran.clear()
        assert credits.balance_of(tenant.id)["available_balance"] == 70
        assert len(ran) == 1, "a committed change makes the next read go to the database"


@pytest.mark.parametrize("change, shown", [
    (lambda tenant_id: credits.reserve(tenant_id, 5), {"reserved_balance": 5, "available_balance": 995}),
    (lambda tenant_id: credits.grant(tenant_id, 5), {"balance": 1005, "available_balance": 1005}),
    (lambda tenant_id: credits.adjust(tenant_id, -5, reason="fix"), {"balance": 995, "available_balance": 995}),
    (lambda tenant_id: credits.set_status(tenant_id, "paused"), {"status": "paused"}),
    (lambda tenant_id: credits.set_low_balance_threshold(tenant_id, 9), {"low_balance_threshold": 9}),
    (lambda tenant_id: credits.apply_moves([credits.Move(tenant_id, "reserve", 4),
                                            credits.Move(tenant_id, "consume", 4)]),
     {"balance": 996, "available_balance": 996}),
])
def test_every_change_to_a_wallet_shows_in_the_next_balance_read(client, alice, change, shown):
    def balance():
        return client.simulate_get("/api/v1/credits/balance", headers=alice.headers).json["data"]

    before = balance()
    assert balance() == before
    change(alice.id)
    assert balance() == {**before, **shown}



def test_wallet_copy_seconds_is_a_bounded_number_and_zero_keeps_no_copy(sqlite_storage, tmp_path):
    from config import ConfigError, load_settings
    from models.tenancy.tenants import create_tenant
    from models.tenancy.wallet_copies import WalletCopies
    from tests.statements import statements_run

    assert load_settings({"SVC_DATA_DIR": str(tmp_path), "SVC_WALLET_COPY_SECONDS": "2.5"}).wallet_copy_seconds == 2.5
    for raw in ("soon", "-1", "61", "nan"):
        with pytest.raises(ConfigError, match="SVC_WALLET_COPY_SECONDS"):
            load_settings({"SVC_DATA_DIR": str(tmp_path), "SVC_WALLET_COPY_SECONDS": raw})

    tenant = create_tenant("Always Read Co")
    never = WalletCopies(tmp_path / "wallet-versions", copy_seconds=0)
    with connection(), statements_run() as ran:
        assert never.row(tenant.id, credits.wallet_of) == never.row(tenant.id, credits.wallet_of)
        assert len(ran) == 2, "with no copies kept, every read goes to the database"


def test_a_ledger_page_answers_what_each_entrys_as_dict_gives(client, alice, charlie):
    """GET /credits/ledger makes its entries from the driver's rows: what `LedgerEntry.as_dict`
    gives for the same entries, on every page."""
    import datetime as dt

    credits.grant(charlie.id, 5)  # another company's entry stays out of these pages
    credits.reserve(alice.id, 3, reference="camp-1", campaign_id=41)
    credits.release(alice.id, 1, description="left over", campaign_id=41)
    credits.grant(alice.id, 7)
    first = LedgerEntry.select().where(LedgerEntry.tenant == alice.id).order_by(LedgerEntry.id).first()
    LedgerEntry.update(created_at=dt.datetime(2026, 11, 28, 9, 30), messaging_account_id=9).where(
        LedgerEntry.id == first.id).execute()  # a time written without its fraction
    for page, per_page in ((1, 50), (1, 2), (2, 2), (3, 2), (1, 1), (4, 1)):
        entries, total = credits.ledger_page(alice.id, page, per_page)
        body = client.simulate_get("/api/v1/credits/ledger", params={"page": page, "per_page": per_page},
                                   headers=alice.headers).json
        assert body["data"] == [entry.as_dict() for entry in entries], (page, per_page)
        assert body["meta"]["total"] == total == 4
