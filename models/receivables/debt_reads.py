"""GET /cartera/deudas/{external_id}: a debt with its debtor, installments, payments and payment
links, from four statements written once, their rows read as tuples.

Built from peewee queries (`debts.debt_detail` and `payments.links_of`), the read ran seven
statements, and building their SQL and the model objects cost several times what the database
did. These statements give what those queries gave, in the same order: `read_debt` answers
exactly `{**debt_detail(debt), "links_de_pago": links_of(debt)}` (tests/test_receivables_debt_read.py).
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
_INSTALLMENTS = ('SELECT "external_id", "numero", "monto", "vence", "status" FROM "debt_installment" '
                 'WHERE "debt_id" = ? ORDER BY "numero", "vence", "id"')
# One row per allocation, and one for a payment with none (its allocation columns NULL).
_PAYMENTS = ('SELECT p."id", p."external_id", p."public_id", p."origin", p."monto", p."moneda", p."metodo", '
             'p."pagado_en", i."external_id", i."numero", al."amount" '
             'FROM "debt_payment" AS p LEFT JOIN "payment_allocation" AS al ON al."payment_id" = p."id" '
             'LEFT JOIN "debt_installment" AS i ON i."id" = al."installment_id" '
             'WHERE p."debt_id" = ? ORDER BY p."pagado_en", p."id", al."id"')
_LINKS = ('SELECT l."public_id", l."checkout_url", l."amount", l."currency", i."external_id", l."origin", l."status", '
          'l."expires_at", l."paid_at", l."created_at" '
          'FROM "payment_link" AS l LEFT JOIN "debt_installment" AS i ON i."id" = l."installment_id" '
          'WHERE l."tenant_id" = ? AND l."debt_id" = ? ORDER BY l."id" DESC')

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
        "cuotas": [{"external_id": item_id, "numero": number, "monto": amount_json(amount, currency),
                    "vence": _DAY(due).isoformat(), "estado": item_status}
                   for item_id, number, amount, due, item_status in execute(_INSTALLMENTS, (debt_id,)).fetchall()],
        "pagos": _payments(debt_id),
        "links_de_pago": _links(debt_tenant_id, debt_id),
    }


def _payments(debt_id: int) -> list[dict]:
    found: list[dict] = []
    last_id = None
    for (payment_id, payment_external_id, public_id, origin, amount, currency, method, paid_at, installment_id,
         number, allocated) in execute(_PAYMENTS, (debt_id,)).fetchall():
        if payment_id != last_id:
            last_id = payment_id
            allocations: list[dict] = []
            found.append({"external_id": payment_external_id, "boty_payment_id": public_id, "origin": origin,
                          "monto": amount_json(amount, currency), "moneda": currency, "metodo": method,
                          "pagado_en": stored_isoformat(paid_at), "asignaciones": allocations})
        if allocated is not None:
            allocations.append({"cuota_external_id": installment_id, "numero": number,
                                "monto": amount_json(allocated, currency)})
    return found


def _links(tenant_id: int, debt_id: int) -> list[dict]:
    rows = execute(_LINKS, (tenant_id, debt_id)).fetchall()
    if not rows:
        return []
    now, pay_url = utcnow(), f"{get_settings().public_url}{PAY_PATH}/"
    found = []
    for public_id, checkout_url, amount, currency, installment_id, origin, status, expires_at, paid_at, created_at \
            in rows:
        expires_at = _LINK_TIME(expires_at)
        found.append({"id": public_id, "url": pay_url + public_id, "checkout_url": checkout_url,
                      "monto": amount_json(amount, currency), "moneda": currency,
                      "cuota_external_id": installment_id, "origin": origin,
                      "status": "expired" if status == "active" and expires_at <= now else status,
                      "expires_at": isoformat(expires_at), "paid_at": stored_isoformat(paid_at),
                      "created_at": stored_isoformat(created_at)})
    return found
