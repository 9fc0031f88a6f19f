"""Building blocks of input schemas, for every layer: the strict base and common field types.

The domain validates what it is given with these (a campaign spec from the API, a CSV row, a
reminder run); the API builds its request bodies from the same blocks, and its OpenAPI document
from those bodies.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints


class Input(BaseModel):
    """Request bodies: unknown fields and type coercion are refused, as a typo should be."""

    model_config = ConfigDict(extra="forbid", strict=True)


HttpsUrl = Annotated[str, StringConstraints(max_length=1000, pattern=r"^https://[^\s/?#]+[^\s]*$")]
Email = Annotated[str, StringConstraints(max_length=255, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]


def text(max_length: int, min_length: int = 0):
    return Annotated[str, StringConstraints(max_length=max_length, min_length=min_length)]
