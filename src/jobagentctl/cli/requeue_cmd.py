"""`jobagentctl requeue`: an operator puts a job back in the queue.

Also holds :func:`set_status`, the body `cancel` shares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.models import JobStatus

if TYPE_CHECKING:
    from uuid import UUID

    from jobagentctl.client import Client

__all__ = ["held_notice", "register", "set_status"]


def requeue(
    ctx: typer.Context,
    job_id: Annotated[
        str, typer.Argument(metavar="JOB_ID", help="The job to put back in the queue.")
    ],
    message: Annotated[
        str | None, typer.Option("--message", "-m", metavar="M", help="Why.")
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Make the job claimable at once, without waiting for the agent holding its claim "
            "to stop its command: only for an agent known to be dead (two runs may overlap).",
        ),
    ] = False,
) -> None:
    """Put a job back in the queue (status queued); its current claim, if any, ends.

    A job whose claim an agent still holds is claimable again once that agent has stopped its
    command, or its lease ran out. Meanwhile inspect-claims shows the claim as revoked.

    \b
    Example:
      jobagentctl inspect-claims --state expired -o tsv | cut -f1 | xargs -n1 jobagentctl requeue
    """
    set_status(ctx, job_id, JobStatus.QUEUED, message, force=force)


def set_status(
    ctx: typer.Context, job_id: str, status: JobStatus, message: str | None, *, force: bool = False
) -> None:
    """Set ``status`` on a job as an operator (no claim id) and confirm. When an agent still holds
    the job's claim, say on stderr what that means for the job (:func:`held_notice`)."""
    from jobagentctl.cli import output
    from jobagentctl.cli.messages import notice
    from jobagentctl.cli.params import uuid_arg

    state = get_state(ctx)
    job = uuid_arg(job_id, "JOB_ID")
    with state.client() as client:
        accepted = client.update_status(job, status, message=message, force=force)
        held = None if force else held_notice(client, job, status)
    output.emit_accepted(state, accepted, f"job {job}: {status.value}")
    if held:
        notice(held)


def held_notice(client: Client, job: UUID, status: JobStatus) -> str | None:
    """What a requeue or cancel that leaves a claim held means, e.g. ``job … is queued but not
    claimable until its agent lets go of its claim or the lease ends at 12:03:40Z (in 4m);
    `requeue --force …` skips the wait``; None when no claim is held (or the server cannot
    say: ctrlplane, an older jobagentctl)."""
    from jobagentctl.cli.output import relative, rfc3339
    from jobagentctl.errors import JobAgentError
    from jobagentctl.models import ClaimState

    try:
        found = client.get_job(job)
        if not found.claim_held:
            return None
        until = "its lease ends"
        if found.agent_id is not None:
            page = client.list_claims(agent_id=found.agent_id, state=ClaimState.REVOKED, limit=1000)
            ends = [c.claim_expires_at for c in page.items if c.job_id == job]
            if ends and ends[0] is not None:
                until = f"its lease ends at {rfc3339(ends[0])} ({relative(ends[0])})"
    except JobAgentError:
        return None  # the update was made; what the server cannot tell is left unsaid
    holder = f"its agent lets go of its claim (stops the command) or {until}"
    if status == JobStatus.QUEUED:
        return (
            f"job {job} is queued but not claimable until {holder}; "
            f"`jobagentctl requeue --force {job}` skips the wait (only for an agent known to "
            f"be dead: two runs may overlap)"
        )
    return f"job {job} is {status.value}; its agent holds the claim until {holder}"


def register(app: typer.Typer) -> None:
    """Add the ``requeue`` command to ``app``."""
    app.command("requeue")(requeue)
