"""`jobagentctl cancel`: an operator cancels a job; its agent learns at the next heartbeat."""

from __future__ import annotations

import typer

from jobagentctl.cli.requeue_cmd import set_status
from jobagentctl.models import JobStatus

__all__ = ["register"]


def cancel(
    ctx: typer.Context,
    job_id: str = typer.Argument(..., metavar="JOB_ID", help="The job to cancel."),
    message: str | None = typer.Option(None, "--message", "-m", metavar="M", help="Why."),
) -> None:
    """Cancel a job (status cancelled); an agent working on it is told at its next heartbeat.

    \b
    Example:
      jobagentctl cancel 3f0c…  --message "superseded by a newer release"
    """
    set_status(ctx, job_id, JobStatus.CANCELLED, message)


def register(app: typer.Typer) -> None:
    app.command("cancel")(cancel)
