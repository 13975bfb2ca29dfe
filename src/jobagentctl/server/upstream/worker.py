"""The gateway's background work, one task per process (every replica runs one):

- **the outbox**: delivers the reports and requeues not yet sent to ctrlplane, retrying with
  backoff while ctrlplane is down. Rows are taken with a hold (``SKIP LOCKED`` on PostgreSQL),
  so replicas share them. Rows left by a process that died are taken again after their hold:
  that is the reconciliation on start;
- **the reaper's pass** (``reap``, called by ``Reaper`` instead of the store's): an expired
  claim that is not delivering a report ends ``expired`` here. Its requeue goes to the outbox in
  the same transaction. ctrlplane lists the job again once it took the requeue;
- **the sync**: every ``upstream_sync_interval`` seconds, the agents with live claims have
  their in-progress jobs listed in ctrlplane. A claimed job ctrlplane no longer has in progress
  (cancelled, requeued, any other status, deleted) ends its claim here. Its holder's next
  heartbeat then answers 409 with ``jobStatus``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from uuid import UUID

from jobagentctl.errors import ClaimLost, ClaimMismatch, JobAgentError, NotFound
from jobagentctl.models import JobStatus
from jobagentctl.server.store import OutageGrace, ReapResult
from jobagentctl.server.upstream.client import UpstreamRefused, UpstreamUnavailable
from jobagentctl.server.upstream.crash import crash_point
from jobagentctl.server.upstream.service import GatewayService

__all__ = ["GatewayWorker"]

logger = logging.getLogger("jobagentctl.server.gateway")

# Outbox rows delivered per pass, and the longest pause between two tries of one row.
_BATCH = 50
_MAX_RETRY = 30.0


class GatewayWorker:
    """See the module docstring. ``tick``: seconds between two looks at the outbox."""

    def __init__(self, service: GatewayService, *, tick: float = 1.0) -> None:
        self.service = service
        self.ledger = service.ledger
        self.upstream = service.upstream
        self._tick = tick
        self._sync_interval = service.settings.upstream_sync_interval
        # Outbox rows are held by their taker this long; the sync does not judge a claim
        # younger than one upstream request may take (its claim may still be on its way).
        self._hold = service.settings.upstream_hold
        self._settle = service.settings.upstream_timeout + 1.0
        self._last_sync = time.monotonic()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._run(), name="jobagentctl-gateway")

    async def stop(self) -> None:
        self._stop.set()
        self.service.outbox_wake.set()
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.deliver_due()
                if time.monotonic() - self._last_sync >= self._sync_interval:
                    self._last_sync = time.monotonic()
                    await self.sync()
            except JobAgentError as exc:
                logger.warning("gateway pass failed: %s", exc.message)
            except Exception:
                logger.exception("gateway pass failed unexpectedly")
            wake = self.service.outbox_wake
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self._tick)
            wake.clear()

    # --- outbox ------------------------------------------------------------------------------
    async def deliver_due(self) -> int:
        """Deliver the outbox rows that are due; how many were finished."""
        finished = 0
        while True:
            ops = await self.ledger.take_ops(_BATCH, hold=self._hold)
            for op in ops:
                try:
                    await self.service.deliver(op)
                    finished += 1
                except UpstreamUnavailable as exc:
                    delay = min(2.0 ** min(op.tries, 8), _MAX_RETRY)
                    await self.ledger.op_retry(op.id, delay, exc.message)
                    await self._count_pending()
                    return finished  # ctrlplane is down: the rest waits too
            if len(ops) < _BATCH:
                await self._count_pending()
                return finished

    async def _count_pending(self) -> None:
        pending = await self.service.store.db.one("gateway_pending_count")
        self.upstream.metrics.pending.set(int((pending or {}).get("n") or 0))

    # --- the reaper's pass ---------------------------------------------------------------------
    async def reap(
        self, batch_size: int, max_reclaims: int, grace: OutageGrace | None = None
    ) -> ReapResult:
        """End the expired claims here and put their requeues in the outbox (see the module
        docstring); ``max_reclaims`` and ``grace`` are the store reap's, not used: ctrlplane
        decides what happens to a job that keeps failing."""
        del max_reclaims, grace
        # Revoked claims (an operator's requeue) past their lease no longer hold their jobs.
        await self.service.store.db.one("reap_revoked")
        requeued = 0
        for job_id, claim_id, ws in await self.ledger.expired_claims(batch_size):
            if await self.ledger.expire_claim(ws, job_id, claim_id):
                requeued += 1
                crash_point("requeue-recorded")
                self.service.changed(job_id)
        if requeued:
            self.service.outbox_wake.set()
        return ReapResult(requeued=requeued, failed=0)

    # --- sync with ctrlplane -------------------------------------------------------------------
    async def sync(self) -> int:
        """End the claims on jobs ctrlplane no longer has in progress; how many ended."""
        from jobagentctl.server.upstream.setup import mirror_agents

        for ws, _ in await self.ledger.workspaces():
            # Agents made in ctrlplane since: keys of ours can be bound to them.
            await mirror_agents(self.service.store, self.upstream, ws)
        claims = await self.ledger.live_claims(self._settle)
        by_agent: dict[tuple[UUID, UUID], list[tuple[UUID, UUID]]] = defaultdict(list)
        for job_id, agent_id, claim_id, ws in claims:
            by_agent[(ws, agent_id)].append((job_id, claim_id))
        ended = 0
        for (ws, agent_id), held in by_agent.items():
            page = await self.upstream.agent_jobs(
                ws, agent_id, JobStatus.IN_PROGRESS.value, limit=1000
            )
            running = {str(item.get("id")) for item in page.get("items", [])}
            for job_id, _ in held:
                if str(job_id) in running:
                    continue
                try:
                    status = JobStatus(
                        (await self.upstream.get_job(ws, job_id)).get(
                            "status", JobStatus.CANCELLED.value
                        )
                    )
                    message = None
                except UpstreamRefused as exc:
                    if exc.status != 404:
                        continue
                    status, message = JobStatus.CANCELLED, "deleted in ctrlplane"
                if status == JobStatus.IN_PROGRESS:
                    continue  # claimed again meanwhile, listed after our look
                try:
                    await self.service.store.set_status(
                        ws,
                        job_id,
                        status,
                        claim_id=None,
                        message=message,
                        external_id=None,
                        metadata=None,
                        force=True,
                    )
                except (ClaimLost, ClaimMismatch, NotFound):
                    continue
                ended += 1
                self.service.changed(job_id)
                logger.info("job %s is %s in ctrlplane: its claim here ended", job_id, status.value)
        return ended
