"""Reading a whole paginated list (``{items, total, limit, offset}``) page by page: by keyset cursor
where the server gives one (``nextCursor``), else by offset. And an attempt's log by its cursor, to
its end or following it live."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from jobagentctl.models import LogPage, Page

__all__ = ["LOG_FOLLOW_WAIT", "LogRead", "iter_cursor_pages", "iter_log_pages", "iter_pages"]

# A follow's long-poll asks the server to wait this long (it caps the wait at its
# maxWaitSeconds, 30 s by default): one request per quiet 25 s, an answer as soon as a chunk
# arrives or the attempt ends.
LOG_FOLLOW_WAIT = 25.0

# Reads one page of a log: (attempt or None for the latest, after seq, wait seconds or None).
LogRead = Callable[[int | None, int, float | None], LogPage]

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

    While the server answers a ``nextCursor``, each page starts after the last one. A job that
    exists and matches for the whole listing then comes exactly once, whatever writers do meanwhile.
    A server that never sends one (ctrlplane) is paged by offset, as :func:`iter_pages` does.
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


def iter_log_pages(
    read: LogRead,
    *,
    attempt: int | None = None,
    follow: bool = False,
    wait_seconds: float = LOG_FOLLOW_WAIT,
) -> Iterator[LogPage]:
    """The pages of an attempt's log from its first chunk. The attempt is the first page's (a
    newer attempt starting meanwhile does not switch a follow). Without ``follow``: until a
    page comes back empty. With it: long-polling until the attempt has ended and a read after
    its last chunk is empty (the last page says how it ended)."""
    after = 0
    while True:
        page = read(attempt, after, wait_seconds if follow else None)
        yield page
        attempt = page.attempt
        if page.chunks:
            after = page.chunks[-1].seq
        elif not follow or page.ended:
            return
