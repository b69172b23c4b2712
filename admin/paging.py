"""Pagination from the query string: ``?page=N`` (1-based), a fixed page size per table."""

from __future__ import annotations

import math
from dataclasses import dataclass

from starlette.requests import Request

from proxy.core.errors import BadRequest

MAX_PAGE = 1_000_000


@dataclass(frozen=True)
class Page:
    number: int
    size: int
    total: int = 0

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    @property
    def count(self) -> int:
        return max(1, math.ceil(self.total / self.size))

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.count

    def with_total(self, total: int) -> Page:
        return Page(self.number, self.size, total)


def page_of(request: Request, *, size: int) -> Page:
    raw = request.query_params.get("page") or "1"
    try:
        number = int(raw)
    except ValueError:
        raise BadRequest("page must be a whole number") from None
    if not 1 <= number <= MAX_PAGE:
        raise BadRequest(f"page must be between 1 and {MAX_PAGE}")
    return Page(number, size)
