"""The seam between the supervisor and the API: the client methods `run` uses, as a Protocol.

The real :class:`jobagentctl.client.Client` satisfies it; unit tests inject a fake.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol
from uuid import UUID

from jobagentctl.errors import JobAgentError, ServerError, ServerUnavailable
from jobagentctl.models import ClaimedJob, ClaimNext, Heartbeat, JobStatus, JobWait, LogChunkIn

__all__ = ["SupervisorClient", "describe_error", "is_transient"]


class SupervisorClient(Protocol):
    """What the supervisor asks of the API. Return values it does not read are ``object``."""

    def claim_job(self, agent_id: UUID, job_id: UUID, *, lease_seconds: int | None) -> ClaimedJob:
        """Claim one job by id; ``NotClaimable`` when it is not queued."""
        ...

    def claim_next(
        self, agent_id: UUID, *, lease_seconds: int | None, wait_seconds: float | None
    ) -> ClaimedJob:
        """Claim the oldest queued job, long-polling; ``NoJob`` when none came."""
        ...

    def heartbeat(
        self,
        job_id: UUID,
        *,
        claim_id: UUID | None,
        lease_seconds: int | None = None,
        last_output_at: datetime | None = None,
    ) -> Heartbeat:
        """Extend the lease (and say when the command last printed); ``ClaimLost``/
        ``ClaimMismatch`` when it is no longer ours."""
        ...

    def wait_claim(self, job_id: UUID, *, claim_id: UUID, wait_seconds: float) -> JobWait:
        """Long-poll until the claim is no longer held or the wait runs out;
        ``LeaseUnsupported`` when the server has no such endpoint."""
        ...

    def update_status(
        self,
        job_id: UUID,
        status: JobStatus,
        *,
        claim_id: UUID | None = None,
        message: str | None = None,
        claim_next: ClaimNext | None = None,
    ) -> object:
        """Report a status (the terminal one, at the end of a run). With ``claim_next``, the
        answer's ``claimed`` lists the jobs the same request claimed (absent: none)."""
        ...

    def release(self, job_id: UUID, *, claim_id: UUID | None) -> object:
        """Give the job back to the queue (status ``queued``)."""
        ...

    def append_logs(self, job_id: UUID, claim_id: UUID, chunks: list[LogChunkIn]) -> object:
        """Append output to the log of the attempt ``claim_id`` holds; ``ClaimLost`` /
        ``ClaimMismatch`` when it is not the job's current claim, ``LogsUnsupported`` on a
        server without the log endpoint."""
        ...

    def recheck_logs(self) -> None:
        """Forget that the server was found without logs: the next append asks it again."""
        ...

    def close(self) -> None:
        """Free the connections."""
        ...


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth retrying: connect errors, timeouts, 408, 429, 5xx.

    The client maps connect errors, timeouts, 408, 429 and 502–504 to ``ServerUnavailable``, and
    other 5xx to ``ServerError``. The status check keeps 408/429 transient even if that mapping
    moves. Malformed responses (``ProtocolError``) are not retried: they do not heal.
    """
    if isinstance(exc, ServerUnavailable | ServerError):
        return True
    return isinstance(exc, JobAgentError) and exc.status in (408, 429)


def describe_error(exc: BaseException | None) -> str:
    """A one-line account of ``exc`` for stderr: our errors by their message, others by type."""
    if exc is None:
        return "unknown error"
    if isinstance(exc, JobAgentError):
        return exc.message
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
