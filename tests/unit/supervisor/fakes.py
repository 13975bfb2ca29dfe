"""A scripted, thread-safe stand-in for the API client the supervisor uses."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from jobagentctl.errors import LeaseUnsupported, NoJob
from jobagentctl.models import (
    AcceptedResponse,
    ClaimedJob,
    ClaimNext,
    Heartbeat,
    JobStatus,
    JobWait,
    LogChunkIn,
)
from jobagentctl.supervisor.protocol import SupervisorClient

__all__ = ["Call", "FakeClient", "claimed_job"]


def claimed_job(
    *, lease_seconds: int | None = 60, attempt: int = 1, leased: bool = True
) -> ClaimedJob:
    now = datetime.now(UTC)
    return ClaimedJob(
        id=uuid.uuid4(),
        job_agent_id=uuid.uuid4(),
        status=JobStatus.IN_PROGRESS,
        created_at=now,
        updated_at=now,
        job_agent_config={"script": "demo"},
        claim_id=uuid.uuid4() if leased else None,
        lease_seconds=lease_seconds if leased else None,
        claimed_at=now,
        attempt=attempt,
    )


@dataclass
class Call:
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class FakeClient(SupervisorClient):
    """Queued jobs are handed out by ``claim_next``; other answers come from hooks.

    It subclasses the Protocol the supervisor is typed against, so that mypy (``make
    typecheck`` covers tests/) fails when the two drift apart: a method missing or of
    another signature.

    A hook (``on_heartbeat``, ``on_update_status``, …) returns a value or raises; by default
    heartbeats and status updates succeed.
    """

    jobs: list[ClaimedJob] = field(default_factory=list)
    on_claim: Callable[[], ClaimedJob] | None = None
    on_heartbeat: Callable[[int], None] | None = None
    on_update_status: Callable[[int], None] | None = None
    on_release: Callable[[int], None] | None = None
    # The claim long-poll: by default the server has none (as an older server).
    on_wait: Callable[[int], JobWait] | None = None
    # Log appends: by default accepted (and recorded); a hook may raise or stall.
    on_append: Callable[[int], object] | None = None
    # What an accepted append answers (by default a bare acknowledgement).
    append_answer: Callable[[int], object] | None = None
    # A server whose status update claims the next jobs when asked (claimNext);
    # by default it ignores the request, as ctrlplane and older servers do.
    claims_next: bool = False
    calls: list[Call] = field(default_factory=list)
    appended: list[list[LogChunkIn]] = field(default_factory=list)
    closed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _record(self, name: str, *args: Any, **kwargs: Any) -> int:
        with self._lock:
            self.calls.append(Call(name, args, kwargs))
            return sum(1 for call in self.calls if call.name == name)

    def named(self, name: str) -> list[Call]:
        with self._lock:
            return [call for call in self.calls if call.name == name]

    def claim_next(
        self, agent_id: UUID, *, lease_seconds: int | None, wait_seconds: float | None
    ) -> ClaimedJob:
        self._record("claim_next", agent_id, lease_seconds=lease_seconds, wait=wait_seconds)
        if self.on_claim is not None:
            return self.on_claim()
        with self._lock:
            if self.jobs:
                return self.jobs.pop(0)
        raise NoJob("no job queued for this agent", status=204)

    def claim_job(self, agent_id: UUID, job_id: UUID, *, lease_seconds: int | None) -> ClaimedJob:
        self._record("claim_job", agent_id, job_id, lease_seconds=lease_seconds)
        if self.on_claim is not None:
            return self.on_claim()
        with self._lock:
            return self.jobs.pop(0)

    def heartbeat(
        self,
        job_id: UUID,
        *,
        claim_id: UUID | None,
        lease_seconds: int | None = None,
        last_output_at: datetime | None = None,
    ) -> Heartbeat:
        n = self._record("heartbeat", job_id, claim_id=claim_id, last_output_at=last_output_at)
        if self.on_heartbeat is not None:
            self.on_heartbeat(n)
        lease = 3
        return Heartbeat(
            job_id=job_id,
            claim_id=claim_id or uuid.uuid4(),
            attempt=1,
            lease_seconds=lease,
            claim_expires_at=datetime.now(UTC) + timedelta(seconds=lease),
        )

    def wait_claim(self, job_id: UUID, *, claim_id: UUID, wait_seconds: float) -> JobWait:
        n = self._record("wait_claim", job_id, claim_id=claim_id, wait_seconds=wait_seconds)
        if self.on_wait is None:
            raise LeaseUnsupported("the server has no claim long-poll", status=404)
        return self.on_wait(n)

    def update_status(
        self,
        job_id: UUID,
        status: JobStatus,
        *,
        claim_id: UUID | None = None,
        message: str | None = None,
        claim_next: ClaimNext | None = None,
    ) -> object:
        n = self._record(
            "update_status", job_id, status, claim_id=claim_id, message=message, next=claim_next
        )
        if self.on_update_status is not None:
            self.on_update_status(n)
        accepted = AcceptedResponse(id=job_id, message="ok")
        if claim_next is not None and self.claims_next:
            with self._lock:
                accepted.claimed, self.jobs = (
                    self.jobs[: claim_next.limit],
                    self.jobs[claim_next.limit :],
                )
        return accepted

    def release(self, job_id: UUID, *, claim_id: UUID | None) -> object:
        n = self._record("release", job_id, claim_id=claim_id)
        if self.on_release is not None:
            self.on_release(n)
        return {"id": str(job_id), "message": "ok"}

    def append_logs(self, job_id: UUID, claim_id: UUID, chunks: list[LogChunkIn]) -> object:
        n = self._record("append_logs", job_id, claim_id=claim_id, chunks=list(chunks))
        if self.on_append is not None:
            self.on_append(n)
        with self._lock:
            self.appended.append(list(chunks))
        if self.append_answer is not None:
            return self.append_answer(n)
        return {"jobId": str(job_id)}

    def recheck_logs(self) -> None:
        self._record("recheck_logs")

    def shipped(self) -> list[tuple[str, bytes]]:
        """Every chunk the fake server took so far, in order: ``(stream, raw bytes)``."""
        with self._lock:
            return [(c.stream.value, c.raw()) for chunks in self.appended for c in chunks]

    def close(self) -> None:
        with self._lock:
            self.closed += 1
