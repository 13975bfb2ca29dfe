"""The reaper: one asyncio task per server process that returns expired claims to the queue.

Every replica runs one; the store's statement is safe under concurrency (each expired job is
requeued exactly once), so no leader election is needed. Database errors are logged and retried
on the next tick: a reaper that dies silently would leave crashed work stuck forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from jobagentctl.errors import JobAgentError
from jobagentctl.server.metrics import Metrics
from jobagentctl.server.store.base import ReapResult, Store

__all__ = ["Reaper"]

logger = logging.getLogger("jobagentctl.server.reaper")

# A tick never comes faster than this, whatever reap_interval says: a zero interval must not
# turn the reaper into a busy loop against the database.
_MIN_INTERVAL = 0.01


class Reaper:
    def __init__(
        self,
        store: Store,
        *,
        interval: float,
        batch_size: int,
        max_reclaims: int,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._interval = max(interval, _MIN_INTERVAL)
        self._batch_size = batch_size
        self._max_reclaims = max_reclaims
        self._metrics = metrics
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.passes = 0
        self.failures = 0

    def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._run(), name="jobagentctl-reaper")

    async def stop(self) -> None:
        """Stop after the current pass (a pass in flight finishes: its transaction commits)."""
        self._stop.set()
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run_once(self) -> ReapResult | None:
        """One pass; None when it failed (logged, counted)."""
        self.passes += 1
        try:
            result = await self._store.reap(self._batch_size, self._max_reclaims)
        except (JobAgentError, OSError) as exc:
            self._record_failure(exc)
            return None
        except Exception as exc:
            # Unexpected: keep the reaper alive anyway; the traceback helps find the bug.
            self.failures += 1
            if self._metrics is not None:
                self._metrics.reaper_errors.inc()
            logger.exception("reaper pass failed unexpectedly: %s", type(exc).__name__)
            return None
        if self._metrics is not None:
            if result.requeued:
                self._metrics.reaped.labels("requeued").inc(result.requeued)
            if result.failed:
                self._metrics.reaped.labels("failed").inc(result.failed)
        if result.total:
            logger.info(
                "reaped %d expired claim(s): %d requeued, %d failed (max reclaims)",
                result.total,
                result.requeued,
                result.failed,
            )
        return result

    def _record_failure(self, exc: BaseException) -> None:
        self.failures += 1
        if self._metrics is not None:
            self._metrics.reaper_errors.inc()
        message = getattr(exc, "message", None) or type(exc).__name__
        logger.warning("reaper pass failed, retrying in %.3gs: %s", self._interval, message)

    async def _run(self) -> None:
        logger.debug("reaper started (every %.3gs)", self._interval)
        while not self._stop.is_set():
            await self.run_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self._interval)
        logger.debug("reaper stopped")
