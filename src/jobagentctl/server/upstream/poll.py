"""One upstream poll shared by every claimer waiting for the same agent.

A hundred idle agents long-polling the gateway must not become a hundred requests a second to
ctrlplane. So the claimers of one (workspace, agent) share the poll. It lists the agent's queued
jobs at most once per ``interval`` while someone waits. It backs off (doubling up to
``max_interval``) while ctrlplane fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from jobagentctl.errors import JobAgentError

__all__ = ["SharedPoll", "Snapshot"]


@dataclass(frozen=True)
class Snapshot:
    """One listing: when it was asked for (monotonic), the jobs (oldest first), or the error."""

    at: float
    items: list[dict[str, Any]] = field(default_factory=list)
    error: JobAgentError | None = None
    # Wall-clock time (epoch seconds) the listing was asked for: what ended here after it is
    # newer than the listing.
    wall: float = 0.0


class SharedPoll:
    """The poll of one agent (see the module docstring)."""

    def __init__(
        self,
        fetch: Callable[[], Awaitable[list[dict[str, Any]]]],
        *,
        interval: float,
        max_interval: float = 30.0,
    ) -> None:
        self._fetch = fetch
        self._interval = interval
        self._max_interval = max(max_interval, interval)
        self._errors = 0
        self._latest: Snapshot | None = None
        self._task: asyncio.Task[None] | None = None
        self.fetches = 0

    def _spacing(self) -> float:
        backoff: float = self._interval * 2.0 ** min(self._errors, 10)
        return min(backoff, self._max_interval)

    async def _run(self) -> None:
        latest = self._latest
        if latest is not None:
            await asyncio.sleep(max(0.0, latest.at + self._spacing() - time.monotonic()))
        at, wall = time.monotonic(), time.time()
        self.fetches += 1
        try:
            items = await self._fetch()
        except JobAgentError as exc:
            self._errors += 1
            self._latest = Snapshot(at, [], exc, wall)
        else:
            self._errors = 0
            self._latest = Snapshot(at, items, None, wall)

    def forget(self) -> None:
        """The next waiter asks afresh at once (a claim found the listing stale)."""
        if self._latest is not None and self._latest.error is None:
            latest = self._latest
            self._latest = Snapshot(latest.at - self._spacing(), latest.items, None, latest.wall)

    async def after(self, since: float, timeout: float, *stops: asyncio.Event) -> Snapshot | None:
        """The first listing asked for after ``since`` (monotonic), waiting up to ``timeout``
        seconds for it; None when the time ran out or one of ``stops`` was set first."""
        latest = self._latest
        if latest is not None and latest.at > since:
            return latest
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="jobagentctl-upstream-poll")
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(asyncio.shield(self._task))]
        waits += [asyncio.ensure_future(stop.wait()) for stop in stops]
        try:
            await asyncio.wait(
                waits, timeout=max(timeout, 0.0), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in waits:
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        latest = self._latest
        return latest if latest is not None and latest.at > since else None
