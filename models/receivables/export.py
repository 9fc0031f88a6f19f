"""The ERP's export: every payment and reversal made in the service, numbered per tenant.

Each one gets the next number of its tenant's export sequence in the transaction that records
it. The sequence row is locked until commit, so numbers become visible in order and a reader's
cursor (`svcctl cartera payments export --after`, `GET /cartera/pagos?cursor=`) never skips one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

from peewee import JOIN, fn

from models.clock import isoformat, stored_isoformat, to_utc_naive
from models.receivables.money import amount_json, from_minor
from models.receivables.tables import Debt, Payment, PaymentExport, PaymentExportSequence, PaymentReversal
from models.store.db import bound_datetime, execute


def _export(tenant_id: int, payment_id: int, reversal_id: int | None = None) -> int:
    PaymentExportSequence.insert(tenant=tenant_id, last=0).on_conflict_ignore().execute()
    # The UPDATE holds the sequence row until commit: the next writer gets the next number only
    # once this one is visible, so readers see numbers appear in order.
    seq = execute('UPDATE "payment_export_sequence" SET "last" = "last" + 1 WHERE "tenant_id" = ? RETURNING "last"',
                  [tenant_id]).fetchone()[0]
    PaymentExport.create(tenant=tenant_id, seq=seq, payment=payment_id, reversal=reversal_id)
    return seq


def export_payment(payment: Payment) -> int:
    """Number a payment made in the service for the export; call in the transaction recording it."""
    return _export(payment.tenant_id, payment.id)


def export_reversal(reversal: PaymentReversal) -> int:
    """Number a refund or chargeback of a payment; call in the transaction recording it."""
    return _export(reversal.tenant_id, reversal.payment_id, reversal.id)


def export_rows(tenant_id: int, *, since: dt.datetime | None = None, after: int = 0,
                limit: int | None = None) -> Iterator[dict]:
    """Payments and reversals made in the service, by cursor (`seq` > after) and recording time.

    Amounts are exact Decimals; a reversal's `monto` is negative. Read in pages, so an export of
    any size streams in constant memory.
    """
    def page_of(cursor: int, size: int) -> list:
        query = (PaymentExport
                 .select(PaymentExport.seq, PaymentExport.created_at, Payment, PaymentReversal, Debt.external_id)
                 .join(Payment, on=(PaymentExport.payment == Payment.id))
                 .join(Debt, on=(Payment.debt == Debt.id))
                 .switch(PaymentExport)
                 .join(PaymentReversal, join_type=JOIN.LEFT_OUTER, on=(PaymentExport.reversal == PaymentReversal.id))
                 .where((PaymentExport.tenant == tenant_id) & (PaymentExport.seq > cursor))
                 .order_by(PaymentExport.seq)
                 .limit(size))
        if since is not None:
            query = query.where(PaymentExport.created_at >= to_utc_naive(since))
        return list(query)

    for row in numbered_rows(page_of, after=after, limit=limit):
        yield _export_row(row)


def numbered_rows(page_of: Callable[[int, int], list], *, after: int, limit: int | None) -> Iterator:
    """The rows of a feed numbered per tenant (`seq`: the payments' export, what debtors said)
    after the cursor `after`, at most `limit`, read in pages of up to 500 so a feed of any size
    streams in constant memory. `page_of(cursor, size)` reads the next page: up to `size` rows
    whose `seq` is above `cursor`, in `seq` order."""
    page = 500 if limit is None else min(limit, 500)
    remaining = limit
    while remaining is None or remaining > 0:
        rows = page_of(after, page if remaining is None else min(page, remaining))
        yield from rows
        if len(rows) < page:
            return
        after = rows[-1].seq
        if remaining is not None:
            remaining -= len(rows)


def _export_row(row) -> dict:
    payment = row.payment
    reversal = row.reversal if row.reversal_id is not None else None
    currency = payment.moneda
    if reversal is None:
        kind, amount, when, balance, unassigned = "pago", payment.monto, payment.pagado_en, payment.balance_after, \
            payment.unassigned
    else:
        kind, amount, when, balance, unassigned = "reverso", -reversal.amount, reversal.reversed_at, \
            reversal.balance_after, -reversal.unassigned
    return {
        "cursor": row.seq, "tipo": kind, "boty_payment_id": payment.public_id,
        "reverso_id": reversal.public_id if reversal else None, "motivo": reversal.kind if reversal else None,
        "deuda_external_id": payment.debt.external_id, "transaction_id": payment.transaction_id,
        "monto": from_minor(amount, currency), "moneda": currency, "metodo": payment.metodo,
        "ocurrido_en": isoformat(when), "saldo_pendiente": from_minor(balance, currency),
        "monto_sin_asignar": from_minor(unassigned, currency), "registrado_en": isoformat(row.created_at),
    }


# GET /cartera/pagos's page, written by hand: built through peewee (`export_rows`, amounts then
# made JSON numbers), a page cost several times what the database did in building SQL, model
# objects and Decimals. The same rows, the same order, the same fields
# (tests/test_receivables_reads.py keeps the peewee version as the reference).
_API_PAGE = ('SELECT x."seq", x."created_at", p."public_id", p."transaction_id", p."moneda", p."metodo", p."monto", '
             'p."pagado_en", p."balance_after", p."unassigned", d."external_id", r."id", r."public_id", r."kind", '
             'r."amount", r."reversed_at", r."balance_after", r."unassigned" '
             'FROM "payment_export" AS x JOIN "debt_payment" AS p ON p."id" = x."payment_id" '
             'JOIN "debt" AS d ON d."id" = p."debt_id" '
             'LEFT JOIN "payment_reversal" AS r ON r."id" = x."reversal_id" '
             'WHERE x."tenant_id" = ? AND x."seq" > ?')
_SINCE = ' AND x."created_at" >= ?'
_IN_ORDER = ' ORDER BY x."seq" LIMIT ?'


def feed_page_rows(statement: str, tenant_id: int, *, since: dt.datetime | None, after: int, limit: int) -> list:
    """The rows of an ERP feed's page: `statement` selects from the feed's table as `x`, filtered
    on the tenant and `x.seq > after`; rows written at or after `since` if given, in the feed's
    order, at most `limit`."""
    if since is None:
        return execute(statement + _IN_ORDER, (tenant_id, after, limit)).fetchall()
    return execute(statement + _SINCE + _IN_ORDER,
                   (tenant_id, after, bound_datetime(to_utc_naive(since)), limit)).fetchall()


def export_page(tenant_id: int, *, since: dt.datetime | None, after: int, limit: int) -> list[dict]:
    """Up to `limit` rows of the export after the cursor `after`, as the API shows them."""
    rows = feed_page_rows(_API_PAGE, tenant_id, since=since, after=after, limit=limit)
    found = []
    for (seq, created_at, public_id, transaction_id, currency, method, amount, paid_at, balance, unassigned,
         debt_external_id, reversal_id, reversal_public_id, reversal_kind, reversed_amount, reversed_at,
         reversed_balance, reversed_unassigned) in rows:
        if reversal_id is None:
            kind, when = "pago", paid_at
        else:
            kind, amount, when, balance, unassigned = ("reverso", -reversed_amount, reversed_at, reversed_balance,
                                                       -reversed_unassigned)
        found.append({
            "cursor": seq, "tipo": kind, "boty_payment_id": public_id, "reverso_id": reversal_public_id,
            "motivo": reversal_kind, "deuda_external_id": debt_external_id, "transaction_id": transaction_id,
            "monto": amount_json(amount, currency), "moneda": currency, "metodo": method,
            "ocurrido_en": stored_isoformat(when), "saldo_pendiente": amount_json(balance, currency),
            "monto_sin_asignar": amount_json(unassigned, currency), "registrado_en": stored_isoformat(created_at),
        })
    return found


def latest_cursor(tenant_id: int) -> int:
    return PaymentExport.select(fn.MAX(PaymentExport.seq)).where(PaymentExport.tenant == tenant_id).scalar() or 0
