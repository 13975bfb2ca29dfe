"""`jobagentctl cancel`: an operator cancels a job. A `run` working on it stops its command within
about a second (its claim long-poll), or at its next heartbeat on servers without one."""

from __future__ import annotations

from typing import Annotated

import typer

from jobagentctl.cli.requeue_cmd import set_status
from jobagentctl.models import JobStatus

__all__ = ["register"]


def cancel(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID", help="The job to cancel.")],
    message: Annotated[
        str | None, typer.Option("--message", "-m", metavar="M", help="Why.")
    ] = None,
) -> None:
    """Cancel a job (status cancelled); a `run` working on it stops its command within ~1 s.

    (At its next heartbeat on a server without the claim long-poll: docs/run.md.)

    \b
    Example:
      jobagentctl cancel 3f0c…  --message "superseded by a newer release"
    """
    set_status(ctx, job_id, JobStatus.CANCELLED, message)


def register(app: typer.Typer) -> None:
    """Add the ``cancel`` command to ``app``."""
    app.command("cancel")(cancel)
