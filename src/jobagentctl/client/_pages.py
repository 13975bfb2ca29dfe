"""Reading a whole paginated list (``{items, total, limit, offset}``) page by page."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from jobagentctl.models import Page

__all__ = ["iter_pages"]

T = TypeVar("T")


def iter_pages(fetch: Callable[[int, int], Page[T]], *, limit: int = 200) -> Iterator[T]:
    """Every item of a paginated list: ``fetch(limit, offset)`` until ``total`` is reached."""
    offset = 0
    while True:
        page = fetch(limit, offset)
        yield from page.items
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return
