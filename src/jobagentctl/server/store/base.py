"""The storage seam of the server: the ``Store`` protocol both dialects implement.

Every lease decision happens inside the database, with the database clock, in one statement or
one transaction; the service above only clamps lease lengths, checks scopes and maps results to
HTTP. Methods raise the project's errors (``NotFound``, ``NotClaimable``, ``ClaimLost``,
``ClaimMismatch``, ``JobTerminal``, ``ValidationError``) and never a driver exception: driver
errors are wrapped once, in the store module (``ServerUnavailable`` when the database is down).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from jobagentctl.models import (
    ClaimedJob,
    Heartbeat,
    Job,
    JobAgent,
    JobAttempt,
    JobClaim,
    JobStatus,
)

__all__ = [
    "ApiKeyRecord",
    "OutageGrace",
    "ReapResult",
    "StatusChange",
    "Store",
    "WorkspaceRecord",
]


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    id: UUID
    workspace_id: UUID
    job_agent_id: UUID | None
    prefix: str
    secret_hash: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class WorkspaceRecord:
    id: UUID
    name: str
    slug: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class OutageGrace:
    """What the reaper saw of the store's last outage, in seconds before this pass."""

    began_ago: float  # since the last pass that worked before the failures
    ended_ago: float  # since the first pass that worked again (0: this one)


@dataclass(frozen=True, slots=True)
class StatusChange:
    """What ``set_status`` answers: the job's status after it, and its agent (None when the
    agent was deleted)."""

    status: JobStatus
    job_agent_id: UUID | None


@dataclass(frozen=True, slots=True)
class ReapResult:
    requeued: int
    failed: int

    @property
    def total(self) -> int:
        return self.requeued + self.failed


class Store(Protocol):
    """Persistence and lease logic. All methods are coroutines; all times are the database's.

    ``agent_scope``: when not None the caller holds an agent key; a job of another agent is then
    reported as ``NotFound`` (never reveal existence). ``workspace_id`` always scopes: an id of
    another workspace is ``NotFound``.
    """

    dialect: str  # "sqlite" | "postgres"

    # --- lifecycle ---------------------------------------------------------------------------
    async def open(self) -> None:
        """Connect (pool / connection). Does not migrate."""

    async def close(self) -> None: ...

    async def migrate(self) -> list[int]:
        """Apply pending versioned migrations (idempotent, safe when replicas race); return the
        versions applied now."""

    async def schema_current(self, timeout: float | None = None) -> bool:
        """True when the database is reachable, every migration is applied and writes work
        (``/readyz``). False, never an error, when the answer takes longer than ``timeout``
        seconds (None: the store's own bound, PostgreSQL's ``statement_timeout``) or the last
        write failed for a reason that fails every write (SQLite disk full, I/O error,
        read-only; probed again with a write that changes nothing visible)."""

    # --- workspaces and keys -----------------------------------------------------------------
    async def create_workspace(self, name: str, slug: str | None = None) -> UUID:
        """A new workspace. ``slug`` None → derived from ``name`` (``slugify``), with ``-`` and
        8 characters of the id appended if taken. A given slug must be valid (``check_slug``:
        ``ValidationError``) and free (``Conflict``)."""

    async def workspace_exists(self, workspace_id: UUID) -> bool: ...

    async def get_workspace(self, workspace_id: UUID) -> WorkspaceRecord | None: ...

    async def get_workspace_by_slug(self, slug: str) -> WorkspaceRecord | None:
        """The workspace of that slug (exact match), or None."""

    async def create_api_key(
        self, workspace_id: UUID, job_agent_id: UUID | None, prefix: str, secret_hash: str
    ) -> UUID: ...

    async def get_api_key(self, prefix: str) -> ApiKeyRecord | None: ...

    async def revoke_api_key(self, key_id: UUID) -> bool: ...

    # --- agents ------------------------------------------------------------------------------
    async def upsert_agent(
        self,
        workspace_id: UUID,
        agent_id: UUID,
        name: str,
        type: str,
        config: dict[str, Any],
        metadata: dict[str, Any] | None,
    ) -> JobAgent:
        """Create or replace. An id that exists in another workspace → ``NotFound``."""

    async def get_agent(self, workspace_id: UUID, agent_id: UUID) -> JobAgent | None: ...

    async def list_agents(
        self, workspace_id: UUID, limit: int, offset: int
    ) -> tuple[list[JobAgent], int]: ...

    async def delete_agent(self, workspace_id: UUID, agent_id: UUID) -> bool:
        """Delete the agent and its keys. Its jobs stay (V1 parity, SPEC §3): readable by id and
        in the workspace's lists with ``job_agent_id`` None (``""`` on the wire). A claim row of
        one of them keeps the deleted agent's id; the reaper requeues it as any other (the job
        is then queued for no agent: nobody claims it until an operator acts)."""

    # --- jobs --------------------------------------------------------------------------------
    async def create_job(
        self,
        workspace_id: UUID,
        agent_id: UUID,
        job_agent_config: dict[str, Any] | None,
        dispatch_context: dict[str, Any] | None,
        metadata: dict[str, Any] | None,
    ) -> Job:
        """Insert a ``queued`` job (``NotFound`` for an unknown agent) and wake long-polls of
        that agent (``NOTIFY`` on PostgreSQL, in-process event on SQLite). ``job_agent_config``
        defaults to the agent's config."""

    async def get_job(
        self, workspace_id: UUID, job_id: UUID, agent_scope: UUID | None = None
    ) -> Job | None:
        """With ``dispatch_context`` filled."""

    async def list_jobs(
        self,
        workspace_id: UUID,
        *,
        agent_id: UUID | None,
        statuses: list[JobStatus] | None,
        include_dispatch_context: bool,
        limit: int,
        offset: int,
    ) -> tuple[list[Job], int]:
        """Newest first (``created_at DESC, id DESC``); ``statuses=None`` = all."""

    # --- leases ------------------------------------------------------------------------------
    async def claim_job(
        self, workspace_id: UUID, agent_id: UUID, job_id: UUID, lease_seconds: int | None
    ) -> ClaimedJob:
        """Claim that job atomically: ``queued → inProgress``, ``started_at = now``, the attempt
        counted on the job (previous + 1), and — when ``lease_seconds`` is not None — a
        ``job_claim`` row with a fresh ``claim_id`` expiring at ``now + lease`` (the attempt's
        ``job_attempt`` row is written when it ends; an unleased claim opens it now).
        ``lease_seconds`` is already resolved and clamped by the service; None = unleased.
        Unknown job, or another agent's → ``NotFound``; not queued → ``NotClaimable`` with
        ``details.jobStatus``."""

    async def claim_next(
        self, workspace_id: UUID, agent_id: UUID, lease_seconds: int | None
    ) -> ClaimedJob | None:
        """``claim_batch`` of one: the job, or None when nothing is queued."""

    async def claim_batch(
        self, workspace_id: UUID, agent_id: UUID, lease_seconds: int | None, limit: int
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` of the agent's oldest queued jobs (``created_at ASC, id ASC``;
        PostgreSQL one statement with ``FOR UPDATE SKIP LOCKED``, SQLite one transaction),
        oldest first; each as ``claim_job`` (its own claim id and lease). [] when nothing is
        queued."""

    async def wait_for_job(self, agent_id: UUID, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for a "job queued for this agent" signal (created,
        released, requeued by the reaper; from any replica on PostgreSQL). True if signalled.
        May wake spuriously; the caller re-tries its claim."""

    async def heartbeat(
        self,
        workspace_id: UUID,
        job_id: UUID,
        claim_id: UUID | None,
        lease_seconds: int | None,
        agent_scope: UUID | None = None,
    ) -> Heartbeat:
        """Touch ``job_claim`` only: ``claim_expires_at = now + lease`` (and ``lease_seconds``
        when a new value is given). An expired row not yet reaped is revived. No claim row →
        ``ClaimLost`` with ``details.jobStatus``; ``claim_id`` given and not the current one →
        ``ClaimMismatch`` (``details.jobStatus``, ``details.attempt``); unknown job → ``NotFound``.
        """

    async def set_status(
        self,
        workspace_id: UUID,
        job_id: UUID,
        status: JobStatus,
        *,
        claim_id: UUID | None,
        message: str | None,
        external_id: str | None,
        metadata: dict[str, Any] | None,
        agent_scope: UUID | None = None,
        require_claim_id: bool = False,
    ) -> StatusChange:
        """Set a status, fenced by ``claim_id``, atomically; answers the job's status and agent
        (the wire's ``{id, message}`` needs no job: read it with ``get_job``).

        - ``claim_id`` given and equal to the current claim → apply. The claim's holder ending
          its attempt (``claim_id``, any status but ``inProgress``) is one statement, one round
          trip; the reason of a refusal is read only when that statement changed nothing.
        - ``claim_id`` given, no claim row, the attempt with that ``claim_id`` ended
          ``completed``/``cancelled`` and the job already has ``status`` → idempotent success,
          nothing changes.
        - ``claim_id`` given, another attempt holds the claim → ``ClaimMismatch``; no claim row
          otherwise → ``ClaimLost`` (``details.jobStatus``). Nothing changes.
        - no ``claim_id`` (V1, as ctrlplane): any transition is applied — a failed or cancelled
          job can be queued again, its next claim is attempt N+1 — except the same terminal
          status again (idempotent success, nothing changes) and ``require_claim_id`` with
          ``agent_scope`` on a job with a claim row (``ValidationError``).
        Effects: leaving ``inProgress`` deletes the claim row and ends the attempt (its row is
        written then, from the claim row; an unleased attempt's open row is closed):
        ``completed`` for a terminal status, ``cancelled`` for ``cancelled``, ``released`` for
        ``queued`` or any other non-terminal status; ``queued`` wakes long-polls;
        ``inProgress`` sets ``started_at`` (a claim sets it too: it is the latest attempt's); a
        terminal status sets ``completed_at``, any other clears it. ``message`` and
        ``external_id`` replace when given; ``metadata`` is merged key by key.
        """

    async def reap(
        self, batch_size: int, max_reclaims: int, grace: OutageGrace | None = None
    ) -> ReapResult:
        """Repeat one batched statement (≤ ``batch_size`` rows, ``SKIP LOCKED`` on PostgreSQL)
        while one finds a full batch: delete expired ``job_claim`` rows, close their attempts
        ``expired``, and flip their jobs from ``inProgress`` to ``queued`` — or to ``failure``
        with message ``lease expired N times`` when ``max_reclaims`` > 0 and this is the N-th
        expiry with N ≥ ``max_reclaims``. Safe with concurrent reapers: each job exactly once.
        Wakes long-polls of the agents whose jobs went back to the queue. ``grace``: a claim
        that expired less than ``began_ago`` seconds ago is spared while ``ended_ago`` is below
        its heartbeat interval (lease/3 within [1 s, 60 s]), see ``reaper.py``."""

    async def list_claims(
        self,
        workspace_id: UUID,
        *,
        agent_id: UUID | None,
        state: str,
        limit: int,
        offset: int,
    ) -> tuple[list[JobClaim], int]:
        """``state`` ∈ active|expired|unleased|all, judged with the database clock. ``unleased``
        rows are ``inProgress`` jobs without a claim row. ``last_heartbeat_at`` =
        ``claim_expires_at - lease_seconds``. Oldest claim first."""

    async def list_attempts(
        self, workspace_id: UUID, job_id: UUID, agent_scope: UUID | None = None
    ) -> list[JobAttempt]:
        """Attempts of one job, attempt ascending; ``NotFound`` for an unknown job."""

    async def claim_stats(self) -> dict[str, float]:
        """For ``/metrics``: ``active``, ``expired`` claim counts and ``oldest_age_seconds``."""
