"""The lease logic above the store: key scopes, lease resolution, long-poll, 409 accounting.

No SQL and no HTTP here. The app turns requests into these calls and the results into JSON. The
store does every state change in one statement or transaction with the database clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from jobagentctl.errors import ClaimLost, ClaimMismatch, NotFound, ValidationError
from jobagentctl.models import (
    AcceptedResponse,
    AgentState,
    ClaimedJob,
    ClaimNextRequest,
    ClaimRequest,
    ClaimState,
    CreateJobRequest,
    Heartbeat,
    HeartbeatRequest,
    Job,
    JobAgent,
    JobAttempt,
    JobClaim,
    JobStatus,
    UpdateJobStatusRequest,
    UpsertJobAgentRequest,
)
from jobagentctl.server.http.auth import Principal
from jobagentctl.server.http.longpoll_ends import LongPollEnds
from jobagentctl.server.http.metrics import Metrics
from jobagentctl.server.logs import JobLogs
from jobagentctl.server.presence import Presence
from jobagentctl.server.scopes import (
    claims_scope,
    no_agent,
    require_own_agent,
    require_workspace,
    require_workspace_key,
)
from jobagentctl.server.settings import ServerSettings
from jobagentctl.server.store import Store, WorkspaceRecord
from jobagentctl.server.store.waiters import Mark

__all__ = ["JobService", "resolve_lease"]

# A long-poll asks the store "anything queued?" again at least this often even without a wake-up
# signal (a cheap query, not a claim). The stores already close the gap between "nothing
# queued" and "start waiting" (they re-check after registering the waiter), and wake waiters
# for jobs queued elsewhere (LISTEN/NOTIFY, or one poller per process); this bounds the cost of
# a signal lost some other way: long, as no signal is expected to be lost (with the default
# max_wait_seconds of 30 it seldom comes into play). Each slice is drawn from [1/2, 1] of it,
# so that long-polls begun together do not re-check together (a fleet that reconnected at once
# would otherwise query at once, every slice).
_WAIT_SLICE_SECONDS = 60.0
# An empty claim-next must tell an unknown agent (404) from one with nothing queued (204); an
# agent found this recently is not looked up again, so an idle fleet's re-polls cost only their
# claim attempt. A deletion through another replica turns its long-polls into 404s this late.
_KNOWN_AGENT_SECONDS = 30.0
_KNOWN_AGENTS_MAX = 100_000


# A cancellation wait re-reads the claim this often: status changes through other processes
# (replicas, `server` commands, the reaper) send this process no signal.
_CLAIM_RECHECK_SECONDS = 1.0


def resolve_lease(
    settings: ServerSettings,
    requested: int | None,
    agent_config: dict[str, Any] | None,
    *,
    claim_next: bool,
) -> int | None:
    """The granted lease in seconds, or None for an unleased claim. A lease is opt-in on a V1 claim
    by id, so a ctrlplane agent that knows nothing of leases is never reaped.

    The first that is given wins:

    - the request (``0`` = explicitly unleased);
    - the agent's ``config.leaseSeconds``;
    - the server default on claim-next; no lease on a V1 claim by id.

    Granted values are clamped into ``[min_lease_seconds, max_lease_seconds]``.
    """
    if requested is not None:
        return settings.clamp_lease(requested) if requested > 0 else None
    configured = (agent_config or {}).get("leaseSeconds")
    # bool is an int subclass: `true` in a config is not a lease length.
    if isinstance(configured, int | float) and not isinstance(configured, bool) and configured > 0:
        return settings.clamp_lease(int(configured))
    return settings.default_lease if claim_next else None


class JobService:
    """One per app. Every method takes the caller's ``Principal`` and the path's workspace.

    Scopes: a workspace key may do everything in its workspace. An agent key may read its own agent,
    list/claim its jobs, heartbeat, set status, and read a job and its attempts. Every other call is
    ``NotFound``, and so is anything of another agent or workspace. That is 404, never 403: a key
    must not learn what exists outside its scope.
    """

    def __init__(
        self,
        store: Store,
        settings: ServerSettings,
        metrics: Metrics,
        key_check: Callable[[Principal], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        # Raises AuthError when the caller's key was revoked meanwhile: a long-poll asks again
        # before it hands out a job, as one may have waited far longer than the key cache
        # trusts a key.
        self._key_check = key_check
        self._stopping = asyncio.Event()
        # Jobs whose status changed through this process: wakes their cancellation waiters.
        self._job_changed: dict[UUID, asyncio.Event] = {}
        self._long_poll_ends = LongPollEnds()
        # Job logs: appends, reads and their follow long-poll (logs.py).
        self.logs = JobLogs(store, settings, metrics, self._stopping)
        self.presence = Presence(store, settings.presence_interval)
        # (workspace, agent) → when the agent was last found: see _KNOWN_AGENT_SECONDS.
        self._known_agents: dict[tuple[UUID, UUID], float] = {}

    # --- lifecycle ---------------------------------------------------------------------------
    def begin_shutdown(self) -> None:
        """Wake every long-poll: they answer 204 at once instead of holding the drain."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        """True once the server began shutting down (``/readyz`` answers 503)."""
        return self._stopping.is_set()

    async def _agent_or_404(self, ws: UUID, agent_id: UUID) -> JobAgent:
        agent = await self.store.entities.get_agent(ws, agent_id)
        if agent is None:
            raise no_agent(agent_id)
        return agent

    async def _known_agent_or_404(self, ws: UUID, agent_id: UUID) -> None:
        """:meth:`_agent_or_404`, skipped for an agent found within _KNOWN_AGENT_SECONDS."""
        now = time.monotonic()
        found = self._known_agents.get((ws, agent_id))
        if found is not None and now - found < _KNOWN_AGENT_SECONDS:
            return
        await self._agent_or_404(ws, agent_id)
        if len(self._known_agents) >= _KNOWN_AGENTS_MAX:
            self._known_agents.clear()  # crude but bounded: costs one lookup per agent
        self._known_agents[(ws, agent_id)] = now

    async def _job_or_404(self, principal: Principal, ws: UUID, job_id: UUID) -> Job:
        job = await self.store.entities.get_job(ws, job_id, principal.agent_id)
        if job is None:
            raise NotFound("job not found", details={"jobId": str(job_id)})
        return job

    # --- workspaces --------------------------------------------------------------------------
    async def workspace_by_slug(self, principal: Principal, slug: str) -> WorkspaceRecord:
        """The caller's own workspace, by its slug; any other slug is 404 (a key learns nothing
        about other workspaces)."""
        record = await self.store.entities.get_workspace_by_slug(slug)
        if record is None or record.id != principal.workspace_id:
            raise NotFound("workspace not found", details={"slug": slug})
        return record

    # --- agents ------------------------------------------------------------------------------
    async def upsert_agent(
        self, principal: Principal, ws: UUID, agent_id: UUID, body: UpsertJobAgentRequest
    ) -> AcceptedResponse:
        """Create or replace an agent (a workspace key only)."""
        require_workspace(principal, ws)
        require_workspace_key(principal)
        await self.store.entities.upsert_agent(
            ws, agent_id, body.name, body.type, body.config, body.metadata
        )
        return AcceptedResponse(id=agent_id, message="Job agent upserted")

    async def list_agents(
        self,
        principal: Principal,
        ws: UUID,
        limit: int,
        offset: int,
        state: AgentState | None = None,
    ) -> tuple[list[JobAgent], int]:
        """A page of the workspace's agents (in ``state`` if given) and their total, with their
        presence (a workspace key only)."""
        require_workspace(principal, ws)
        require_workspace_key(principal)
        window = self.settings.presence_window
        return await self.store.entities.list_agents(
            ws, limit, offset, presence_window=window, state=state
        )

    async def get_agent(self, principal: Principal, ws: UUID, agent_id: UUID) -> JobAgent:
        """An agent with its presence (an agent key: only its own)."""
        require_workspace(principal, ws)
        require_own_agent(principal, agent_id)
        window = self.settings.presence_window
        agent = await self.store.entities.get_agent_presence(ws, agent_id, window)
        if agent is None:
            raise no_agent(agent_id)
        return agent

    async def delete_agent(
        self, principal: Principal, ws: UUID, agent_id: UUID
    ) -> AcceptedResponse:
        """Delete an agent and its keys; its jobs stay (a workspace key only)."""
        require_workspace(principal, ws)
        require_workspace_key(principal)
        self._known_agents.pop((ws, agent_id), None)
        if not await self.store.entities.delete_agent(ws, agent_id):
            raise no_agent(agent_id)
        return AcceptedResponse(id=agent_id, message="Job agent deleted")

    # --- jobs --------------------------------------------------------------------------------
    async def list_agent_jobs(
        self,
        principal: Principal,
        ws: UUID,
        agent_id: UUID,
        *,
        statuses: list[JobStatus] | None,
        include_dispatch_context: bool,
        limit: int,
        offset: int,
        cursor: str | None = None,
    ) -> tuple[list[Job], int, str | None]:
        """A page of an agent's jobs, newest first, their total and the next page's cursor
        (an agent key: its own agent's)."""
        require_workspace(principal, ws)
        require_own_agent(principal, agent_id)
        await self.presence.seen(ws, agent_id)  # a V1 agent's poll
        items, total, following = await self.store.entities.list_jobs(
            ws,
            agent_id=agent_id,
            statuses=statuses,
            include_dispatch_context=include_dispatch_context,
            limit=limit,
            offset=offset,
            cursor=cursor,
        )
        if total == 0:
            # Only an empty answer can hide an unknown agent; a hit proves it exists here.
            await self._agent_or_404(ws, agent_id)
        return items, total, following

    async def list_jobs(
        self,
        principal: Principal,
        ws: UUID,
        *,
        statuses: list[JobStatus] | None,
        limit: int,
        offset: int,
        cursor: str | None = None,
    ) -> tuple[list[Job], int, str | None]:
        """A page of the workspace's jobs, newest first, their total and the next page's
        cursor."""
        require_workspace(principal, ws)
        # An agent key sees the workspace list narrowed to its own agent's jobs.
        return await self.store.entities.list_jobs(
            ws,
            agent_id=principal.agent_id,
            statuses=statuses,
            include_dispatch_context=False,
            limit=limit,
            offset=offset,
            cursor=cursor,
        )

    async def get_job(self, principal: Principal, ws: UUID, job_id: UUID) -> Job:
        """A job of the workspace (an agent key: of its agent), with its dispatch context."""
        require_workspace(principal, ws)
        return await self._job_or_404(principal, ws, job_id)

    async def create_job(
        self, principal: Principal, ws: UUID, agent_id: UUID, body: CreateJobRequest
    ) -> Job:
        """Queue a job for an agent (a workspace key only)."""
        require_workspace(principal, ws)
        require_workspace_key(principal)
        return await self.store.entities.create_job(
            ws, agent_id, body.job_agent_config, body.dispatch_context, body.metadata
        )

    async def list_attempts(self, principal: Principal, ws: UUID, job_id: UUID) -> list[JobAttempt]:
        """A job's claim attempts, oldest first (an agent key: of its agent's jobs)."""
        require_workspace(principal, ws)
        return await self.store.list_attempts(ws, job_id, principal.agent_id)

    # --- leases ------------------------------------------------------------------------------
    async def _lease_for(
        self, ws: UUID, agent_id: UUID, requested: int | None, *, claim_next: bool
    ) -> int | None:
        if requested is not None:
            # The common path (the CLI always sends leaseSeconds): no agent lookup.
            return resolve_lease(self.settings, requested, None, claim_next=claim_next)
        agent = await self._agent_or_404(ws, agent_id)
        return resolve_lease(self.settings, None, agent.config, claim_next=claim_next)

    async def claim_job(
        self,
        principal: Principal,
        ws: UUID,
        agent_id: UUID,
        job_id: UUID,
        body: ClaimRequest | None,
    ) -> ClaimedJob:
        """Claim a queued job by id; leased as :func:`resolve_lease` decides."""
        require_workspace(principal, ws)
        require_own_agent(principal, agent_id)
        requested = body.lease_seconds if body is not None else None
        await self.presence.seen(ws, agent_id)
        if requested is not None:
            lease = resolve_lease(self.settings, requested, None, claim_next=False)
            job = await self.store.claim_job(ws, agent_id, job_id, lease)
        else:
            # The agent's configured lease, if any: read by the claim statement itself, with
            # resolve_lease's rule (no lookup of the agent before every V1 claim).
            bounds = (self.settings.min_lease_seconds, self.settings.max_lease_seconds)
            try:
                job = await self.store.claim_job(ws, agent_id, job_id, None, agent_lease=bounds)
            except NotFound:
                # Failure path only: an unknown agent is the agent's 404, as it was when the
                # agent was looked up first.
                await self._agent_or_404(ws, agent_id)
                raise
        self.metrics.claims.labels("byId", "true" if job.lease_seconds else "false").inc()
        return job

    async def claim_next(
        self,
        principal: Principal,
        ws: UUID,
        agent_id: UUID,
        body: ClaimNextRequest | None,
        disconnected: asyncio.Event | None = None,
    ) -> list[ClaimedJob]:
        """The agent's oldest queued job, or its ``limit`` oldest given a ``limit``. It waits up to
        ``waitSeconds`` (capped by ``max_wait_seconds``) for one to be queued; [] → 204.
        ``disconnected`` (set when the client goes away) ends the wait without claiming:
        nobody would receive the job."""
        require_workspace(principal, ws)
        require_own_agent(principal, agent_id)
        requested = body.lease_seconds if body is not None else None
        wait = body.wait_seconds if body is not None and body.wait_seconds is not None else 0.0
        wait = min(wait, self.settings.max_wait_seconds)
        limit = body.limit if body is not None and body.limit is not None else 1
        await self.presence.seen(ws, agent_id)
        lease = await self._lease_for(ws, agent_id, requested, claim_next=True)
        deadline = self._long_poll_ends.deadline(wait) if wait > 0 else time.monotonic()
        checked_agent = requested is None  # _lease_for already proved the agent exists
        while True:
            # Marked before the attempt: the wait asks the queue again only if a job was
            # signalled meanwhile (an empty long-poll costs one statement, its claim attempt).
            mark = self.store.wait_mark(agent_id)
            jobs = await self._claim_batch(ws, agent_id, lease, limit)
            if jobs:
                return jobs
            if not checked_agent:
                # An unknown agent must be a 404, not an endless 204.
                await self._known_agent_or_404(ws, agent_id)
                checked_agent = True
            if not await self._wait_for_job(agent_id, deadline, disconnected, mark):
                return []  # the wait ran out, the server stops, or the client left
            if disconnected is not None and disconnected.is_set():
                return []
            if self._key_check is not None:
                # Only now, with a job to hand out: not on every wake-up.
                await self._key_check(principal)

    async def _claim_batch(
        self, ws: UUID, agent_id: UUID, lease: int | None, limit: int
    ) -> list[ClaimedJob]:
        jobs = await self.store.claim_batch(ws, agent_id, lease, limit)
        if jobs:
            self.metrics.claims.labels("next", "true" if lease else "false").inc(len(jobs))
        return jobs

    async def _wait_for_job(
        self,
        agent_id: UUID,
        deadline: float,
        disconnected: asyncio.Event | None,
        mark: Mark | None = None,
    ) -> bool:
        """True when a "job queued" signal came before ``deadline`` (monotonic); False when
        the deadline passed, the server began shutting down or the client left. ``mark``: the
        store's wait mark, taken before the claim attempt that found nothing."""
        self.metrics.long_polls.inc()
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopping.is_set():
                    return False
                piece = min(remaining, _WAIT_SLICE_SECONDS * random.uniform(0.5, 1.0))
                # The first slice skips the queue check its claim attempt just made; the last
                # leaves the final one to the agent's next claim attempt.
                since, mark = mark, None
                last = piece >= remaining
                if await self._wait_slice(agent_id, piece, disconnected, since, last):
                    return True
                if disconnected is not None and disconnected.is_set():
                    return False
        finally:
            self.metrics.long_polls.dec()

    async def _wait_slice(
        self,
        agent_id: UUID,
        timeout: float,
        disconnected: asyncio.Event | None,
        since: Mark | None = None,
        last: bool = False,
    ) -> bool:
        """One ``store.wait_for_job``, cut short by server shutdown or the client leaving."""
        waiter = asyncio.ensure_future(
            self.store.wait_for_job(agent_id, timeout, since=since, last=last)
        )
        others = [asyncio.ensure_future(self._stopping.wait())]
        if disconnected is not None:
            others.append(asyncio.ensure_future(disconnected.wait()))
        tasks = (waiter, *others)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            for task in others:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        # Not suppressed: a failing wait (database gone) raises here rather than turning the
        # long-poll into a busy loop.
        with contextlib.suppress(asyncio.CancelledError):
            return await waiter
        return False

    async def heartbeat(
        self, principal: Principal, ws: UUID, job_id: UUID, body: HeartbeatRequest | None
    ) -> Heartbeat:
        """Extend the lease of the claim ``body.claim_id``, by its own length or by the
        ``leaseSeconds`` asked, clamped. A lost or mismatched claim is counted and re-raised."""
        require_workspace(principal, ws)
        claim_id = body.claim_id if body is not None else None
        requested = body.lease_seconds if body is not None else None
        # 0 or absent keeps the claim's current lease: a heartbeat cannot unlease a job.
        lease = self.settings.clamp_lease(requested) if requested else None
        last_output = body.last_output_at if body is not None else None
        try:
            beat = await self.store.heartbeat(
                ws, job_id, claim_id, lease, principal.agent_id, last_output_at=last_output
            )
        except (ClaimLost, ClaimMismatch) as exc:
            self.metrics.lease_lost.labels(exc.code).inc()
            raise
        self.metrics.heartbeats.inc()
        await self.presence.seen(ws, beat.job_agent_id)
        return Heartbeat(
            job_id=beat.job_id,
            claim_id=beat.claim_id,
            attempt=beat.attempt,
            lease_seconds=beat.lease_seconds,
            claim_expires_at=beat.claim_expires_at,
        )

    async def update_status(
        self, principal: Principal, ws: UUID, job_id: UUID, body: UpdateJobStatusRequest
    ) -> AcceptedResponse:
        """Set the status.

        With ``claimNext`` (the claim's holder ending its attempt), also claim the next jobs of
        the job's agent in the same request. They are claimed as claim-next without a wait would:
        ``claimed`` lists them ([] when none is queued). Refused updates claim nothing.
        """
        require_workspace(principal, ws)
        following = body.claim_next
        ending = body.claim_id is not None and body.status != JobStatus.IN_PROGRESS
        if following is not None and not ending:
            raise ValidationError(
                "claimNext needs a claimId and a status that ends the attempt (not inProgress)"
            )
        try:
            change = await self.store.set_status(
                ws,
                job_id,
                body.status,
                claim_id=body.claim_id,
                message=body.message,
                external_id=body.external_id,
                metadata=body.metadata,
                agent_scope=principal.agent_id,
                require_claim_id=self.settings.require_claim_id,
                force=bool(body.force),
            )
        except (ClaimLost, ClaimMismatch) as exc:
            self.metrics.lease_lost.labels(exc.code).inc()
            raise
        if body.claim_id is not None:  # the holder reporting, not an operator
            await self.presence.seen(ws, change.job_agent_id)
        changed = self._job_changed.get(job_id)
        if changed is not None:
            changed.set()
        self.logs.wake(job_id)  # a follower of the attempt that ended answers now
        accepted = AcceptedResponse(id=job_id, message="Job status updated")
        if following is not None:
            agent = change.job_agent_id
            if agent is None:  # the job's agent was deleted meanwhile: nothing to claim for
                accepted.claimed = []
            else:
                lease = await self._lease_for(ws, agent, following.lease_seconds, claim_next=True)
                accepted.claimed = await self._claim_batch(ws, agent, lease, following.limit)
        return accepted

    async def wait_claim(
        self,
        principal: Principal,
        ws: UUID,
        job_id: UUID,
        claim_id: UUID,
        wait_seconds: float,
        disconnected: asyncio.Event | None = None,
    ) -> tuple[JobStatus, bool]:
        """``(job status, claim held)`` as soon as the claim ``claim_id`` is no longer held
        (completed, cancelled, released, reaped). Else when ``wait_seconds`` (capped by
        ``max_wait_seconds``) run out with it still held. Woken at once by a status change through
        this process. Changes through another process (another replica, the reaper's requeue) are
        seen by a re-check every ``_CLAIM_RECHECK_SECONDS``."""
        require_workspace(principal, ws)
        deadline = time.monotonic() + min(wait_seconds, self.settings.max_wait_seconds)
        while True:
            changed = self._job_changed.setdefault(job_id, asyncio.Event())
            changed.clear()
            held = await self._claim_held(principal, ws, job_id, claim_id)
            remaining = deadline - time.monotonic()
            if not held or remaining <= 0 or self._stopping.is_set():
                return (await self._job_or_404(principal, ws, job_id)).status, held
            waits = [changed.wait(), self._stopping.wait()]
            if disconnected is not None:
                waits.append(disconnected.wait())
            tasks = [asyncio.ensure_future(w) for w in waits]
            try:
                await asyncio.wait(
                    tasks,
                    timeout=min(remaining, _CLAIM_RECHECK_SECONDS),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                for task in tasks:
                    task.cancel()
                if not changed.is_set() and self._job_changed.get(job_id) is changed:
                    self._job_changed.pop(job_id, None)
            if disconnected is not None and disconnected.is_set():
                return JobStatus.IN_PROGRESS, True  # nobody listens: the answer is moot

    async def _claim_held(
        self, principal: Principal, ws: UUID, job_id: UUID, claim_id: UUID
    ) -> bool:
        attempts = await self.store.list_attempts(ws, job_id, principal.agent_id)
        return any(a.claim_id == claim_id and a.ended_at is None for a in attempts)

    async def list_claims(
        self,
        principal: Principal,
        ws: UUID,
        *,
        agent_id: UUID | None,
        state: ClaimState,
        limit: int,
        offset: int,
    ) -> tuple[list[JobClaim], int]:
        """A page of in-flight claims and their total (an agent key: its own agent's)."""
        agent_id = claims_scope(principal, ws, agent_id)
        return await self.store.list_claims(
            ws, agent_id=agent_id, state=state, limit=limit, offset=offset
        )

    async def urgent_claims(
        self,
        principal: Principal,
        ws: UUID,
        *,
        agent_id: UUID | None,
        state: ClaimState,
        marks: tuple[float | None, float | None],
        limit: int,
    ) -> tuple[list[JobClaim], dict[str, int]]:
        """The most urgent claims and the count of each mark (an agent key: its own agent's);
        ``marks``: the seconds without a heartbeat, and without output, that make an active
        claim stale, and quiet."""
        agent_id = claims_scope(principal, ws, agent_id)
        stale, quiet = marks
        return await self.store.urgent_claims(
            ws, agent_id=agent_id, state=state, stale_after=stale, quiet_after=quiet, limit=limit
        )
