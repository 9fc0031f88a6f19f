"""The portal's long lists, a campaign's recipients and the credits ledger, page through the same
model functions as their API twins (`recipients_page`, `ledger_page`): each page shows its share of
the list once and in order, a page past the end is the last page, and a later page reads no more
rows than the first."""

from __future__ import annotations

import html
import math
import re

import pytest

from models.sending.tables import CampaignRecipient
from models.store import db as database
from models.store.db import atomic
from models.tenancy import credits
from portal.web import PER_PAGE
from tests.campaigns_fixtures import *  # noqa: F403  (fixtures)
from tests.campaigns_fixtures import create_for, set_recipients
from tests.portal_fixtures import *  # noqa: F403
from tests.portal_fixtures import rows_read, signed_in
from tests.statements import statements_run

RECIPIENTS = [f"5215560{n:06d}" for n in range(4 * PER_PAGE + 30)]  # five pages, the last one short
FAILED = RECIPIENTS[1::2]  # three pages, the last one short
GRANTS = 2 * PER_PAGE + 19  # with alice's first grant: two full pages and a short one

_RECIPIENT = re.compile(r"<tr><td>(\d+)</td>")
_LEDGER_DESCRIPTION = re.compile(r'<td class="num">[^<]*</td>\s*<td>([^<]*)</td></tr>')
_PAGER = re.compile(r"Page (\d+) of (\d+) · ([\d,]+) in all")
_LINK = re.compile(r'<a href="([^"]+)" rel="(prev|next)">')


@pytest.fixture
def long_campaign(alice, number, queue_only):
    """A queued campaign of RECIPIENTS, every other one failed (the status filter's list)."""
    campaign = create_for(alice, number, RECIPIENTS)
    set_recipients(CampaignRecipient.wa_id.in_(FAILED), status="failed")
    return campaign


@pytest.fixture
def long_ledger(alice) -> list[str]:
    """GRANTS more entries in alice's ledger; returns each entry's description, newest first, in the
    order the portal listed them before it paged by position (by id, descending)."""
    for n in range(GRANTS):
        credits.grant(alice.id, 1, reason=f"grant {n}")
    return [entry.description or entry.reference or "" for entry in credits.ledger(alice.id)]


def shown(page, pattern: re.Pattern) -> tuple[list[str], tuple[int, int, int] | None, dict[str, str]]:
    """A list page as the reader sees it: its rows, "page N of M · T in all", its prev/next links."""
    assert page.status_code == 200, page.text
    pager = _PAGER.search(page.text)
    numbers = (int(pager[1]), int(pager[2]), int(pager[3].replace(",", ""))) if pager else None
    links = {rel: html.unescape(url) for url, rel in _LINK.findall(page.text)}
    return [html.unescape(row) for row in pattern.findall(page.text)], numbers, links


def walk(browser, path: str, pattern: re.Pattern, total: int, **params) -> list[str]:
    """Every page of a list of `total` rows from the first, following the next links; checks the
    pager and that the filter stays in the links on each."""
    pages = math.ceil(total / PER_PAGE)
    seen: list[str] = []
    url, query = path, {**params}
    for number in range(1, pages + 1):
        rows, pager, links = shown(browser.get(url, **query), pattern)
        assert pager == (number, pages, total)
        assert ("prev" in links) == (number > 1) and ("next" in links) == (number < pages)
        for link in links.values():  # the filter stays in the links
            assert all(f"{name}={value}" in link for name, value in params.items())
        seen += rows
        if number < pages:
            url, _, raw = links["next"].partition("?")
            query = dict(part.split("=", 1) for part in raw.split("&"))
    return seen


def test_the_recipients_pages_walk_the_campaign_once_in_order(client, owner, long_campaign):
    browser = signed_in(client, owner)
    path = f"/portal/campaigns/{long_campaign.public_id}"
    assert walk(browser, path, _RECIPIENT, len(RECIPIENTS)) == RECIPIENTS
    assert walk(browser, path, _RECIPIENT, len(FAILED), status="failed") == FAILED
    middle = shown(browser.get(path, page="3"), _RECIPIENT)
    assert middle[0] == RECIPIENTS[2 * PER_PAGE:3 * PER_PAGE] and middle[1] == (3, 5, len(RECIPIENTS))
    last = shown(browser.get(path, page="5"), _RECIPIENT)
    assert last[0] == RECIPIENTS[4 * PER_PAGE:] and last[1] == (5, 5, len(RECIPIENTS))
    # Past the end: the last page, not an empty list; a page that is not a number: the first.
    for beyond in ("6", "1000", str(10 ** 30)):
        assert shown(browser.get(path, page=beyond), _RECIPIENT)[:2] == last[:2]
    assert shown(browser.get(path, page="4", status="failed"), _RECIPIENT)[:2] == (
        FAILED[2 * PER_PAGE:], (3, 3, len(FAILED)))
    for not_a_page in ("x", "0", "-2", "1.5"):
        assert shown(browser.get(path, page=not_a_page), _RECIPIENT)[:2] == (
            RECIPIENTS[:PER_PAGE], (1, 5, len(RECIPIENTS)))
    nobody = shown(browser.get(path, status="read", page="7"), _RECIPIENT)
    assert nobody[0] == [] and nobody[1] is None and "No recipients with this status" in browser.get(
        path, status="read", page="7").text


def test_the_ledger_pages_walk_every_entry_once_newest_first(client, owner, long_ledger):
    browser = signed_in(client, owner)
    assert len(long_ledger) == GRANTS + 1  # and alice's first grant
    assert walk(browser, "/portal/credits", _LEDGER_DESCRIPTION, len(long_ledger)) == long_ledger
    last = shown(browser.get("/portal/credits", page="3"), _LEDGER_DESCRIPTION)
    assert last[0] == long_ledger[2 * PER_PAGE:] and last[0][-1] == ""  # alice's first grant, unlabelled
    for beyond in ("4", str(10 ** 30)):
        assert shown(browser.get("/portal/credits", page=beyond), _LEDGER_DESCRIPTION)[:2] == last[:2]
    assert shown(browser.get("/portal/credits", page="x"), _LEDGER_DESCRIPTION)[0] == long_ledger[:PER_PAGE]


def test_an_empty_ledger_is_one_page_whatever_the_page_asked(client, alice, owner):
    browser = signed_in(client, owner)
    credits.adjust(alice.id, -1000)  # the ledger has alice's grant and this: still one page
    for asked in ("1", "2", "x"):
        rows, pager, links = shown(browser.get("/portal/credits", page=asked), _LEDGER_DESCRIPTION)
        assert len(rows) == 2 and pager is None and links == {}


@pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
def test_a_later_page_reads_no_more_rows_than_the_first(client, owner, long_campaign, long_ledger):
    browser = signed_in(client, owner)

    def read_by_page(table: str, path: str, page: int) -> int:
        # Inside one transaction, so PostgreSQL's per-transaction counters see the whole request.
        with atomic():
            before = rows_read(table)
            assert browser.get(path, page=str(page)).status_code == 200
            return rows_read(table) - before

    ledger = [read_by_page("ledger_entry", "/portal/credits", page) for page in (1, 2, 3)]
    assert ledger[0] <= PER_PAGE and ledger[1] <= PER_PAGE and ledger[2] <= len(long_ledger) - 2 * PER_PAGE + 1
    # The campaign's page also reads its chart (every recipient sent, whatever the page): what
    # the page number adds must be nothing.
    path = f"/portal/campaigns/{long_campaign.public_id}"
    recipients = [read_by_page("campaign_recipient", path, page) for page in (1, 3, 5)]
    assert recipients[2] <= recipients[1] <= recipients[0]


@pytest.mark.parametrize("storage", ["postgres+redis"], indirect=True)
def test_a_campaigns_counts_are_read_from_its_counters_not_its_recipients(client, alice, owner, long_campaign):
    """The portal's live counters, the API's campaign and the API's list read a campaign's counts
    per status from its row of counters: not one recipient row, however large the campaign."""
    browser = signed_in(client, owner)
    campaign_id = long_campaign.public_id

    def recipients_read(fetch) -> tuple[int, dict]:
        with atomic():
            before = rows_read("campaign_recipient")
            response = fetch()
            assert response.status_code == 200
            return rows_read("campaign_recipient") - before, response.json

    read, progress = recipients_read(lambda: browser.get(f"/portal/campaigns/{campaign_id}/progress"))
    assert read == 0 and (progress["failed"], progress["pending"]) == (len(FAILED), len(RECIPIENTS) - len(FAILED))
    read, detail = recipients_read(lambda: client.simulate_get(f"/api/v1/campaigns/{campaign_id}",
                                                               headers=alice.headers))
    assert read == 0 and detail["data"]["failed"] == len(FAILED)
    read, listed = recipients_read(lambda: client.simulate_get("/api/v1/campaigns", headers=alice.headers))
    assert read == 0 and listed["data"][0]["failed"] == len(FAILED)


@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
def test_a_later_page_is_an_index_seek_on_positions(client, owner, long_campaign, long_ledger):
    browser = signed_in(client, owner)
    conn = database.db.connection()

    def statements(table: str, path: str, page: int) -> list[str]:
        with statements_run() as ran:
            assert browser.get(path, page=str(page)).status_code == 200
        return [sql for sql in ran if f'FROM "{table}"' in sql]

    for table, path, page in (("ledger_entry", "/portal/credits", 3),
                              ("campaign_recipient", f"/portal/campaigns/{long_campaign.public_id}", 5)):
        ran = statements(table, path, page)
        assert not [sql for sql in ran if "OFFSET" in sql or ("COUNT(" in sql and table == "ledger_entry")]
        [listed] = [sql for sql in ran if '"position" BETWEEN' in sql]
        plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {listed}"))
        assert f"USING INDEX {table}_" in plan and "_position" in plan and "position>" in plan, plan


@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
def test_the_campaign_chart_and_todays_sends_read_through_indexes_not_every_recipient(client, owner,
                                                                                      long_campaign):
    import datetime as dt

    from models.clock import utcnow

    now = utcnow()
    sent = CampaignRecipient.select(CampaignRecipient.id).where(CampaignRecipient.campaign == long_campaign.id)
    for n, row in enumerate(sent):
        CampaignRecipient.update(sent_at=now - dt.timedelta(seconds=n)).where(CampaignRecipient.id == row.id).execute()
    browser = signed_in(client, owner)
    conn = database.db.connection()

    def recipient_statements(path: str) -> list[str]:
        with statements_run() as ran:
            page = browser.get(path)
        assert page.status_code == 200
        return [sql for sql in ran if 'FROM "campaign_recipient"' in sql and '"position" BETWEEN' not in sql
                and "sent_at" in sql]

    chart = recipient_statements(f"/portal/campaigns/{long_campaign.public_id}")
    today = recipient_statements("/portal")
    assert len(chart) == 2 and len(today) == 1, (chart, today)
    for sql in [*chart, *today]:
        plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
        assert "SCAN campaign_recipient" not in plan and "campaign_recipient_campaign_id_" in plan, (sql, plan)
        assert "_sent_at" in plan, plan
    # The chart counts what the rows hold, per interval: every recipient is in one bar.
    page = browser.get(f"/portal/campaigns/{long_campaign.public_id}").text
    assert sum(int(count) for count in re.findall(r"<title>(\d+) sent from", page)) == len(RECIPIENTS)
