"""The base model every table derives from."""

from __future__ import annotations

import orjson
from peewee import Model, TextField

from models.store.db import db


class BaseModel(Model):
    class Meta:
        database = db
        legacy_table_names = False

    @classmethod
    def from_row(cls, **columns):
        """The instance a SELECT of these columns would give (foreign keys by their id), built
        without the per-field setters and default factories that `Model(...)` runs: the hot reads
        (the key of every request, the wallet) build one per request."""
        instance = cls.__new__(cls)
        instance.__data__ = columns
        instance._dirty = set()
        instance.__rel__ = {}
        return instance


class JSONField(TextField):
    """JSON stored as text: one representation on SQLite and PostgreSQL alike."""

    def db_value(self, value):
        return None if value is None else orjson.dumps(value).decode()

    def python_value(self, value):
        return None if value is None else orjson.loads(value)
