"""Reading a whole paginated list (``{items, total, limit, offset}``) page by page: by keyset
cursor where the server gives one (``nextCursor``), else by offset."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from jobagentctl.models import Page

__all__ = ["iter_cursor_pages", "iter_pages"]

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


def iter_cursor_pages(
    fetch: Callable[[int, int, str | None], Page[T]], *, limit: int = 200
) -> Iterator[T]:
    """Every item of a list that may page by cursor: ``fetch(limit, offset, cursor)``.

    While the server answers a ``nextCursor``, each page starts after the last one (a job
    that exists and matches for the whole listing comes exactly once, whatever writers do
    meanwhile); a server that never sends one (ctrlplane) is paged by offset, as
    :func:`iter_pages` does.
    """
    offset, cursor = 0, None
    while True:
        page = fetch(limit, offset, cursor)
        yield from page.items
        if "next_cursor" in page.model_fields_set:
            if page.next_cursor is None or not page.items:
                return
            cursor = page.next_cursor
            continue
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return
