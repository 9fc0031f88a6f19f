"""Key rotation: every secret stored at rest re-encrypted under the first SVC_SECRET_KEY.

Rotating is: put a new key first, restart, run `rotate()` (`svcctl secrets rotate`) until it
reports nothing left under an old key, then remove the old keys. Nothing stops working at any
step, because every process can read both old and new ciphertexts throughout
(models/store/secrets.py).

A column that holds ciphertexts is declared as `EncryptedText`, which is how `rotate()` finds it.
Finding them means importing every table of every package, so this sits with operations, above
them all.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from cryptography.fernet import InvalidToken
from peewee import Model

import models
from models.store.base import BaseModel
from models.store.db import atomic
from models.store.secrets import EncryptedText, configured_keys

# Rows re-encrypted per transaction: short transactions, so the rows a batch holds locked are
# never in a sender's way for long.
ROTATE_BATCH = 100


def encrypted_columns() -> list[tuple[type[Model], EncryptedText]]:
    """Every `EncryptedText` column of every table. Every module of every package under models/
    is imported first: a table is found wherever it lives, and only if its module is imported."""
    for module in pkgutil.walk_packages(models.__path__, "models."):
        importlib.import_module(module.name)

    def tables(base: type[Model]) -> Iterator[type[Model]]:
        for sub in base.__subclasses__():
            yield sub
            yield from tables(sub)

    columns = []
    for table in sorted(set(tables(BaseModel)), key=lambda model: model._meta.table_name):
        for column in table._meta.sorted_fields:
            if isinstance(column, EncryptedText):
                columns.append((table, column))
    return columns


@dataclass
class ColumnRotation:
    column: str
    rotated: int = 0
    current: int = 0  # already under the first key
    plain: int = 0  # not a token (a column that may hold plain text)
    unreadable: int = 0  # a token no configured key opens


@dataclass
class Rotation:
    columns: list[ColumnRotation] = field(default_factory=list)

    @property
    def rotated(self) -> int:
        return sum(column.rotated for column in self.columns)

    @property
    def unreadable(self) -> int:
        return sum(column.unreadable for column in self.columns)


def rotate(batch: int = ROTATE_BATCH, progress: Callable[[ColumnRotation], None] | None = None) -> Rotation:
    """Re-encrypt every stored secret under the first key.

    1. For each encrypted column, walk its rows by primary key, `batch` at a time.
    2. A value the first key opens is left alone, so running it again (after an interruption,
       or to check) only costs the reads.
    3. Any other token is re-encrypted and written back in the batch's transaction, only if the
       row still holds the value read (a concurrent change is never overwritten; the next run
       picks it up if it was written under an old key).
    """
    multi, current = configured_keys()
    report = Rotation()
    for table, column in encrypted_columns():
        counts = ColumnRotation(f"{table._meta.table_name}.{column.column_name}")
        report.columns.append(counts)
        primary = table._meta.primary_key
        last = None
        while True:
            query = table.select(primary, column).where(column.is_null(False))
            if last is not None:
                query = query.where(primary > last)
            rows = list(query.order_by(primary).limit(batch).tuples())
            if not rows:
                break
            last = rows[-1][0]
            with atomic():
                for key, value in rows:
                    token = value.encode()
                    try:
                        current.decrypt(token)
                        counts.current += 1
                        continue
                    except InvalidToken:
                        pass
                    try:
                        fresh = multi.rotate(token).decode()
                    except InvalidToken:
                        if value.startswith("gAAAAA"):
                            counts.unreadable += 1
                        else:
                            counts.plain += 1
                        continue
                    counts.rotated += (table.update({column: fresh})
                                       .where((primary == key) & (column == value)).execute())
            if progress:
                progress(counts)
    return report
