"""The reaper: one asyncio task per server process that returns expired claims to the queue.

Every replica runs one; the store's statement is safe under concurrency (each expired job is
requeued exactly once), so no leader election is needed. Database errors are logged and retried
on the next tick: a reaper that dies silently would leave crashed work stuck forever.

Outage grace: while the store is unreachable, agents' heartbeats fail too, so their leases run
out through no fault of theirs. A pass that fails marks an outage, taken to have begun at the last
pass that worked. After the store is back, a lease that ran out since the outage began is spared for
a while. It is not reaped until one heartbeat interval has passed since the first pass that worked
again. That interval is lease/3 within [1 s, 60 s], as `run` heartbeats. An agent that kept trying
gets its heartbeat in within that interval (its retries are capped at it) and revives its lease. A
dead agent's job is requeued at most one heartbeat interval + one reap interval after the store is
back. The grace is this process's view. A replica that saw no failed pass reaps as usual. A server
restarted during the outage knows nothing of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from jobagentctl.errors import JobAgentError
from jobagentctl.models import HEARTBEAT_INTERVAL_MAX
from jobagentctl.server.http.metrics import Metrics
from jobagentctl.server.store import OutageGrace, ReapResult, Store

__all__ = ["Reaper"]

logger = logging.getLogger("jobagentctl.server.reaper")

# A tick never comes faster than this, whatever reap_interval says: a zero interval must not
# turn the reaper into a busy loop against the database.
_MIN_INTERVAL = 0.01

# Log retention per pass: batches of this many attempts' logs (each up to the log cap), at most
# _LOG_BATCHES of them, so that a backlog drains over a few passes without one long pass.
_LOG_BATCH = 20
_LOG_BATCHES = 10


class Reaper:
    """The periodic sweep of one process (see the module docstring); ``run_once`` is one pass."""

    def __init__(
        self,
        store: Store,
        *,
        interval: float,
        batch_size: int,
        max_reclaims: int,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        log_retention: float | None = None,
        reap_with: Callable[[int, int, OutageGrace | None], Awaitable[ReapResult]] | None = None,
    ) -> None:
        """``log_retention``: seconds after an attempt's end its log is deleted, by each pass
        (None or infinite: never). ``reap_with``: the pass instead of the store's ``reap`` (the
        gateway's, which requeues in ctrlplane)."""
        self._store = store
        self._reap = reap_with or store.reap
        self._log_retention = log_retention
        self._interval = max(interval, _MIN_INTERVAL)
        self._batch_size = batch_size
        self._max_reclaims = max_reclaims
        self._metrics = metrics
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.passes = 0
        self.failures = 0
        self._clock = clock
        self._last_ok: float | None = None  # start of the last pass that worked
        self._outage_began: float | None = None
        self._outage_ended: float | None = None

    def start(self) -> None:
        """Start sweeping every ``interval`` seconds (no-op when already started)."""
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
        now = self._clock()
        try:
            result = await self._reap(self._batch_size, self._max_reclaims, self.grace(now))
        except (JobAgentError, OSError) as exc:
            self._outage(now)
            self._record_failure(exc)
            return None
        except Exception as exc:
            # Unexpected: keep the reaper alive anyway; the traceback helps find the bug.
            self.failures += 1
            if self._metrics is not None:
                self._metrics.reaper_errors.inc()
            logger.exception("reaper pass failed unexpectedly: %s", type(exc).__name__)
            return None
        self._last_ok = now
        if self._outage_began is not None and self._outage_ended is None:
            self._outage_ended = now
            logger.info("store back after an outage: expired leases get one heartbeat interval")
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
        await self.expire_logs()
        return result

    async def expire_logs(self) -> int:
        """Delete the logs past retention, a few batches; how many attempts' logs went. A
        failure is logged and counted: the next pass retries."""
        retention = self._log_retention
        if retention is None or retention == float("inf"):
            return 0
        expired = 0
        try:
            for _ in range(_LOG_BATCHES):
                batch = await self._store.logs.expire_logs(retention, _LOG_BATCH)
                expired += batch
                if batch < _LOG_BATCH:
                    break
        except JobAgentError as exc:
            self._record_failure(exc)
        if expired and self._metrics is not None:
            self._metrics.logs_expired.inc(expired)
        return expired

    def grace(self, now: float) -> OutageGrace | None:
        """The outage the next pass (at ``now``) must spare, if any."""
        if self._outage_began is None:
            return None
        ended = now if self._outage_ended is None else self._outage_ended
        if now - ended >= HEARTBEAT_INTERVAL_MAX:
            self._outage_began = self._outage_ended = None
            return None
        return OutageGrace(began_ago=now - self._outage_began, ended_ago=now - ended)

    def _outage(self, now: float) -> None:
        # Back-to-back outages keep the earliest start: no lease loses the grace it had.
        if self._outage_began is None:
            self._outage_began = now if self._last_ok is None else self._last_ok
        self._outage_ended = None

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
