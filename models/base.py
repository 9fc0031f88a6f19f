"""The base model every table derives from."""

from __future__ import annotations

import orjson
from peewee import Model, TextField

from models.db import db


class BaseModel(Model):
    class Meta:
        database = db
        legacy_table_names = False


class JSONField(TextField):
    """JSON stored as text: one representation on SQLite and PostgreSQL alike."""

    def db_value(self, value):
        return None if value is None else orjson.dumps(value).decode()

    def python_value(self, value):
        return None if value is None else orjson.loads(value)
