"""What the store answers besides the wire models: API keys, workspaces, the outcome of a status
change or a reap, and what the reaper tells the store of an outage."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from jobagentctl.models import JobStatus

__all__ = [
    "ApiKeyRecord",
    "HeartbeatRecord",
    "OutageGrace",
    "ReapResult",
    "StatusChange",
    "WorkspaceRecord",
]


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """An API key as stored: its prefix is the lookup, the secret is kept only as a hash. A key of
    an agent (``job_agent_id``) acts for that agent only."""

    id: UUID
    workspace_id: UUID
    job_agent_id: UUID | None
    prefix: str
    secret_hash: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class WorkspaceRecord:
    """A workspace: its name and the slug a client may name it by."""

    id: UUID
    name: str
    slug: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class HeartbeatRecord:
    """The claim a heartbeat renewed, with its new expiry by the database clock.

    ``job_agent_id`` is the claim's agent: the server's presence bookkeeping needs it, the wire
    answer does not carry it.
    """

    job_id: UUID
    claim_id: UUID
    attempt: int
    lease_seconds: int
    claim_expires_at: datetime
    job_agent_id: UUID | None


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
    """What one reap did: jobs requeued, and jobs failed for having expired too often."""

    requeued: int
    failed: int

    @property
    def total(self) -> int:
        """Every job the reap took back from its agent."""
        return self.requeued + self.failed
