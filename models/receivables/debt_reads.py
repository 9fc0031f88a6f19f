"""GET /cartera/deudas/{external_id}: a debt with its debtor, installments, payments and payment
links, from two statements written once, their rows read as tuples.

Built from peewee queries (`debts.debt_detail` and a query of the debt's links), the read ran seven
statements, and building their SQL and the model objects cost several times what the database
did; on PostgreSQL each statement is also a round trip. These statements give what those queries
gave, in the same order: `read_debt` answers exactly
`{**debt_detail(debt), "links_de_pago": [...]}` as built through peewee (tests/test_receivables_reads.py
keeps that version as the reference).
"""

from __future__ import annotations

from config import get_settings
from models.clock import isoformat, stored_isoformat, utcnow
from models.errors import NotFound
from models.receivables.money import amount_json
from models.receivables.payments import PAY_PATH
from models.receivables.tables import Installment, PaymentLink
from models.store.db import execute, fetch_one

# The debt, its number's public id and its debtor, found on the unique (tenant, external_id).
_DEBT = ('SELECT d."id", d."tenant_id", d."external_id", a."public_id", p."nombre", p."documento", p."telefono", '
         'd."moneda", d."referencia", d."monto_original", d."saldo_pendiente", d."status", d."tipo", d."auto_send", '
         'd."external_version", d."external_updated_at" '
         'FROM "debt" AS d JOIN "messaging_account" AS a ON a."id" = d."account_id" '
         'JOIN "debtor" AS p ON p."id" = d."debtor_id" '
         'WHERE d."tenant_id" = ? AND d."external_id" = ?')

# Its installments (kind 0), payments (1: a row per allocation, one with NULLs for a payment
# with none) and payment links (2) in one statement. Every branch fills the same typed slots:
# kind, five ordering columns (each kind's ORDER BY of old: installments by number, due day and
# id; payments by time and id, allocations by id; links newest first), six texts, three whole
# numbers and three times. A slot a branch leaves empty is a NULL cast to the slot's type, so
# that PostgreSQL finds one type per column whichever branches come first.
_NO_TEXT, _NO_NUMBER = "CAST(NULL AS TEXT)", "CAST(NULL AS BIGINT)"
_NO_DAY, _NO_TIME = "CAST(NULL AS DATE)", "CAST(NULL AS TIMESTAMP)"
_PARTS = (
    f'SELECT 0, i."numero", i."vence", {_NO_TIME}, i."id", {_NO_NUMBER}, '
    f'i."external_id", i."status", {_NO_TEXT}, {_NO_TEXT}, {_NO_TEXT}, {_NO_TEXT}, '
    f'i."monto", {_NO_NUMBER}, {_NO_NUMBER}, {_NO_TIME}, {_NO_TIME}, {_NO_TIME} '
    f'FROM "debt_installment" AS i WHERE i."debt_id" = ? '
    f'UNION ALL '
    f'SELECT 1, {_NO_NUMBER}, {_NO_DAY}, p."pagado_en", p."id", al."id", '
    f'p."external_id", p."public_id", p."origin", p."moneda", p."metodo", i."external_id", '
    f'p."monto", i."numero", al."amount", {_NO_TIME}, {_NO_TIME}, {_NO_TIME} '
    f'FROM "debt_payment" AS p LEFT JOIN "payment_allocation" AS al ON al."payment_id" = p."id" '
    f'LEFT JOIN "debt_installment" AS i ON i."id" = al."installment_id" WHERE p."debt_id" = ? '
    f'UNION ALL '
    f'SELECT 2, -l."id", {_NO_DAY}, {_NO_TIME}, {_NO_NUMBER}, {_NO_NUMBER}, '
    f'l."public_id", l."checkout_url", l."origin", l."currency", l."status", i."external_id", '
    f'l."amount", {_NO_NUMBER}, {_NO_NUMBER}, l."expires_at", l."paid_at", l."created_at" '
    f'FROM "payment_link" AS l LEFT JOIN "debt_installment" AS i ON i."id" = l."installment_id" '
    f'WHERE l."tenant_id" = ? AND l."debt_id" = ? '
    f'ORDER BY 1, 2, 3, 4, 5, 6')

# A driver's value (SQLite's text) as the model reads it.
_DAY = Installment.vence.python_value
_LINK_TIME = PaymentLink.expires_at.python_value


def read_debt(tenant_id: int, external_id: str) -> dict:
    """The contract's debt `external_id` of the tenant; 404 `debt_not_found` when it has none."""
    row = fetch_one(_DEBT, (tenant_id, external_id))
    if row is None:
        raise NotFound(f"no debt {external_id}", code="debt_not_found", details={"external_id": external_id})
    (debt_id, debt_tenant_id, external_id, account_public_id, name, document, phone, currency, reference, original,
     balance, status, kind, auto_send, external_version, external_updated_at) = row
    installments: list[dict] = []
    payments: list[dict] = []
    links: list[dict] = []
    last_payment = None
    now = pay_url = None
    for (part, number, due, paid_at, part_id, allocation_id, text1, text2, text3, text4, text5, text6, amount1,
         number2, amount3, time1, time2, time3) in execute(_PARTS, (debt_id, debt_id, debt_tenant_id, debt_id)):
        if part == 0:
            installments.append({"external_id": text1, "numero": number, "monto": amount_json(amount1, currency),
                                 "vence": _DAY(due).isoformat(), "estado": text2})
        elif part == 1:
            if part_id != last_payment:
                last_payment = part_id
                allocations: list[dict] = []
                payments.append({"external_id": text1, "boty_payment_id": text2, "origin": text3,
                                 "monto": amount_json(amount1, text4), "moneda": text4, "metodo": text5,
                                 "pagado_en": stored_isoformat(paid_at), "asignaciones": allocations})
            if allocation_id is not None:
                allocations.append({"cuota_external_id": text6, "numero": number2,
                                    "monto": amount_json(amount3, text4)})
        else:
            if now is None:
                now, pay_url = utcnow(), f"{get_settings().public_url}{PAY_PATH}/"
            expires_at = _LINK_TIME(time1)
            links.append({"id": text1, "url": f"{pay_url}{text1}", "checkout_url": text2,
                          "monto": amount_json(amount1, text4), "moneda": text4, "cuota_external_id": text6,
                          "origin": text3, "status": "expired" if text5 == "active" and expires_at <= now else text5,
                          "expires_at": isoformat(expires_at), "paid_at": stored_isoformat(time2),
                          "created_at": stored_isoformat(time3)})
    return {
        "external_id": external_id,
        "account_id": account_public_id,
        "deudor": {"nombre": name, "documento": document, "telefono": phone},
        "moneda": currency,
        "referencia": reference,
        "monto_original": amount_json(original, currency),
        "saldo_pendiente": amount_json(balance, currency),
        "status": status,
        "tipo": kind,
        "auto_send": bool(auto_send),
        "external_version": external_version,
        "external_updated_at": stored_isoformat(external_updated_at),
        "cuotas": installments,
        "pagos": payments,
        "links_de_pago": links,
    }
