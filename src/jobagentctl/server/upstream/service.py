"""``GatewayService``: the lease service with ctrlplane as the record of every job's status.

What changes against ``JobService`` (docs/gateway.md has the whole picture):

- **Claims** take a job ctrlplane lists as queued for the agent. The lease is recorded here
  first: the mirror row of the job, the claim, the attempt (the store's own claim). Then the
  claim is sent to ctrlplane. A 409/404 from it (another claimer won) undoes the local claim,
  which never reached an agent, and the next job is tried. A crash between the two leaves a
  lease nobody heartbeats. The gateway's reaper requeues that job upstream, as for any dead
  agent (only if ctrlplane has it in progress).
- **Heartbeats** are the store's, unchanged: nothing goes to ctrlplane.
- **Reports** with a ``claimId`` are fenced here, then written to the outbox with the claim
  marked delivering (one transaction), then sent. The agent gets 202 as soon as the report is
  durable, even while ctrlplane is down. The claim and attempt end here once ctrlplane took it.
- **Operators' status changes** (no ``claimId``) go to ctrlplane first, then here. A requeue
  of a held claim is sent once the holder let go or its lease ran out (no overlap).
- **Listings and reads of jobs** are ctrlplane's; claims, attempts, logs and presence ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any
from uuid import UUID

from jobagentctl.errors import ClaimLost, ClaimMismatch, NotClaimable, NotFound, ValidationError
from jobagentctl.models import (
    DELIVERY_PENDING,
    AcceptedResponse,
    ClaimedJob,
    ClaimNextRequest,
    ClaimRequest,
    ClaimState,
    CreateJobRequest,
    Job,
    JobClaim,
    JobStatus,
    UpdateJobStatusRequest,
    UpsertJobAgentRequest,
)
from jobagentctl.server.http.auth import Principal
from jobagentctl.server.http.metrics import Metrics
from jobagentctl.server.scopes import (
    no_agent,
    require_own_agent,
    require_workspace,
    require_workspace_key,
)
from jobagentctl.server.service import JobService
from jobagentctl.server.settings import ServerSettings
from jobagentctl.server.store import Store
from jobagentctl.server.upstream.client import (
    UpstreamClient,
    UpstreamRefused,
    UpstreamUnavailable,
)
from jobagentctl.server.upstream.crash import crash_point
from jobagentctl.server.upstream.ledger import Ledger, Op
from jobagentctl.server.upstream.poll import SharedPoll

__all__ = ["GatewayService"]

logger = logging.getLogger("jobagentctl.server.gateway")

# How many of an agent's oldest queued jobs one poll lists (one page of ctrlplane's).
_POLL_PAGE = 50
# Statuses a report may carry that ctrlplane keeps; the rest of a report stays here.
_ACCEPTED_MESSAGE = "Job status accepted: delivering it to ctrlplane"
# /readyz asks ctrlplane at most this often (seconds); the answer in between is the last one.
_UPSTREAM_STATE_TTL = 2.0


class GatewayService(JobService):
    """``JobService`` in front of ctrlplane (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        settings: ServerSettings,
        metrics: Metrics,
        upstream: UpstreamClient,
        key_check: Any = None,
    ) -> None:
        super().__init__(store, settings, metrics, key_check=key_check)
        self.upstream = upstream
        self.ledger = Ledger(store)
        self._polls: dict[tuple[UUID, UUID], SharedPoll] = {}
        self._mirrored_agents: set[UUID] = set()
        # Set when an outbox row is waiting: the worker delivers at once instead of next tick.
        self.outbox_wake = asyncio.Event()
        self._upstream_checked: tuple[float, bool] = (float("-inf"), False)

    # --- agents ------------------------------------------------------------------------------
    async def ensure_agent(self, ws: UUID, agent_id: UUID) -> None:
        """Our row of ctrlplane's agent (keys, claims and presence refer to it), made on first use.

        It is 404 when ctrlplane has no such agent in the workspace.
        """
        if agent_id in self._mirrored_agents:
            return
        if await self.store.entities.get_agent(ws, agent_id) is None:
            try:
                agent = await self.upstream.get_agent(ws, agent_id)
            except UpstreamRefused:
                raise no_agent(agent_id) from None
            await self.ledger.mirror_agent(ws, agent)
        self._mirrored_agents.add(agent_id)

    async def upsert_agent(
        self, principal: Principal, ws: UUID, agent_id: UUID, body: UpsertJobAgentRequest
    ) -> AcceptedResponse:
        require_workspace(principal, ws)
        require_workspace_key(principal)
        await self.upstream.upsert_agent(
            ws, agent_id, body.model_dump(by_alias=True, exclude_none=True)
        )
        return await super().upsert_agent(principal, ws, agent_id, body)

    async def delete_agent(
        self, principal: Principal, ws: UUID, agent_id: UUID
    ) -> AcceptedResponse:
        require_workspace(principal, ws)
        require_workspace_key(principal)
        try:
            await self.upstream.delete_agent(ws, agent_id)
        except UpstreamRefused as exc:
            if exc.status == 404:
                raise no_agent(agent_id) from None
            raise
        self._mirrored_agents.discard(agent_id)
        try:
            return await super().delete_agent(principal, ws, agent_id)
        except NotFound:
            return AcceptedResponse(id=agent_id, message="Job agent deleted")

    # --- jobs: ctrlplane's -------------------------------------------------------------------
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
        require_workspace(principal, ws)
        require_own_agent(principal, agent_id)
        await self.presence.seen(ws, agent_id)
        one = statuses[0].value if statuses and len(statuses) == 1 else None
        try:
            page = await self.upstream.agent_jobs(
                ws,
                agent_id,
                one,
                limit=limit,
                offset=offset,
                dispatch_context=include_dispatch_context,
            )
        except UpstreamRefused as exc:
            if exc.status == 404:
                raise no_agent(agent_id) from None
            raise
        jobs = [Job.model_validate(item) for item in page.get("items", [])]
        if statuses and one is None:
            jobs = [job for job in jobs if job.status in statuses]
        return jobs, int(page.get("total", len(jobs))), None

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
        require_workspace(principal, ws)
        page = await self.upstream.list_jobs(ws, limit, offset)
        jobs = [Job.model_validate(item) for item in page.get("items", [])]
        if statuses:
            jobs = [job for job in jobs if job.status in statuses]
        if principal.agent_id is not None:
            jobs = [job for job in jobs if job.agent_id == principal.agent_id]
        return jobs, int(page.get("total", len(jobs))), None

    async def get_job(self, principal: Principal, ws: UUID, job_id: UUID) -> Job:
        require_workspace(principal, ws)
        try:
            job = Job.model_validate(await self.upstream.get_job(ws, job_id))
        except UpstreamRefused as exc:
            if exc.status != 404:
                raise
            # ctrlplane reads only jobs that belong to a release; one the gateway claimed
            # is still known here.
            return await super().get_job(principal, ws, job_id)
        if principal.agent_id is not None and job.agent_id != principal.agent_id:
            raise NotFound("job not found", details={"jobId": str(job_id)})
        return job

    async def create_job(
        self, principal: Principal, ws: UUID, agent_id: UUID, body: CreateJobRequest
    ) -> Job:
        raise ValidationError(
            "the gateway does not create jobs: ctrlplane does (its deployments and releases)"
        )

    # --- claims ------------------------------------------------------------------------------
    def _poll(self, ws: UUID, agent_id: UUID) -> SharedPoll:
        key = (ws, agent_id)
        poll = self._polls.get(key)
        if poll is None:

            async def fetch() -> list[dict[str, Any]]:
                return await self.upstream.oldest_queued(ws, agent_id, _POLL_PAGE)

            poll = self._polls[key] = SharedPoll(
                fetch,
                interval=self.settings.upstream_poll_interval,
                max_interval=self.settings.upstream_max_backoff,
            )
        return poll

    async def claim_job(
        self,
        principal: Principal,
        ws: UUID,
        agent_id: UUID,
        job_id: UUID,
        body: ClaimRequest | None,
    ) -> ClaimedJob:
        require_workspace(principal, ws)
        require_own_agent(principal, agent_id)
        requested = body.lease_seconds if body is not None else None
        await self.presence.seen(ws, agent_id)
        await self.ensure_agent(ws, agent_id)
        lease = await self._lease_for(ws, agent_id, requested, claim_next=False)
        claimed = await self._claim_one(ws, agent_id, {"id": str(job_id)}, lease, by_id=True)
        if claimed is None:  # pragma: no cover - by_id raises instead
            raise NotClaimable("the job is not queued")
        self.metrics.claims.labels("byId", "true" if lease else "false").inc()
        return claimed

    async def claim_next(
        self,
        principal: Principal,
        ws: UUID,
        agent_id: UUID,
        body: ClaimNextRequest | None,
        disconnected: asyncio.Event | None = None,
    ) -> list[ClaimedJob]:
        require_workspace(principal, ws)
        require_own_agent(principal, agent_id)
        requested = body.lease_seconds if body is not None else None
        wait = body.wait_seconds if body is not None and body.wait_seconds is not None else 0.0
        wait = min(wait, self.settings.max_wait_seconds)
        limit = body.limit if body is not None and body.limit is not None else 1
        await self.presence.seen(ws, agent_id)
        await self.ensure_agent(ws, agent_id)
        lease = await self._lease_for(ws, agent_id, requested, claim_next=True)
        deadline = time.monotonic() + wait
        stops = [self._stopping] + ([disconnected] if disconnected is not None else [])
        self.metrics.long_polls.inc()
        try:
            return await self._claim_polled(ws, agent_id, lease, limit, deadline, stops)
        finally:
            self.metrics.long_polls.dec()

    async def _claim_polled(
        self,
        ws: UUID,
        agent_id: UUID,
        lease: int | None,
        limit: int,
        deadline: float,
        stops: list[asyncio.Event],
        skip: UUID | None = None,
    ) -> list[ClaimedJob]:
        """Up to ``limit`` of the agent's oldest jobs queued in ctrlplane, from the agent's shared
        poll. It waits for one until ``deadline`` (monotonic) or one of ``stops``."""
        poll = self._poll(ws, agent_id)
        # A listing at most one poll interval old: the agent's shared poll may have been idle
        # for minutes, and a claim must not be answered from a listing that old.
        since = time.monotonic() - self.settings.upstream_poll_interval
        first = True
        while True:
            remaining = deadline - time.monotonic()
            # The first listing is awaited even without a wait: a claim needs one.
            timeout = max(remaining, self.settings.upstream_timeout + 1.0) if first else remaining
            first = False
            snapshot = await poll.after(since, timeout, *stops)
            if snapshot is not None:
                since = snapshot.at
                if snapshot.error is not None and deadline - time.monotonic() <= 0:
                    raise snapshot.error
                claimed: list[ClaimedJob] = []
                for item in snapshot.items:
                    if skip is not None and item.get("id") == str(skip):
                        continue  # the job just reported: a listing older than its end
                    job = await self._claim_one(
                        ws, agent_id, item, lease, by_id=False, listed_at=snapshot.wall
                    )
                    if job is not None:
                        claimed.append(job)
                        if len(claimed) >= limit:
                            break
                if claimed:
                    self.metrics.claims.labels("next", "true" if lease else "false").inc(
                        len(claimed)
                    )
                    return claimed
            if deadline - time.monotonic() <= 0 or any(stop.is_set() for stop in stops):
                return []

    async def _claim_one(
        self,
        ws: UUID,
        agent_id: UUID,
        item: dict[str, Any],
        lease: int | None,
        *,
        by_id: bool,
        listed_at: float | None = None,
    ) -> ClaimedJob | None:
        """Claim one job: here first (leased), then in ctrlplane.

        When it is not claimable (held here, or ctrlplane refused):
        - claim-next: None;
        - by id: the error.
        """
        job_id = UUID(str(item["id"]))
        if lease is None:
            return await self._claim_unleased(ws, agent_id, job_id, by_id=by_id)
        if not await self._mirrored(ws, agent_id, item, by_id=by_id, listed_at=listed_at):
            # Held here, or an operation on it not yet delivered (a requeue sent after a
            # claim made now would undo that claim in ctrlplane): not claimable yet.
            if by_id:
                raise NotClaimable(
                    "the job is held by the gateway (a claim, or a change not yet delivered "
                    "to ctrlplane)",
                    details={"claimHeld": True},
                )
            return None
        try:
            local = await self.store.claim_job(ws, agent_id, job_id, lease)
        except (NotClaimable, NotFound):
            if by_id:
                raise
            return None
        crash_point("claimed-locally")
        upstream = await self._claim_upstream(ws, agent_id, local, by_id=by_id)
        if upstream is None:
            return None
        crash_point("claimed-upstream")
        return self._merged(local, upstream)

    async def _mirrored(
        self,
        ws: UUID,
        agent_id: UUID,
        item: dict[str, Any],
        *,
        by_id: bool,
        listed_at: float | None,
    ) -> bool:
        """Mirror the listed job ``item`` here, claimable; False when it is not claimable yet."""
        job_id = UUID(str(item["id"]))

        if await self.ledger.mirror(ws, agent_id, job_id, item):
            return True
        ended = await self.ledger.ended_here(ws, job_id)
        if ended is None or (listed_at and ended.timestamp() > listed_at - 1.0):
            return False
        # Ended here before the listing was asked for (a second's margin for the clocks of
        # this host and the database's): a job queued again in ctrlplane (an operator's
        # requeue there), or a listing that was on its way. ctrlplane says which, for this job
        # alone. One that ended after it is skipped without asking.
        if await self._queued_upstream(ws, job_id):
            return await self.ledger.mirror(ws, agent_id, job_id, item, confirmed=True)
        if not by_id:
            self._poll(ws, agent_id).forget()
        return False

    async def _claim_upstream(
        self, ws: UUID, agent_id: UUID, local: ClaimedJob, *, by_id: bool
    ) -> dict[str, Any] | None:
        """ctrlplane's claim of the job claimed here as ``local``: its job as answered.

        When ctrlplane refuses, the local claim is undone, then:
        - claim-next: None;
        - by id: ``NotFound`` (404) or ``NotClaimable``.
        """
        job_id = local.id
        try:
            return await self.upstream.claim(ws, agent_id, job_id)
        except UpstreamRefused as exc:
            # Another claimer won (409), or the job is not the agent's (404): the local claim
            # never reached an agent and leaves no attempt.
            await self.ledger.undo_claim(job_id, local.claim_id)  # type: ignore[arg-type]
            if not by_id:
                self._poll(ws, agent_id).forget()
                return None
            if exc.status == 404:
                raise NotFound("job not found", details={"jobId": str(job_id)}) from None
            raise NotClaimable(
                "ctrlplane refused the claim: the job is not queued there",
                details={"upstreamStatus": exc.status},
            ) from None
        except UpstreamUnavailable as exc:
            if not exc.sent:
                await self.ledger.undo_claim(job_id, local.claim_id)  # type: ignore[arg-type]
            # Else ctrlplane may have taken it: the lease runs out unheartbeaten and the
            # reaper sends the job back to queued if ctrlplane has it in progress.
            raise

    async def _queued_upstream(self, ws: UUID, job_id: UUID) -> bool:
        try:
            job = await self.upstream.get_job(ws, job_id)
        except UpstreamRefused:
            return True  # not readable by id (no release): ctrlplane's claim decides
        return job.get("status") == JobStatus.QUEUED.value

    async def _claim_unleased(
        self, ws: UUID, agent_id: UUID, job_id: UUID, *, by_id: bool
    ) -> ClaimedJob | None:
        """A V1 claim without a lease: ctrlplane's claim, then our attempt row (nothing here
        to reap; the job keeps V1 behaviour, as on our server)."""
        try:
            upstream = await self.upstream.claim(ws, agent_id, job_id)
        except UpstreamRefused as exc:
            if not by_id:
                return None
            if exc.status == 404:
                raise NotFound("job not found", details={"jobId": str(job_id)}) from None
            raise NotClaimable("the job is not queued in ctrlplane") from None
        await self.ledger.mirror(ws, agent_id, job_id, upstream)
        try:
            local = await self.store.claim_job(ws, agent_id, job_id, None)
        except (NotClaimable, NotFound):
            return ClaimedJob.model_validate(upstream)
        return self._merged(local, upstream)

    @staticmethod
    def _merged(local: ClaimedJob, upstream: dict[str, Any]) -> ClaimedJob:
        """ctrlplane's job as it answered the claim (dispatch context included), with our
        lease fields."""
        job = dict(upstream)
        job.update(
            {
                "claimId": str(local.claim_id) if local.claim_id else None,
                "leaseSeconds": local.lease_seconds,
                "claimedAt": local.claimed_at.isoformat() if local.claimed_at else None,
                "claimExpiresAt": local.claim_expires_at.isoformat()
                if local.claim_expires_at
                else None,
                "attempt": local.attempt,
            }
        )
        return ClaimedJob.model_validate(job)

    # --- status ------------------------------------------------------------------------------
    async def update_status(
        self, principal: Principal, ws: UUID, job_id: UUID, body: UpdateJobStatusRequest
    ) -> AcceptedResponse:
        require_workspace(principal, ws)
        following = body.claim_next
        ending = body.claim_id is not None and body.status != JobStatus.IN_PROGRESS
        if following is not None and not ending:
            raise ValidationError(
                "claimNext needs a claimId and a status that ends the attempt (not inProgress)"
            )
        accepted = await self._update_status(principal, ws, job_id, body)
        if following is not None:
            # The holder ending its attempt takes its agent's next jobs in the same request,
            # from the agent's shared poll, without waiting.
            job = await self.store.entities.get_job(ws, job_id, principal.agent_id)
            agent = job.agent_id if job is not None else None
            if agent is None:
                accepted.claimed = []
            else:
                lease = await self._lease_for(ws, agent, following.lease_seconds, claim_next=True)
                accepted.claimed = await self._claim_polled(
                    ws, agent, lease, following.limit, time.monotonic(), [self._stopping], job_id
                )
        return accepted

    async def _update_status(
        self, principal: Principal, ws: UUID, job_id: UUID, body: UpdateJobStatusRequest
    ) -> AcceptedResponse:
        if body.claim_id is None:
            return await self._operator_status(principal, ws, job_id, body)
        if body.status == JobStatus.IN_PROGRESS:
            # Not an end: fenced here, then sent as it is.
            await super().update_status(principal, ws, job_id, body)
            await self.upstream.set_status(ws, job_id, body.status.value)
            return AcceptedResponse(id=job_id, message="Job status updated")
        payload = body.model_dump(mode="json", by_alias=True, exclude_none=True)
        try:
            report = await self.ledger.accept_report(
                ws,
                job_id,
                body.claim_id,
                principal.agent_id,
                payload,
                hold=self.settings.upstream_hold,
            )
        except (ClaimLost, ClaimMismatch) as exc:
            self.metrics.lease_lost.labels(exc.code).inc()
            raise
        if report.payload.get("status") != body.status.value:
            # The attempt's report was another status: this one comes too late.
            raise ClaimLost(
                "the claim's holder already reported another status",
                details={"jobStatus": report.payload.get("status")},
            )
        await self.presence.seen(ws, principal.agent_id)
        if report.delivered:
            return AcceptedResponse(id=job_id, message="Job status updated")
        crash_point("report-accepted")
        op = Op(report.op_id, ws, job_id, "report", body.claim_id, report.payload, 1)
        try:
            await self.deliver(op)
        except UpstreamUnavailable:
            self.outbox_wake.set()
            return AcceptedResponse(id=job_id, message=_ACCEPTED_MESSAGE)
        return AcceptedResponse(id=job_id, message="Job status updated")

    async def _operator_status(
        self, principal: Principal, ws: UUID, job_id: UUID, body: UpdateJobStatusRequest
    ) -> AcceptedResponse:
        """No claim id: an operator (or a V1 agent). ctrlplane first, then here. A requeue of
        a job whose claim is held waits for the holder to let go (no overlap), unless forced."""
        if principal.agent_id is not None:
            await self.get_job(principal, ws, job_id)  # 404 outside the agent's scope
        claim = await self.ledger.claim_of(job_id)
        if body.status == JobStatus.QUEUED and claim is not None and not body.force:
            await self._apply_locally(ws, job_id, body)
            await self.ledger.add_requeue(ws, job_id, claim)
            self.outbox_wake.set()
            return AcceptedResponse(
                id=job_id,
                message="Job requeue accepted: sent to ctrlplane once its claim's holder lets go",
            )
        try:
            await self.upstream.set_status(ws, job_id, body.status.value)
        except UpstreamRefused as exc:
            if exc.status == 404:
                raise NotFound("job not found", details={"jobId": str(job_id)}) from None
            raise
        await self._apply_locally(ws, job_id, body)
        return AcceptedResponse(id=job_id, message="Job status updated")

    async def _apply_locally(self, ws: UUID, job_id: UUID, body: UpdateJobStatusRequest) -> None:
        """The status change on our mirror row, if we have one (ends a held claim: its holder's
        heartbeat answers 409 with ``jobStatus``)."""
        try:
            await self.store.set_status(
                ws,
                job_id,
                body.status,
                claim_id=None,
                message=body.message,
                external_id=body.external_id,
                metadata=body.metadata,
                force=bool(body.force),
            )
        except NotFound:
            return
        self.changed(job_id)

    def changed(self, job_id: UUID) -> None:
        """Wake what waits on the job here (claim waits, log followers)."""
        event = self._job_changed.get(job_id)
        if event is not None:
            event.set()
        self.logs.wake(job_id)

    # --- the outbox --------------------------------------------------------------------------
    async def deliver(self, op: Op) -> None:
        """Send one outbox row to ctrlplane and finish it here. ``UpstreamUnavailable`` when
        ctrlplane did not answer: the row stays for a retry. A refusal (4xx) finishes the row with
        the error recorded: retrying cannot change ctrlplane's mind."""
        if op.kind == "report":
            await self._deliver_report(op)
        else:
            await self._deliver_requeue(op)

    async def _deliver_report(self, op: Op) -> None:
        status = JobStatus(op.payload["status"])
        error: str | None = None
        try:
            await self.upstream.set_status(op.workspace_id, op.job_id, status.value)
        except UpstreamRefused as exc:
            error = exc.message
            logger.warning(
                "ctrlplane refused the report of job %s (%s): ended here only", op.job_id, error
            )
        crash_point("report-delivered")
        # ClaimLost & co: ended here already (a repeat, or the job went meanwhile).
        with contextlib.suppress(ClaimLost, ClaimMismatch, NotFound):
            await self.store.set_status(
                op.workspace_id,
                op.job_id,
                status,
                claim_id=op.claim_id,
                message=op.payload.get("message"),
                external_id=op.payload.get("externalId"),
                metadata=op.payload.get("metadata"),
            )
        await self.ledger.op_done(op.id, error)
        self.changed(op.job_id)

    async def _deliver_requeue(self, op: Op) -> None:
        """Put the job back to queued in ctrlplane, only if it is still in progress there. A job
        cancelled or finished there meanwhile stays so. Not while a revoked claim still holds it
        here."""
        if await self.ledger.revoked_held(op.job_id):
            await self.ledger.op_retry(op.id, 1.0, "waiting for the claim's holder to let go")
            return
        error: str | None = None
        try:
            current = await self.upstream.get_job(op.workspace_id, op.job_id)
        except UpstreamRefused as exc:
            current, error = None, exc.message
        if current is not None and current.get("status") == JobStatus.IN_PROGRESS.value:
            try:
                await self.upstream.set_status(op.workspace_id, op.job_id, JobStatus.QUEUED.value)
            except UpstreamRefused as exc:
                error = exc.message
        elif current is not None and current.get("status") != JobStatus.QUEUED.value:
            # Ended in ctrlplane meanwhile: our mirror says so too.
            with contextlib.suppress(NotFound, ValueError):
                await self.store.set_status(
                    op.workspace_id,
                    op.job_id,
                    JobStatus(current["status"]),
                    claim_id=None,
                    message=None,
                    external_id=None,
                    metadata=None,
                    force=True,
                )
        crash_point("requeue-delivered")
        await self.ledger.op_done(op.id, error)

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
        """The claims, those whose holder's report waits for delivery to ctrlplane marked
        ``delivery: pending`` (an added field: held, never reaped, until ctrlplane took it)."""
        claims, total = await super().list_claims(
            principal, ws, agent_id=agent_id, state=state, limit=limit, offset=offset
        )
        pending = {
            str(op["job_id"]) for op in await self.ledger.pending_ops(ws) if op["kind"] == "report"
        }
        for claim in claims:
            if str(claim.job_id) in pending:
                claim.delivery = DELIVERY_PENDING
        return claims, total

    # --- operations --------------------------------------------------------------------------
    async def upstream_state(self) -> str:
        """``up`` when ctrlplane answers (any HTTP answer), else ``down`` (``/readyz``'s body;
        the gateway stays ready: agents' heartbeats and reports need only our database)."""
        now = time.monotonic()
        if now - self._upstream_checked[0] > _UPSTREAM_STATE_TTL:
            # One probe per TTL whatever the probing rate (load balancers, several of them).
            up = await self.upstream.ping()
            self._upstream_checked = (time.monotonic(), up)
            self.upstream.metrics.up.set(1 if up else 0)
        return "up" if self._upstream_checked[1] else "down"
