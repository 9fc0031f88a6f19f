"""The ERP's feed of what debtors said: promises, disputes, and payments claimed, numbered per tenant.

Each one gets the next number of its tenant's feed in the transaction that records it (promises.py,
replies.py). As in the payments' export (export.py), the sequence row is locked until commit, so
numbers become visible in order and a reader's cursor (`svcctl cartera responses export --after`,
`GET /cartera/respuestas?cursor=`) never skips one.

A payment claimed (the debtor pressed "I already paid") is not a payment: it asks the ERP to
check its books, and only the ERP's own `POST /cartera/pagos` (or the gateway) records one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from peewee import JOIN, fn

from models.clock import isoformat, stored_isoformat, to_utc_naive
from models.receivables.export import feed_page_rows, numbered_rows
from models.receivables.money import amount_json
from models.receivables.tables import Debt, DebtDispute, DebtorResponseExport, DebtPromise, DebtReply
from models.store.db import execute

KINDS = ("promesa", "disputa", "pago_informado")


def export_response(debt: Debt, origin: str, *, promise_id: int | None = None, dispute_id: int | None = None,
                    reply_id: int | None = None) -> int:
    """Number what a debtor said for the feed; call in the transaction recording it."""
    tenant_id = debt.tenant_id
    execute('INSERT INTO "debtor_response_export_sequence" ("tenant_id", "last") VALUES (?, 0) '
            'ON CONFLICT DO NOTHING', [tenant_id])
    # The UPDATE holds the sequence row until commit: the next writer gets the next number only
    # once this one is visible, so readers see numbers appear in order.
    seq = execute('UPDATE "debtor_response_export_sequence" SET "last" = "last" + 1 WHERE "tenant_id" = ? '
                  'RETURNING "last"', [tenant_id]).fetchone()[0]
    DebtorResponseExport.create(tenant=tenant_id, seq=seq, debt=debt.id, promise=promise_id, dispute=dispute_id,
                                reply=reply_id, origin=origin)
    return seq


def response_rows(tenant_id: int, *, since: dt.datetime | None = None, after: int = 0,
                  limit: int | None = None) -> Iterator[dict]:
    """What debtors said, by cursor (`seq` > after) and recording time, read in pages."""
    def page_of(cursor: int, size: int) -> list:
        query = (DebtorResponseExport
                 .select(DebtorResponseExport, Debt, DebtPromise, DebtDispute, DebtReply)
                 .join(Debt, on=(DebtorResponseExport.debt == Debt.id))
                 .switch(DebtorResponseExport)
                 .join(DebtPromise, JOIN.LEFT_OUTER, on=(DebtorResponseExport.promise == DebtPromise.id))
                 .switch(DebtorResponseExport)
                 .join(DebtDispute, JOIN.LEFT_OUTER, on=(DebtorResponseExport.dispute == DebtDispute.id))
                 .switch(DebtorResponseExport)
                 .join(DebtReply, JOIN.LEFT_OUTER, on=(DebtorResponseExport.reply == DebtReply.id))
                 .where((DebtorResponseExport.tenant == tenant_id) & (DebtorResponseExport.seq > cursor))
                 .order_by(DebtorResponseExport.seq)
                 .limit(size))
        if since is not None:
            query = query.where(DebtorResponseExport.created_at >= to_utc_naive(since))
        return list(query)

    for row in numbered_rows(page_of, after=after, limit=limit):
        yield _row(row)


def _row(row: DebtorResponseExport) -> dict:
    debt = row.debt
    found = {"cursor": row.seq, "deuda_external_id": debt.external_id, "promised_date": None, "reason": None,
             "saldo_pendiente": amount_json(debt.saldo_pendiente, debt.moneda), "moneda": debt.moneda,
             "registrado_en": isoformat(row.created_at)}
    if row.promise_id is not None:
        found["tipo"], found["promised_date"] = "promesa", row.promise.promised_date.isoformat()
    elif row.dispute_id is not None:
        found["tipo"], found["reason"] = "disputa", row.dispute.reason
    else:
        found["tipo"] = "pago_informado"
    found["origin"] = row.origin
    return found


# GET /cartera/respuestas's page, written by hand (as export.py's `export_page`, for the same
# reason): the rows `response_rows` gives, each as `_row` gives it (tests/test_receivables_reads.py).
_API_PAGE = ('SELECT x."seq", d."external_id", d."saldo_pendiente", d."moneda", x."created_at", x."promise_id", '
             'p."promised_date", x."dispute_id", s."reason", x."origin" '
             'FROM "debtor_response_export" AS x JOIN "debt" AS d ON d."id" = x."debt_id" '
             'LEFT JOIN "debt_promise" AS p ON p."id" = x."promise_id" '
             'LEFT JOIN "debt_dispute" AS s ON s."id" = x."dispute_id" '
             'WHERE x."tenant_id" = ? AND x."seq" > ?')
_DAY = DebtPromise.promised_date.python_value


def response_page(tenant_id: int, *, since: dt.datetime | None, after: int, limit: int) -> list[dict]:
    """Up to `limit` of what debtors said after the cursor `after`, as the API shows them."""
    rows = feed_page_rows(_API_PAGE, tenant_id, since=since, after=after, limit=limit)
    found = []
    for seq, debt_external_id, balance, currency, created_at, promise_id, promised_date, dispute_id, reason, origin \
            in rows:
        item = {"cursor": seq, "deuda_external_id": debt_external_id, "promised_date": None, "reason": None,
                "saldo_pendiente": amount_json(balance, currency), "moneda": currency,
                "registrado_en": stored_isoformat(created_at)}
        if promise_id is not None:
            item["tipo"], item["promised_date"] = "promesa", _DAY(promised_date).isoformat()
        elif dispute_id is not None:
            item["tipo"], item["reason"] = "disputa", reason
        else:
            item["tipo"] = "pago_informado"
        item["origin"] = origin
        found.append(item)
    return found


def latest_cursor(tenant_id: int) -> int:
    return (DebtorResponseExport.select(fn.MAX(DebtorResponseExport.seq))
            .where(DebtorResponseExport.tenant == tenant_id).scalar() or 0)
