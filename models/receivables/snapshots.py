"""The ERP's debt snapshots written: created or updated in batches, or a block of new debts at once.

`upsert_debts` plans a batch of snapshots in memory against the stored state and writes it with
a handful of statements (the API's batch and the importer's blocks); `insert_new_debts` writes a
block of debts none of which is stored yet a column at a time (the importer's common case). The
statuses they store follow debts.py's rules. An import's block of new debts locks nothing: the
unique keys of debts and debtors stand between it and a concurrent writer, and a row they refuse
sends the whole block back to `upsert_debts`.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import operator
import sqlite3
from dataclasses import dataclass, field
from itertools import repeat

from peewee import IntegrityError

from models.clock import utcnow
from models.errors import Conflict, DomainError, NotFound
from models.numbers.tables import MessagingAccount
from models.receivables.columns import DebtColumns
from models.receivables.debts import debt_status, installment_status, restate, tenant_today
from models.receivables.inputs import INSTALLMENT_STATES, DebtorSpec, DebtSpec
from models.receivables.reminders import stop_collection
from models.receivables.tables import OPEN_DEBT, OPEN_INSTALLMENT, Debt, Debtor, Installment, debt_summary
from models.store.db import atomic, execute, is_postgres, placeholders

log = logging.getLogger("receivables")

# Bound values per INSERT statement: under SQLite's limit (32766) and PostgreSQL's (65535).
MAX_INSERT_PARAMS = 30000


class _NewInstallment:
    """An installment planned for insertion: plain attributes, none of the ORM's bookkeeping
    (an import plans hundreds of thousands; see bench/import_debts.py)."""

    __slots__ = ("id", "external_id", "numero", "monto", "amount_paid", "vence", "status", "declared_status")

    def __init__(self, external_id: str, number: int, amount: int, due_date: dt.date, declared_status: str):
        self.id = None
        self.external_id, self.numero, self.monto, self.vence = external_id, number, amount, due_date
        self.amount_paid, self.status, self.declared_status = 0, "", declared_status


class _NewDebt:
    """A debt planned for insertion (see _NewInstallment); attributes named as Debt's columns."""

    __slots__ = ("id", "tenant_id", "external_id", "account_id", "debtor_id", "moneda", "referencia",
                 "monto_original", "saldo_pendiente", "tipo", "auto_send", "status", "external_version",
                 "external_updated_at", "resolution", "row_version", "created_at", "updated_at")

    def __init__(self, tenant_id: int, external_id: str, now: dt.datetime, account_id: int | None = None,
                 currency: str = "", reference: str | None = None, original_amount: int = 0, balance: int = 0,
                 kind: str = "single", auto_send: bool = False, status: str = "pending",
                 external_version: int | None = None, external_updated_at: dt.datetime | None = None):
        self.id = self.debtor_id = self.resolution = None
        self.tenant_id, self.external_id, self.created_at, self.updated_at = tenant_id, external_id, now, now
        self.account_id, self.moneda, self.referencia, self.tipo = account_id, currency, reference, kind
        self.monto_original, self.saldo_pendiente = original_amount, balance
        self.auto_send, self.status, self.row_version = auto_send, status, 0
        self.external_version, self.external_updated_at = external_version, external_updated_at

    def summary(self) -> dict:
        return debt_summary(self)


class _NewDebtor:
    """A debtor planned for insertion (see _NewInstallment)."""

    __slots__ = ("id", "nombre", "documento", "telefono", "updated_at")

    def __init__(self, name: str, document: str | None, phone: str | None):
        self.id = None
        self.nombre, self.documento, self.telefono = name, document, phone


def bulk_insert(model, fields: list, rows: list[tuple], returning: list | None = None) -> list[tuple]:
    """Multi-row INSERTs of `rows` (tuples in the order of `fields`); the RETURNING rows if asked.

    Written directly rather than with `insert_many`: peewee rebuilds the SQL value by value,
    which costs ten times the insert itself at import volumes (see bench/import_debts.py).
    Values go to the driver as peewee would pass them (dates, datetimes, bools, ints), or as the
    driver would convert them (`_bound_once`).
    """
    tail = (" RETURNING " + ", ".join(f'"{field.column_name}"' for field in returning)) if returning else ""
    found: list[tuple] = []
    for cursor in _inserts(model, fields, rows, tail):
        if returning:
            found.extend(cursor.fetchall())
    return found


def _inserts(model, fields: list, rows: list[tuple], tail: str = ""):
    """`bulk_insert`'s statements, `tail` after each; yields each one's cursor."""
    columns = ", ".join(f'"{field.column_name}"' for field in fields)
    row_marks = "(" + ", ".join("?" * len(fields)) + ")"
    per_statement = max(1, MAX_INSERT_PARAMS // len(fields))
    for start in range(0, len(rows), per_statement):
        chunk = rows[start:start + per_statement]
        sql = f'INSERT INTO "{model._meta.table_name}" ({columns}) VALUES {", ".join([row_marks] * len(chunk))}{tail}'
        yield execute(sql, list(itertools.chain.from_iterable(chunk)))


def _insert_new(model, fields: list, columns: list, key_size: int) -> list[int]:
    """Insert rows none of which may be stored yet, given a column at a time in the order of
    `fields`, the last `key_size` of them (lists) a unique key; their ids, in order.

    Raises `_NotAllNew` when some row is stored already (the INSERT leaves it out), by this
    transaction's start or by a concurrent writer's commit; the caller rolls back.
    """
    size = len(columns[-1])
    if is_postgres():
        # In the order of the unique key: a concurrent writer inserting some of the same keys
        # waits for this one at the first key they share, never in a circle (docs/reliability.md).
        rows = sorted(zip(*columns, strict=True), key=lambda row: _nulls_last(row[-key_size:]))
        returned = _insert_skipping(model, fields, rows, returning=[model.id, *fields[-key_size:]])
        if len(returned) != size:
            raise _NotAllNew
        ids = {tuple(row[1:]): row[0] for row in returned}  # RETURNING promises no order
        return list(map(ids.__getitem__, zip(*columns[-key_size:], strict=True)))
    # SQLite writes one transaction at a time, and gives a new row the id after the highest one:
    # naming those ids here, as the floor of bench/import_debts.py does, spares a RETURNING.
    first = (execute(f'SELECT max("id") FROM "{model._meta.table_name}"').fetchone()[0] or 0) + 1
    ids = range(first, first + size)
    rows = list(zip(ids, *columns, strict=True))
    inserted = sum(cursor.rowcount for cursor in _inserts(model, [model.id, *fields], rows, " ON CONFLICT DO NOTHING"))
    if inserted != size:
        raise _NotAllNew
    return list(ids)


def _insert_skipping(model, fields: list, rows: list[tuple], returning: list) -> list[tuple]:
    """`bulk_insert` leaving out each row that a unique index already holds: only the rows
    inserted are returned."""
    tail = " ON CONFLICT DO NOTHING RETURNING " + ", ".join(f'"{field.column_name}"' for field in returning)
    return [row for cursor in _inserts(model, fields, rows, tail) for row in cursor.fetchall()]


def _bound_once(value):
    """`value` as the driver binds it, converted once for the many rows that share it.

    sqlite3 converts a datetime with a Python function at every use, about a microsecond
    each: four per imported debt. PostgreSQL's driver converts in C and gets the datetime.
    """
    return value if is_postgres() else sqlite3.adapt(value)


def _bound_day(bound: dict[dt.date, object], day: dt.date):
    """`day` as the driver binds it, kept in `bound` for the rows that share it: sqlite3 converts a
    date through a Python adapter at every binding (about a microsecond: three per imported debt),
    into `isoformat()` text, which is what this stores."""
    bound[day] = value = _bound_once(day)
    return value


def _is_stale(stored: Debt, spec: DebtSpec) -> bool:
    """Ordering: the first field both sides carry decides (version, then timestamp); else the write wins."""
    if spec.external_version is not None and stored.external_version is not None \
            and spec.external_version != stored.external_version:
        return spec.external_version < stored.external_version
    if spec.external_updated_at is not None and stored.external_updated_at is not None:
        return spec.external_updated_at < stored.external_updated_at
    return False


@dataclass(slots=True)
class UpsertResult:
    external_id: str | None
    action: str | None = None  # created, updated, ignored_stale
    debt: Debt | _NewDebt | None = None
    error: DomainError | None = None

    @property
    def success(self) -> bool:
        return self.error is None


@dataclass(slots=True)
class _DebtState:
    debt: Debt | _NewDebt
    installments: list[Installment]
    new: bool
    debtor: Debtor | None = None
    touched: bool = False
    changed_installments: dict[int, Installment] = field(default_factory=dict)


class _Batch:
    """Plans a batch of debt snapshots in memory, then writes it with a handful of statements.

    1. prefetch: the tenant's accounts named, the debts (locked) with their installments, and
       the debtors matching any document or phone in the batch: one query each;
    2. plan each snapshot in order against that state (a later element sees an earlier one);
       a business error (unknown account, identity conflict) rejects that element only, before
       anything of it is written. A debt neither stored nor named again in the batch is planned
       straight as its rows (`_plan_new`);
    3. flush: new debtors, debts and installments with multi-row INSERTs, changed rows with
       UPDATEs.
    """

    def __init__(self, tenant_id: int, today: dt.date):
        self.tenant_id = tenant_id
        self.today = today
        self.now = utcnow()
        self.accounts: dict[str, int] = {}
        self.debts: dict[str, _DebtState] = {}
        self.by_document: dict[str, Debtor] = {}
        self.by_phone: dict[str, Debtor] = {}
        self.new_debtors: list[Debtor] = []
        self.changed_debtors: dict[int, Debtor] = {}
        self.settled: list[int] = []  # stored debts this batch moved from open to paid
        # New debts planned by `_plan_new`: (the debt, its debtor, its installment rows, whose first
        # value, the debt's id, is known once the debt is inserted).
        self.new_rows: list[tuple[_NewDebt, Debtor | _NewDebtor, list[list]]] = []
        # A batch's due dates as the driver binds them, each converted once (see `_bound_day`).
        self.bound_days: dict[dt.date, object] = {}

    def apply(self, specs: list[DebtSpec]) -> list[UpsertResult]:
        external_ids = set(map(_EXTERNAL_ID, specs))
        self._prefetch(specs, list(external_ids))
        # A debt not stored yet and named once in the batch goes straight to its rows: nothing
        # later in the batch can revisit it (an import's common case; see bench/import_debts.py).
        # A batch naming a debt twice plans every element as state, so the later sees the earlier.
        if len(external_ids) == len(specs):
            debts, plan, plan_new = self.debts, self._plan, self._plan_new
            results = [plan(spec) if spec.external_id in debts else plan_new(spec) for spec in specs]
        else:
            results = [self._plan(spec) for spec in specs]
        self._flush()
        return results

    def _prefetch(self, specs: list[DebtSpec], external_ids: list[str]) -> None:
        # Hand-written SQL for every lookup of a batch: peewee would spend longer building the
        # statements (the IN lists hold a whole batch) than the database spends answering.
        tenant = self.tenant_id
        # The keys gathered with map and attrgetter: a batch's worth of them, at C speed.
        names = list(set(map(_ACCOUNT_NAME, specs)))
        self.accounts = dict(execute(f'SELECT "public_id", "id" FROM "{_ACCOUNT_TABLE}" WHERE "tenant_id" = ? '
                                     f'AND "public_id" IN ({placeholders(len(names))})', [tenant, *names]).fetchall())
        # Lock and find in one statement (the lock is what serializes writers; see debts.py). On
        # PostgreSQL the rows are locked in ascending id, the receivables' lock order
        # (docs/reliability.md): two batches naming the same stored debts in other orders then
        # wait for each other instead of deadlocking. SQLite runs one writer at a time.
        in_order = ' ORDER BY "id" FOR UPDATE' if is_postgres() else ""
        locked = execute(f'UPDATE "debt" SET "row_version" = "row_version" + 1 WHERE "id" IN (SELECT "id" FROM "debt" '
                         f'WHERE "tenant_id" = ? AND "external_id" IN ({placeholders(len(external_ids))}){in_order}) '
                         'RETURNING "id"', [tenant, *external_ids])
        existing_ids = [row[0] for row in locked.fetchall()]
        if existing_ids:
            existing = list(Debt.select().where(Debt.id.in_(existing_ids)))
            schedules: dict[int, list] = {debt.id: [] for debt in existing}
            for item in Installment.select().where(Installment.debt.in_(existing_ids)).order_by(Installment.id):
                schedules[item.debt_id].append(item)
            for debt in existing:
                self.debts[debt.external_id] = _DebtState(debt, schedules[debt.id], new=False)
        documents = list(set(filter(None, map(_DOCUMENT, specs))))
        phones = list(set(filter(None, map(_PHONE, specs))))
        # One query per key rather than `documento IN (..) OR telefono IN (..)`: SQLite would
        # answer the OR by scanning every debtor of the tenant, once per batch.
        found: dict[int, tuple] = {}
        for column, values in (("documento", documents), ("telefono", phones)):
            if values:
                rows = execute(f'SELECT "id", "nombre", "documento", "telefono" FROM "debtor" WHERE "tenant_id" = ? '
                               f'AND "{column}" IN ({placeholders(len(values))})', [tenant, *values])
                found.update((row[0], row) for row in rows.fetchall())
        for debtor_id, name, document, phone in found.values():
            self._index_debtor(Debtor(id=debtor_id, tenant=tenant, nombre=name, documento=document, telefono=phone))

    def _index_debtor(self, debtor: Debtor) -> None:
        if debtor.documento:
            self.by_document[debtor.documento] = debtor
        if debtor.telefono:
            self.by_phone[debtor.telefono] = debtor

    def _plan(self, spec: DebtSpec) -> UpsertResult:
        account_id = self.accounts.get(spec.account_id)
        if account_id is None:
            return UpsertResult(spec.external_id, error=NotFound(
                f"no account {spec.account_id}", code="account_not_found", details={"account_id": spec.account_id}))
        state = self.debts.get(spec.external_id)
        if state is not None and _is_stale(state.debt, spec):
            return UpsertResult(spec.external_id, "ignored_stale", state.debt)
        try:
            debtor = self._debtor_for(spec.debtor)
        except Conflict as error:
            return UpsertResult(spec.external_id, error=error)
        action = "updated"
        if state is None:
            action = "created"
            state = self.debts[spec.external_id] = _DebtState(_NewDebt(self.tenant_id, spec.external_id, self.now),
                                                              [], new=True)
        was_open = state.debt.status in OPEN_DEBT
        self._apply_fields(state, spec, account_id, debtor)
        self._apply_schedule(state, spec)
        for item in restate(state.debt, state.installments, self.today):
            if item.id is not None:
                state.changed_installments[item.id] = item
        if was_open and state.debt.status == "paid" and state.debt.id is not None:
            self.settled.append(state.debt.id)
        state.touched = True
        return UpsertResult(spec.external_id, action, state.debt)

    def _plan_new(self, spec: DebtSpec) -> UpsertResult:
        """`_plan` of a debt that is not stored and not planned yet: the same checks in the same
        order, the same fields and statuses, written as the rows `_flush` inserts."""
        account_id = self.accounts.get(spec.account_id)
        if account_id is None:
            return UpsertResult(spec.external_id, error=NotFound(
                f"no account {spec.account_id}", code="account_not_found", details={"account_id": spec.account_id}))
        try:
            debtor = self._debtor_for(spec.debtor)
        except Conflict as error:
            return UpsertResult(spec.external_id, error=error)
        today, bound_days = self.today, self.bound_days
        installments = []
        overdue = False
        # A new debt has nothing paid on any installment and no resolution.
        for item in spec.installments or ():
            declared = item.status or "pending"
            due_date = item.due_date
            status = installment_status(declared, item.amount, 0, due_date, today)
            overdue = overdue or status == "overdue"
            # The row as inserted, the debt's id left for `_flush` to fill in.
            installments.append([None, item.external_id, item.number, item.amount, 0,
                                 bound_days.get(due_date) or _bound_day(bound_days, due_date), status, declared])
        kind = spec.kind if spec.kind is not None else "installments" if spec.installments else "single"
        debt = _NewDebt(self.tenant_id, spec.external_id, self.now, account_id, spec.currency, spec.reference,
                        spec.original_amount, spec.balance, kind,
                        spec.auto_send if spec.auto_send is not None else False,
                        debt_status(None, spec.balance, spec.original_amount, overdue),
                        spec.external_version, spec.external_updated_at)
        self.new_rows.append((debt, debtor, installments))
        return UpsertResult(spec.external_id, "created", debt)

    def _debtor_for(self, named: DebtorSpec) -> Debtor:
        by_document = self.by_document.get(named.document) if named.document else None
        by_phone = self.by_phone.get(named.phone) if named.phone else None
        # The phone is a second key: it may not name someone other than the document does, nor
        # someone already known under another document.
        if by_phone is not None and (
                (by_document is not None and by_document is not by_phone)
                or (by_document is None and named.document and by_phone.documento)):
            raise Conflict("the document and the phone belong to different debtors",
                           code="debtor_identity_conflict",
                           details={"documento": named.document, "telefono": named.phone})
        debtor = by_document or by_phone
        if debtor is None:
            debtor = _NewDebtor(named.name, named.document, named.phone)
            self.new_debtors.append(debtor)
            self._index_debtor(debtor)
            return debtor
        changes = {"nombre": named.name}  # Debtor's columns, set below
        if named.document and not debtor.documento:
            changes["documento"] = named.document
        if named.phone and named.phone != debtor.telefono:
            # Phones change; the document is the stable key. The old number is let go.
            if debtor.telefono:
                self.by_phone.pop(debtor.telefono, None)
            changes["telefono"] = named.phone
        if any(getattr(debtor, name) != value for name, value in changes.items()):
            for name, value in changes.items():
                setattr(debtor, name, value)
            debtor.updated_at = self.now
            self._index_debtor(debtor)
            if debtor.id is not None:
                self.changed_debtors[debtor.id] = debtor
        return debtor

    def _apply_fields(self, state: _DebtState, spec: DebtSpec, account_id: int, debtor: Debtor) -> None:
        debt = state.debt
        debt.account_id = account_id
        state.debtor = debtor
        debt.moneda = spec.currency
        debt.monto_original = spec.original_amount
        debt.saldo_pendiente = spec.balance
        if spec.reference_given or state.new:
            debt.referencia = spec.reference
        if spec.auto_send is not None:
            debt.auto_send = spec.auto_send
        if spec.kind is not None:
            debt.tipo = spec.kind
        elif spec.installments:
            debt.tipo = "installments"
        # Only overwrite an ordering field with a value: a write without one keeps the last known.
        if spec.external_version is not None:
            debt.external_version = spec.external_version
        if spec.external_updated_at is not None:
            debt.external_updated_at = spec.external_updated_at
        debt.updated_at = self.now

    def _apply_schedule(self, state: _DebtState, spec: DebtSpec) -> None:
        """The three installment rules: absent keeps; [] cancels the open ones; a snapshot updates
        the installments it lists and cancels the open ones it does not. Paid ones always stay."""
        if spec.installments is None:
            return
        if not state.installments:
            # Nothing stored to match or cancel: a new debt, the import's common case.
            state.installments = [_NewInstallment(item.external_id, item.number, item.amount, item.due_date,
                                                  item.status or "pending") for item in spec.installments]
            return
        received = {item.external_id: item for item in spec.installments}
        known = {item.external_id: item for item in state.installments}
        for item in state.installments:
            if item.external_id not in received and item.status in OPEN_INSTALLMENT:
                item.declared_status = "cancelled"
                if item.id is not None:
                    state.changed_installments[item.id] = item
        for incoming in spec.installments:
            item = known.get(incoming.external_id)
            declared = incoming.status or "pending"
            if item is None:
                item = _NewInstallment(incoming.external_id, incoming.number, incoming.amount, incoming.due_date,
                                       declared)
                state.installments.append(item)
                continue
            item.numero, item.monto, item.vence = incoming.number, incoming.amount, incoming.due_date
            item.declared_status = declared
            if item.id is not None:
                state.changed_installments[item.id] = item

    def _flush(self) -> None:
        if self.new_debtors:
            self._insert_debtors()
        # Ascending id, as every other writer of several debtors (docs/reliability.md).
        for _debtor_id, debtor in sorted(self.changed_debtors.items(), key=_FIRST_ITEM):
            debtor.save(only=[Debtor.nombre, Debtor.documento, Debtor.telefono, Debtor.updated_at])
        touched = [state for state in self.debts.values() if state.touched]
        for state in touched:
            state.debt.debtor_id = state.debtor.id
        new_states = [state for state in touched if state.new]
        for debt, debtor, _installments in self.new_rows:
            debt.debtor_id = debtor.id
        if new_states or self.new_rows:
            self._insert_debts([state.debt for state in new_states] + [debt for debt, _d, _i in self.new_rows])
        for state in touched:
            if not state.new:
                state.debt.save(only=_DEBT_UPDATE_FIELDS)
        rows = []
        for state in touched:
            debt_id = state.debt.id
            for item in state.installments:
                if item.id is None:
                    rows.append((debt_id, item.external_id, item.numero, item.monto, item.amount_paid, item.vence,
                                 item.status, item.declared_status))
            for item in state.changed_installments.values():
                item.save(only=[Installment.numero, Installment.monto, Installment.vence, Installment.status,
                                Installment.declared_status])
        for debt, _debtor, installments in self.new_rows:
            debt_id = debt.id
            for row in installments:
                row[0] = debt_id
            rows.extend(installments)
        if rows:
            bulk_insert(Installment, _INSTALLMENT_COLUMNS, rows)
        stop_collection(self.settled)

    def _insert_debtors(self) -> None:
        now = _bound_once(self.now)
        # Inserted in the order of their keys: a concurrent batch inserting some of the same
        # debtors waits for this one at its first shared key instead of deadlocking at a later one.
        rows = sorted(((self.tenant_id, d.nombre, d.documento, d.telefono, now, now) for d in self.new_debtors),
                      key=_debtor_key)
        returned = bulk_insert(Debtor, [Debtor.tenant, Debtor.nombre, Debtor.documento, Debtor.telefono,
                                        Debtor.created_at, Debtor.updated_at], rows,
                               returning=[Debtor.id, Debtor.documento, Debtor.telefono])
        # Matched by natural key rather than by position: RETURNING promises no order.
        ids_by_key = {("d", document) if document else ("t", phone): debtor_id
                      for debtor_id, document, phone in returned}
        for debtor in self.new_debtors:
            debtor.id = ids_by_key[("d", debtor.documento) if debtor.documento else ("t", debtor.telefono)]

    def _insert_debts(self, debts: list[_NewDebt]) -> None:
        # A new debt's created_at and updated_at are the batch's moment.
        row_of, stamps = _DEBT_INSERT_ROW, (_bound_once(self.now),) * 2
        # In the order of their keys, as the debtors above.
        rows = [row_of(debt) + stamps for debt in sorted(debts, key=_EXTERNAL_ID)]
        returned = bulk_insert(Debt, _DEBT_INSERT_COLUMNS, rows, returning=[Debt.id, Debt.external_id])
        ids = {external_id: debt_id for debt_id, external_id in returned}
        for debt in debts:
            debt.id = ids[debt.external_id]


def _nulls_last(key: tuple) -> tuple:
    """A unique key made sortable when some of its values are NULL (a debtor without a phone)."""
    return tuple((value is None, value or "") for value in key)


def _debtor_key(row: tuple) -> tuple:
    return _nulls_last(row[2:4])  # (documento, telefono) of a row of `_insert_debtors`


_ACCOUNT_TABLE = MessagingAccount._meta.table_name
_FIRST_ITEM = operator.itemgetter(0)
_EXTERNAL_ID, _ACCOUNT_NAME = operator.attrgetter("external_id"), operator.attrgetter("account_id")
_DOCUMENT, _PHONE = operator.attrgetter("debtor.document"), operator.attrgetter("debtor.phone")
_DEBT_INSERT_COLUMNS = [Debt.tenant, Debt.external_id, Debt.account, Debt.debtor, Debt.moneda, Debt.referencia,
                        Debt.monto_original, Debt.saldo_pendiente, Debt.tipo, Debt.auto_send, Debt.status,
                        Debt.external_version, Debt.external_updated_at, Debt.resolution, Debt.row_version,
                        Debt.created_at, Debt.updated_at]
# Every column but the two timestamps, which come last.
_DEBT_INSERT_ROW = operator.attrgetter(*(field.column_name for field in _DEBT_INSERT_COLUMNS[:-2]))
# A new debt's columns (no resolution) with the unique key last, for `_insert_new`.
_NEW_DEBT_COLUMNS = [Debt.tenant, Debt.account, Debt.debtor, Debt.moneda, Debt.referencia, Debt.monto_original,
                     Debt.saldo_pendiente, Debt.tipo, Debt.auto_send, Debt.status, Debt.external_version,
                     Debt.external_updated_at, Debt.row_version, Debt.created_at, Debt.updated_at, Debt.external_id]
_INSTALLMENT_COLUMNS = [Installment.debt, Installment.external_id, Installment.numero, Installment.monto,
                        Installment.amount_paid, Installment.vence, Installment.status, Installment.declared_status]
_DEBT_UPDATE_FIELDS = [Debt.account, Debt.debtor, Debt.moneda, Debt.referencia, Debt.monto_original,
                       Debt.saldo_pendiente, Debt.tipo, Debt.auto_send, Debt.status, Debt.external_version,
                       Debt.external_updated_at, Debt.updated_at]


# Each refused attempt has waited for the writer it met to commit, so the next one sees its rows:
# only writers inserting yet more of the batch's new keys meanwhile can refuse it again.
_WHOLE_BATCH_ATTEMPTS = 5


def upsert_debts(tenant_id: int, specs: list[DebtSpec], *, today: dt.date | None = None) -> list[UpsertResult]:
    """Create or update debts from ERP snapshots, one result per spec, in the caller's order.

    Elements are independent: a business error rejects that element and the others are saved.
    The batch is planned and written together (fast); if the database refuses the combined
    write (a concurrent writer created the same debt or debtor meanwhile), the batch is undone
    and planned again, now seeing that writer's rows; if it is refused every time, each element
    is applied alone in its own savepoint.

    Planned again whole rather than at once one by one: a whole batch takes its locks in the
    lock order (docs/reliability.md), while elements applied one by one take them in the
    caller's order, which two overlapping imports do not share.
    """
    if not specs:
        return []
    today = today or tenant_today(tenant_id)
    with atomic():
        for _attempt in range(_WHOLE_BATCH_ATTEMPTS):
            try:
                with atomic():
                    return _Batch(tenant_id, today).apply(specs)
            except IntegrityError:
                log.info("batch of %d debts conflicted with a concurrent write", len(specs))
        log.info("applying the batch of %d debts one by one", len(specs))
        return [_upsert_alone(tenant_id, spec, today) for spec in specs]


# An installment's declared status from its CSV cell: an empty cell declares it pending.
_DECLARED = {"": "pending", **{status: status for status in INSTALLMENT_STATES}}
_PENDING = frozenset(("", "pending"))


class _NotAllNew(Exception):
    """A block of new debts names a stored debt or debtor (see `insert_new_debts`)."""


def insert_new_debts(tenant_id: int, columns: DebtColumns, *, today: dt.date | None = None) -> bool:
    """`upsert_debts(tenant_id, columns.specs())` for a block of debts of which none is stored, each
    with a debtor of its own that is not stored either: the import's common case, written a
    column at a time in one transaction. Anything else (a stored debt or debtor, a debtor named
    twice, an unknown account, a concurrent writer) writes nothing and gives False: the caller
    then upserts the specs, which decides each case as the API does.
    """
    documents = list(filter(None, columns.documents))
    phones = list(filter(None, columns.phones))
    if len(set(documents)) != len(documents) or len(set(phones)) != len(phones):
        return False
    today = today or tenant_today(tenant_id)
    try:
        with atomic():
            _insert_new_debts(tenant_id, columns, today)
    except _NotAllNew:
        return False
    return True


def _insert_new_debts(tenant_id: int, columns: DebtColumns, today: dt.date) -> None:
    names = list(set(columns.account_ids))
    accounts = dict(execute(f'SELECT "public_id", "id" FROM "{_ACCOUNT_TABLE}" WHERE "tenant_id" = ? '
                            f'AND "public_id" IN ({placeholders(len(names))})', [tenant_id, *names]).fetchall())
    if len(accounts) != len(names):
        raise _NotAllNew
    # Nothing to lock: a debt or debtor stored already (even by a concurrent writer) is a row
    # the INSERT leaves out, and then the block is not all new.
    external_ids = columns.external_ids
    now = _bound_once(utcnow())
    size = len(external_ids)
    debtor_ids = _insert_new(Debtor, [Debtor.tenant, Debtor.nombre, Debtor.created_at, Debtor.updated_at,
                                      Debtor.documento, Debtor.telefono],
                             [repeat(tenant_id, size), columns.names, repeat(now, size), repeat(now, size),
                              columns.documents, columns.phones], 2)

    # A new installment has nothing paid: its status follows from what is declared and its due
    # date alone, worked out once for each pair in the block.
    due_dates, installment_statuses = columns.due_dates, columns.statuses
    if _PENDING.issuperset(installment_statuses):  # an import's usual case: nothing declared but pending
        declared = repeat("pending")
        status_of_day = {day: "overdue" if day < today else "pending" for day in set(due_dates)}
        installment_statuses = list(map(status_of_day.__getitem__, due_dates))
    else:
        declared = list(map(_DECLARED.__getitem__, installment_statuses))
        pairs = list(zip(declared, due_dates, strict=True))
        status_of = {pair: installment_status(pair[0], 1, 0, pair[1], today) for pair in set(pairs)}
        installment_statuses = list(map(status_of.__getitem__, pairs))
    debt_overdue = set(itertools.compress(columns.row_debts,
                                          map(operator.eq, installment_statuses, repeat("overdue"))))
    balances, originals = columns.balances, columns.original_amounts
    if not debt_overdue and 0 not in balances and all(map(operator.ge, balances, originals)):
        statuses = repeat("pending", size)  # nothing paid, nothing overdue
    else:
        statuses = [debt_status(None, balance, original, external_id in debt_overdue)
                    for external_id, balance, original in zip(external_ids, balances, originals, strict=True)]
    kinds = columns.kinds
    debt_ids = _insert_new(Debt, _NEW_DEBT_COLUMNS, [
        repeat(tenant_id, size), map(accounts.__getitem__, columns.account_ids), debtor_ids, columns.currencies,
        columns.references, originals, balances, [kind or "installments" for kind in kinds] if None in kinds else kinds,
        map(operator.is_, columns.auto_sends, repeat(True)), statuses, columns.versions, columns.updated_ats,
        repeat(0, size), repeat(now, size), repeat(now, size), external_ids], 1)
    days = {day: _bound_once(day) for day in set(due_dates)}
    bulk_insert(Installment, _INSTALLMENT_COLUMNS, list(zip(
        itertools.chain.from_iterable(map(repeat, debt_ids, columns.counts)), columns.installment_ids, columns.numbers,
        columns.amounts, repeat(0), map(days.__getitem__, due_dates), installment_statuses, declared)))


def _upsert_alone(tenant_id: int, spec: DebtSpec, today: dt.date) -> UpsertResult:
    for _attempt in range(2):
        try:
            with atomic():
                return _Batch(tenant_id, today).apply([spec])[0]
        except IntegrityError:
            continue  # the concurrent row is committed now: the next plan sees it
    return UpsertResult(spec.external_id, error=Conflict(
        "the debt changed concurrently; retry", code="concurrent_update"))


def upsert_debt(tenant_id: int, spec: DebtSpec, *, today: dt.date | None = None) -> UpsertResult:
    """One debt; a business error is raised (404 account_not_found, 409 debtor_identity_conflict)."""
    result = upsert_debts(tenant_id, [spec], today=today)[0]
    if result.error is not None:
        raise result.error
    return result
