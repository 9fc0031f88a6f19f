"""Schema building blocks shared by every area: input base, common field types, envelopes."""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from api.pagination import MAX_PAGE

T = TypeVar("T")


class Input(BaseModel):
    """Request bodies: unknown fields and type coercion are refused, as a typo should be."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Output(BaseModel):
    model_config = ConfigDict(extra="allow")


HttpsUrl = Annotated[str, StringConstraints(max_length=1000, pattern=r"^https://[^\s/?#]+[^\s]*$")]
Email = Annotated[str, StringConstraints(max_length=255, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]


def text(max_length: int, min_length: int = 0):
    return Annotated[str, StringConstraints(max_length=max_length, min_length=min_length)]


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
