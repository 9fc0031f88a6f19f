"""Schema building blocks shared by every area: envelopes, pages, and (from models/inputs.py)
the input base and common field types."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from api.pagination import MAX_PAGE
from models.inputs import Email, HttpsUrl, Input, text

__all__ = ["Email", "HttpsUrl", "Input", "text"]  # re-exported for the API's request bodies

T = TypeVar("T")


class Output(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    message: str
    code: str
    details: dict[str, Any]


class ErrorEnvelope(BaseModel):
    success: bool = False
    error: ErrorBody
    message: str | None = Field(None, description="present on 429")


class Success(BaseModel, Generic[T]):
    success: bool = True
    data: T


class DataOnly(BaseModel, Generic[T]):
    data: T


class Links(BaseModel):
    first: str | None
    last: str | None
    prev: str | None
    next: str | None


class PageMeta(BaseModel):
    current_page: int
    # `from` is a Python keyword; the alias is what goes on the wire.
    from_: int | None = Field(alias="from")
    last_page: int
    path: str
    per_page: int
    to: int | None
    total: int


class Page(BaseModel, Generic[T]):
    data: list[T]
    links: Links
    meta: PageMeta


PAGE_QUERY = (
    ("page", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 1}, "page number"),
    ("per_page", {"type": "integer", "minimum": 1, "maximum": 100, "default": 50}, "items per page"),
)
