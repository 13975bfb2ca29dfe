"""The fencing rules of the lease operations, decided in Python on what the database read under the
job's lock. They say whether a status change applies and how it ends the open attempt. They say why
a heartbeat or a status change was refused."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID

from jobagentctl.errors import ClaimLost, ClaimMismatch, JobAgentError, NotFound, ValidationError
from jobagentctl.models import TERMINAL_STATUSES, AttemptOutcome, JobStatus

__all__ = ["StatusContext", "attempt_outcome_for", "decide_status_change", "heartbeat_failure"]


@dataclass(frozen=True, slots=True)
class StatusContext:
    """What ``set_status`` reads under the job's lock before deciding."""

    status: JobStatus
    current_claim_id: UUID | None  # the job_claim row's claim_id, None when there is no row
    current_attempt: int | None
    given_claim_outcome: str | None  # outcome of the attempt that carried the given claim_id


def _claim_refused(status: str, current_attempt: int | None, held: bool) -> JobAgentError:
    """``ClaimMismatch`` when another attempt holds the claim, else ``ClaimLost``; both carry
    the job's status (and the holder's attempt) for the agent to act on."""
    details: dict[str, Any] = {"jobStatus": status}
    if held:
        details["attempt"] = current_attempt
        return ClaimMismatch("another attempt holds the claim on this job", details=details)
    return ClaimLost("the claim is gone; the job was reaped, released or ended", details=details)


def decide_status_change(
    ctx: StatusContext,
    status: JobStatus,
    *,
    claim_id: UUID | None,
    agent_scope: UUID | None,
    require_claim_id: bool,
) -> Literal["apply", "noop"]:
    """The fencing rules of ``SqlStore.set_status``; raises the 409/400 errors, else says
    whether to write (``apply``) or answer an idempotent repeat without writing (``noop``)."""
    if claim_id is not None:
        if ctx.current_claim_id == claim_id:
            return "apply"
        if (
            ctx.current_claim_id is None
            and ctx.given_claim_outcome in (AttemptOutcome.COMPLETED, AttemptOutcome.CANCELLED)
            and ctx.status == status
        ):
            return "noop"
        held = ctx.current_claim_id is not None
        raise _claim_refused(ctx.status.value, ctx.current_attempt, held)
    if require_claim_id and agent_scope is not None and ctx.current_claim_id is not None:
        raise ValidationError("claimId is required to update a leased job")
    # Without a claim id every transition is allowed, as ctrlplane's V1 handler allows it, so
    # an operator can requeue a failed job; only a repeated terminal status is a no-op.
    if ctx.status in TERMINAL_STATUSES and ctx.status == status:
        return "noop"
    return "apply"


def attempt_outcome_for(status: JobStatus) -> AttemptOutcome:
    """How leaving ``inProgress`` for ``status`` closes the open attempt."""
    if status == JobStatus.CANCELLED:
        return AttemptOutcome.CANCELLED
    if status in TERMINAL_STATUSES:
        return AttemptOutcome.COMPLETED
    return AttemptOutcome.RELEASED


def heartbeat_failure(state: Mapping[str, Any] | None) -> JobAgentError:
    """The error of a heartbeat that touched no claim row, from the job's ``job_claim_state``
    (None: no such job in scope)."""
    if state is None:
        return NotFound("job not found")
    return _claim_refused(state["status"], state["attempt"], state["claim_id"] is not None)
