"""`jobagentctl requeue`: an operator puts a job back in the queue.

Also holds :func:`set_status`, the body `cancel` shares.
"""

from __future__ import annotations

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.models import JobStatus

__all__ = ["register", "set_status"]


def requeue(
    ctx: typer.Context,
    job_id: str = typer.Argument(..., metavar="JOB_ID", help="The job to put back in the queue."),
    message: str | None = typer.Option(None, "--message", "-m", metavar="M", help="Why."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Make the job claimable at once, without waiting for the agent holding its claim "
        "to stop its command: only for an agent known to be dead (two runs may overlap).",
    ),
) -> None:
    """Put a job back in the queue (status queued); its current claim, if any, ends.

    A job whose claim an agent still holds is claimable again once that agent has stopped its
    command (or its lease ran out): inspect-claims shows the claim as revoked meanwhile.

    \b
    Example:
      jobagentctl inspect-claims --state expired -o tsv | cut -f1 | xargs -n1 jobagentctl requeue
    """
    set_status(ctx, job_id, JobStatus.QUEUED, message, force=force)


def set_status(
    ctx: typer.Context, job_id: str, status: JobStatus, message: str | None, *, force: bool = False
) -> None:
    """Set ``status`` on a job as an operator (no claim id) and confirm."""
    from jobagentctl.cli import output
    from jobagentctl.cli.params import uuid_arg

    state = get_state(ctx)
    job = uuid_arg(job_id, "JOB_ID")
    with state.client() as client:
        accepted = client.update_status(job, status, message=message, force=force)
    output.emit_accepted(state, accepted, f"job {job}: {status.value}")


def register(app: typer.Typer) -> None:
    """Add the ``requeue`` command to ``app``."""
    app.command("requeue")(requeue)
