"""The portal's unbounded lists, webhook deliveries, receivables and the audit log, page by keyset
(`?before=<id>` / `?after=<id>`): walked Older from the first page they show every row once in
the order the list has, Newer walks back, filters stay in the links, any cursor gives a page of
the signed-in company's rows only, and a deep page reads no more rows than the first."""

from __future__ import annotations

import html
import re
import uuid

import pytest

from models.events import webhooks
from models.events.tables import KIND_API, Event, WebhookDelivery, WebhookEndpoint
from models.ids import new_id
from models.receivables.tables import Debt, Debtor
from models.store import db as database
from models.store.db import atomic
from models.tenancy import portal
from portal.web import PER_PAGE
from tests.portal_fixtures import *  # noqa: F403
from tests.portal_fixtures import rows_read, signed_in
from tests.receivables_fixtures import make_account
from tests.statements import statements_run

ROWS = 2 * PER_PAGE + 17  # two full pages and a short one
STATUSES = ("delivered", "failed", "pending")

_DELIVERY = re.compile(r'<a href="/portal/webhooks/deliveries/(\d+)">#')
_DEBT = re.compile(r'<a href="/portal/receivables/debt\?id=([^"]+)">')
_AUDIT_TARGET = re.compile(r"<td><code>[^<]*</code></td><td>([^<]*)</td>")
_LINK = re.compile(r'<a href="([^"]+)" rel="(prev|next|first)">')


def _endpoint(tenant_id: int, n: int) -> WebhookEndpoint:
    return WebhookEndpoint.create(public_id=new_id("whend_"), tenant=tenant_id, kind=KIND_API,
                                  url=f"https://hooks{n}.example.com/in", events=["message.sent"],
                                  secret_ciphertext="x", secret_preview="x", active_url_hash=uuid.uuid4().hex)


def _delivery(tenant_id: int, endpoint: WebhookEndpoint, name: str, status: str) -> WebhookDelivery:
    event = Event.create(public_id=new_id("evt_"), tenant=tenant_id, name=name, payload={})
    return WebhookDelivery.create(event=event.id, endpoint=endpoint.id, tenant=tenant_id, event_name=name,
                                  status=status, max_attempts=5)


@pytest.fixture
def long_lists(alice, charlie, owner):
    """ROWS deliveries, debts and audit entries of alice's, each after one of charlie's, so charlie's
    ids lie between alice's. Alice's deliveries cycle over two endpoints, two events and three
    statuses; her debts over five debtors. Returns charlie's ids and names."""
    with atomic():
        mine, theirs = [_endpoint(alice.id, 1), _endpoint(alice.id, 2)], _endpoint(charlie.id, 3)
        alice_number, charlie_number = make_account(alice), make_account(charlie, "56933334444")
        debtors = [Debtor.create(tenant=alice.id, nombre=f"Debtor {n}", documento=f"CC-{n}") for n in range(5)]
        stranger = Debtor.create(tenant=charlie.id, nombre="Stranger", documento="CC-0")
        foreign: dict[str, list] = {"deliveries": [], "debts": [], "audit": []}
        for n in range(ROWS):
            foreign["deliveries"].append(_delivery(charlie.id, theirs, "message.sent", "failed").id)
            _delivery(alice.id, mine[n % 2], ("message.sent", "message.failed")[n % 3 == 0], STATUSES[n % 3])
            debt = dict(moneda="CLP", monto_original=1000, saldo_pendiente=1000)
            foreign["debts"].append(Debt.create(tenant=charlie.id, external_id=f"C-{n}", account=charlie_number,
                                                debtor=stranger, **debt).id)
            Debt.create(tenant=alice.id, external_id=f"A-{n}", account=alice_number, debtor=debtors[n % 5], **debt)
            portal.audit(charlie.id, None, "test.entry", f"charlie-{n}")
            portal.audit(alice.id, None, "test.entry", f"alice-{n}")
            foreign["audit"].append(portal.audit_log(charlie.id).first().id)
    return foreign


def shown(result, pattern: re.Pattern) -> tuple[list[str], dict[str, str]]:
    """A list page as the reader sees it: its rows and its links (prev: Newer, next: Older, first:
    back to the newest)."""
    assert result.status_code == 200, result.text
    assert not re.search(r"Page \d+ of|in all", result.text)  # there is no count to tell
    links = {rel: html.unescape(url) for url, rel in _LINK.findall(result.text)}
    return [html.unescape(row) for row in pattern.findall(result.text)], links


def follow(browser, link: str):
    path, _, raw = link.partition("?")
    return browser.get(path, **dict(part.split("=", 1) for part in raw.split("&") if part))


def walk(browser, path: str, pattern: re.Pattern, **filters) -> list[list[str]]:
    """Every page from the first, following Older; then back, following Newer, which must show
    the same pages in reverse. Checks the links on each page and that the filters stay in them."""
    pages: list[list[str]] = []
    rows, links = shown(browser.get(path, **filters), pattern)
    assert "prev" not in links and "first" not in links
    while True:
        pages.append(rows)
        for link in links.values():
            assert all(f"{name}={value}" in link for name, value in filters.items()), link
        if "next" not in links:
            break
        rows, links = shown(follow(browser, links["next"]), pattern)
        assert "prev" in links and "first" not in links
    back = [pages[-1]]
    while "prev" in links:
        rows, links = shown(follow(browser, links["prev"]), pattern)
        back.append(rows)
    assert back[::-1] == pages
    return pages


def every(pages: list[list[str]]) -> list[str]:
    assert all(len(rows) == PER_PAGE for rows in pages[:-1]) and 0 < len(pages[-1]) <= PER_PAGE
    return [row for rows in pages for row in rows]


def test_the_delivery_log_walks_every_delivery_once_newest_first(client, alice, owner, long_lists):
    browser = signed_in(client, owner)
    path = "/portal/webhooks/deliveries"

    def listed(endpoint=None, event=None, status=None) -> list[str]:
        return [str(d.id) for d in webhooks.deliveries(alice.id, endpoint, event, status)]

    assert len(walk(browser, path, _DELIVERY)) == 3
    assert every(walk(browser, path, _DELIVERY)) == listed()
    endpoint = WebhookEndpoint.select().where(WebhookEndpoint.tenant == alice.id).first().public_id
    for filters in ({"status": "failed"}, {"event": "message.sent"}, {"endpoint": endpoint},
                    {"endpoint": endpoint, "status": "delivered", "event": "message.failed"}):
        expected = listed(filters.get("endpoint"), filters.get("event"), filters.get("status"))
        assert every(walk(browser, path, _DELIVERY, **filters)) == expected and expected


def test_receivables_walk_every_debt_once_and_keep_the_search(client, alice, owner, long_lists):
    browser = signed_in(client, owner)
    debts = [f"A-{n}" for n in reversed(range(ROWS))]
    assert every(walk(browser, "/portal/receivables", _DEBT)) == debts
    # Debtor CC-1 owes every fifth debt: more than one page, searched on each.
    assert every(walk(browser, "/portal/receivables", _DEBT, q="CC-1")) == [d for d in debts if int(d[2:]) % 5 == 1]
    assert every(walk(browser, "/portal/receivables", _DEBT, q="A-7")) == ["A-7"]


def test_the_audit_log_walks_every_entry_once_newest_first(client, alice, owner, long_lists):
    browser = signed_in(client, owner)
    entries = [entry.target or "" for entry in portal.audit_log(alice.id)]  # the sign-in's entry too
    assert len(entries) > ROWS and every(walk(browser, "/portal/audit", _AUDIT_TARGET)) == entries


LISTS = [("/portal/webhooks/deliveries", _DELIVERY, "deliveries"), ("/portal/receivables", _DEBT, "debts"),
         ("/portal/audit", _AUDIT_TARGET, "audit")]


@pytest.mark.parametrize(("path", "pattern", "name"), LISTS)
def test_any_cursor_gives_a_page_of_the_companys_own_rows(client, alice, charlie, owner, long_lists,
                                                          path, pattern, name):
    browser = signed_in(client, owner)
    first, first_links = shown(browser.get(path), pattern)
    older = shown(follow(browser, first_links["next"]), pattern)[0]
    every_row = every(walk(browser, path, pattern))
    foreign = {"deliveries": [str(n) for n in long_lists["deliveries"]],
               "debts": [f"C-{n}" for n in range(ROWS)], "audit": [f"charlie-{n}" for n in range(ROWS)]}[name]

    # Not a positive whole number: the first page.
    for cursor in ("before", "after"):
        for bad in ("x", "-1", "0", "00", "1.5", "", " 7", "²"):
            assert shown(browser.get(path, **{cursor: bad}), pattern) == (first, first_links)
    # Older than any id: the first page; newer than any, or older than the oldest: an empty page
    # with a way back to the newest, and nothing else.
    for huge in (str(10 ** 30), "9" * 5000):
        assert shown(browser.get(path, before=huge), pattern) == (first, first_links)
    for cursor, beyond in (("after", str(10 ** 30)), ("after", "9" * 5000), ("before", "1")):
        rows, links = shown(browser.get(path, **{cursor: beyond}), pattern)
        assert rows == [] and links == {"first": path} and "Nothing on this page." in browser.get(
            path, **{cursor: beyond}).text
    # Another company's id is only a point in the company's own list.
    middle = long_lists[name][ROWS // 2]
    for cursor in ("before", "after"):
        rows, _links = shown(browser.get(path, **{cursor: str(middle)}), pattern)
        assert rows and set(rows) <= set(every_row) and not set(rows) & set(foreign)
    assert older == every_row[PER_PAGE:2 * PER_PAGE]


@pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
def test_a_deep_page_reads_no_more_rows_than_a_page(client, owner, long_lists):
    browser = signed_in(client, owner)
    for path, pattern, table in (("/portal/webhooks/deliveries", _DELIVERY, "webhook_delivery"),
                                 ("/portal/receivables", _DEBT, "debt"),
                                 ("/portal/audit", _AUDIT_TARGET, "portal_audit_entry")):
        links = shown(browser.get(path), pattern)[1]
        deepest = links["next"]
        while "next" in links:
            deepest = links["next"]
            links = shown(follow(browser, deepest), pattern)[1]
        for link in (path, deepest, links["prev"]):
            # Inside one transaction, so PostgreSQL's per-transaction counters see the whole request.
            with atomic():
                before = rows_read(table)
                assert follow(browser, link).status_code == 200
                read = rows_read(table) - before
            # The page, the row that tells a further page exists, the row that tells one lies behind.
            assert read <= PER_PAGE + 2, (link, read)


@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
def test_a_deep_page_is_an_index_seek_on_the_id(client, owner, long_lists):
    browser = signed_in(client, owner)
    conn = database.db.connection()
    for path, pattern, table in (("/portal/webhooks/deliveries", _DELIVERY, "webhook_delivery"),
                                 ("/portal/receivables", _DEBT, "debt"),
                                 ("/portal/audit", _AUDIT_TARGET, "portal_audit_entry")):
        deeper = shown(follow(browser, shown(browser.get(path), pattern)[1]["next"]), pattern)[1]["next"]
        with statements_run() as ran:
            assert follow(browser, deeper).status_code == 200
        listed = [sql for sql in ran if f'FROM "{table}"' in sql]
        assert listed and not [sql for sql in listed if "OFFSET" in sql or "COUNT(" in sql]
        [page] = [sql for sql in listed if f'LIMIT {PER_PAGE + 1}' in sql]
        plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {page}"))
        # The tenant's rows from the cursor on, in the index's order: no sort, nothing skipped.
        seek = rf"SEARCH \w+ USING (COVERING )?INDEX {table}_tenant_id\w* \(tenant_id=\? AND id<\?\)"
        assert re.search(seek, plan) and "TEMP B-TREE" not in plan, plan


SEARCHES = (("A-7", 1), ("CC-1", len(range(1, ROWS, 5))), ("nobody", 0))
MANY = 5000


@pytest.fixture
def many_debts(alice, long_lists):
    """MANY more of alice's debts, all newer than the searched ones, owed by one more debtor, and
    the table's statistics gathered: PostgreSQL plans on them, and on a table of a few hundred
    rows reading it whole is its cheapest plan whatever the indexes."""
    with atomic():
        account = Debt.select(Debt.account).where(Debt.tenant == alice.id).scalar()
        bulk = Debtor.create(tenant=alice.id, nombre="Bulk", documento="CC-bulk")
        rows = [dict(tenant=alice.id, external_id=f"B-{n}", account=account, debtor=bulk, moneda="CLP",
                     monto_original=1000, saldo_pendiente=1000) for n in range(MANY)]
        for start in range(0, MANY, 500):
            Debt.insert_many(rows[start:start + 500]).execute()
    database.db.execute_sql("ANALYZE debt")
    database.db.execute_sql("ANALYZE debtor")


@pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
def test_a_search_reads_the_matches_not_the_companys_debts(client, owner, long_lists, many_debts):
    browser = signed_in(client, owner)
    for text, matches in SEARCHES:
        with atomic():
            before = rows_read("debt")
            rows = shown(browser.get("/portal/receivables", q=text), _DEBT)[0]
            read = rows_read("debt") - before
        assert len(rows) == matches
        # Each match's id from an index, then its row: never the company's other debts (ROWS of them).
        assert read <= 2 * matches + 2, (text, read)


@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
def test_a_search_is_index_lookups_on_sqlite(client, owner, long_lists):
    browser = signed_in(client, owner)
    conn = database.db.connection()
    for text, matches in SEARCHES:
        with statements_run() as ran:
            assert len(shown(browser.get("/portal/receivables", q=text), _DEBT)[0]) == matches
        listed = [sql for sql in ran if 'FROM "debt"' in sql or 'FROM "debtor"' in sql]
        assert listed
        # With no match the page's condition is `0 = 1`, which SQLite tests once before reading a
        # row (its plan still names the loop it never enters); the PostgreSQL test counts those rows.
        for sql in [sql for sql in listed if "(0 = 1)" not in sql]:
            steps = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
            # Each row reached by the searched value's index or by its id (a seek per match, on the
            # primary key or on (tenant_id, id) with both given), never by walking the company's
            # debts on (tenant_id, id) from the newest.
            for step in steps:
                if step.startswith(("SCAN", "SEARCH")):
                    assert re.search(r"USING (COVERING )?INDEX (debt_tenant_id_external_id|debt_debtor_id|"
                                     r"debtor_tenant_id_documento) |USING INTEGER PRIMARY KEY|"
                                     r"INDEX debt_tenant_id_id \(tenant_id=\? AND id=\?", step), (sql, steps)
