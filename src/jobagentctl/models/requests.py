"""The request bodies of the API (what clients send), re-exported by :mod:`jobagentctl.models`:
strict wire types throughout (a lease is an integer, not "30"; ``force`` is ``true``, not
"yes"; a time is an RFC 3339 string): a wrong type is a 400 naming the field."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import Field, StrictBool, StrictFloat, StrictInt

from jobagentctl.models.wire import JobStatus, RequestModel, WireTime

__all__ = [
    "MAX_CLAIM_BATCH",
    "ClaimNext",
    "ClaimNextRequest",
    "ClaimRequest",
    "CreateJobRequest",
    "HeartbeatRequest",
    "JobWaitRequest",
    "UpdateJobStatusRequest",
    "UpsertJobAgentRequest",
]


class UpsertJobAgentRequest(RequestModel):
    """Body of ``PUT …/job-agents/{agentId}``: register or update an agent."""

    name: str = Field(min_length=1, max_length=255)
    type: str = Field(min_length=1, max_length=255)
    config: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] | None = None


# Strict numbers: JSON booleans are not numbers ({"leaseSeconds": false} must not mean 0).
class ClaimRequest(RequestModel):
    """Body of a claim by id: the lease asked for (absent: V1 behaviour, see the protocol)."""

    lease_seconds: StrictInt | None = Field(default=None, ge=0)


# The most jobs one claim-next (or one status update's claimNext) hands out.
MAX_CLAIM_BATCH = 100


class ClaimNextRequest(RequestModel):
    """``limit`` (1–100) asks for a batch: the answer is then ``{"items": [claimed job…]}``. Those
    are the agent's oldest queued jobs, each with its own claim. Without ``limit``, the answer is
    one claimed job."""

    lease_seconds: StrictInt | None = Field(default=None, ge=0)
    wait_seconds: StrictFloat | None = Field(default=None, ge=0)
    limit: StrictInt | None = Field(default=None, ge=1, le=MAX_CLAIM_BATCH)


class ClaimNext(RequestModel):
    """A status update's ``claimNext``: after ending its attempt, the agent claims its next
    ``limit`` jobs in the same request (no wait)."""

    lease_seconds: StrictInt | None = Field(default=None, ge=0)
    limit: StrictInt = Field(default=1, ge=1, le=MAX_CLAIM_BATCH)


class JobWaitRequest(RequestModel):
    """Body of ``POST …/jobs/{jobId}/wait``, the cancellation long-poll: wait up to
    ``wait_seconds`` (capped by the server's ``max_wait_seconds``) for the claim ``claim_id`` to
    end."""

    claim_id: UUID
    wait_seconds: StrictFloat = Field(default=0.0, ge=0)


class HeartbeatRequest(RequestModel):
    """Body of a heartbeat: the claim it renews (fencing) and, optionally, a new lease length."""

    claim_id: UUID | None = None
    lease_seconds: StrictInt | None = Field(default=None, ge=0)
    # When the job's command last printed anything (the agent's clock); the server keeps it
    # on the claim for inspect-claims' quiet time. Older servers ignore it.
    last_output_at: WireTime | None = None


class UpdateJobStatusRequest(RequestModel):
    """Body of a status update: the new status, the claim it ends (fencing) and what to record."""

    status: JobStatus
    claim_id: UUID | None = None
    message: str | None = Field(default=None, max_length=65536)
    external_id: str | None = Field(default=None, max_length=1024)
    metadata: dict[str, Any] | None = None
    claim_next: ClaimNext | None = None
    # Without a claim id: end the claim without waiting for its holder to let go (a requeued
    # job is claimable at once, even while the old attempt's command may still run).
    force: StrictBool | None = None


class CreateJobRequest(RequestModel):
    """Body of an enqueue: the job's configuration, dispatch context and metadata."""

    job_agent_config: dict[str, Any] | None = None
    dispatch_context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
