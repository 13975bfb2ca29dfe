"""`jobagentctl jobs list|get|enqueue|attempts|logs`: jobs of the workspace."""

from __future__ import annotations

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.cli.status import EVERY_STATUS

__all__ = ["jobs_app", "register"]

jobs_app = typer.Typer(help="Jobs: list, get, enqueue, attempts, logs.", no_args_is_help=True)


@jobs_app.command("list")
def list_jobs(
    ctx: typer.Context,
    status: str = typer.Option(
        EVERY_STATUS, "--status", "-s", metavar="S", help=f"A status, or {EVERY_STATUS}."
    ),
    limit: int = typer.Option(50, "--limit", "-n", min=1, max=1000, help="Page size (1–1000)."),
    all_pages: bool = typer.Option(False, "--all-pages", help="Fetch every page."),
) -> None:
    """List the workspace's jobs of every agent, newest first.

    \b
    Example:
      jobagentctl jobs list --status failure
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.status import status_filter
    from jobagentctl.client import iter_cursor_pages

    state = get_state(ctx)
    wanted = status_filter(status)
    with state.client() as client:
        if all_pages:
            jobs = list(
                iter_cursor_pages(
                    lambda n, off, cur: client.list_jobs(
                        status=wanted, limit=n, offset=off, cursor=cur
                    )
                )
            )
        else:
            jobs = client.list_jobs(status=wanted, limit=limit).items
    output.emit(state, "job", jobs, title=f"jobs ({status})")


@jobs_app.command("get")
def get_job(
    ctx: typer.Context,
    job_id: str = typer.Argument(..., metavar="ID", help="The job."),
) -> None:
    """Show one job, with its config, dispatch context and metadata.

    \b
    Example:
      jobagentctl jobs get "$JOBAGENTCTL_JOB_ID" --json | jq .jobAgentConfig
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.params import uuid_arg

    state = get_state(ctx)
    job = uuid_arg(job_id, "ID")
    with state.client() as client:
        found = client.get_job(job)
    output.emit(state, "job", found)


@jobs_app.command("enqueue")
def enqueue(
    ctx: typer.Context,
    config: str | None = typer.Option(
        None, "--config", metavar="JSON|@FILE", help="The job's jobAgentConfig."
    ),
    context: str | None = typer.Option(
        None, "--context", metavar="JSON|@FILE", help="The job's dispatchContext."
    ),
    metadata: list[str] = typer.Option(
        [], "--metadata", metavar="K=V", help="Metadata entry (repeatable)."
    ),
) -> None:
    """Queue a new job for the agent (--agent) and print it.

    \b
    Example:
      jobagentctl jobs enqueue --config '{"script": "make deploy"}' --metadata env=prod
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.params import json_object, key_values

    state = get_state(ctx)
    job_config = json_object(config, "--config")
    dispatch = json_object(context, "--context")
    meta = key_values(metadata, "--metadata") or None
    agent = state.require_agent()
    with state.client() as client:
        job = client.create_job(
            agent, job_agent_config=job_config, dispatch_context=dispatch, metadata=meta
        )
    output.emit(state, "job", job)


@jobs_app.command("attempts")
def attempts(
    ctx: typer.Context,
    job_id: str = typer.Argument(..., metavar="ID", help="The job."),
) -> None:
    """Show every claim of a job: attempt number, claim id, agent, start, end and outcome.

    \b
    Example:
      jobagentctl jobs attempts 3f0c…
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.params import uuid_arg

    state = get_state(ctx)
    job = uuid_arg(job_id, "ID")
    with state.client() as client:
        found = client.list_attempts(job)
    output.emit(state, "attempt", found, title=f"attempts of job {job}")


@jobs_app.command("logs")
def logs(
    ctx: typer.Context,
    job_id: str = typer.Argument(..., metavar="ID", help="The job."),
    attempt: int | None = typer.Option(
        None, "--attempt", min=1, metavar="N", help="This attempt (default: the latest)."
    ),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Print new output until the attempt ends."
    ),
) -> None:
    """Print what a job attempt printed (both streams, in order), as it was stored.

    With --follow, wait for new output until the attempt ends: exit 0 if it succeeded, 8
    otherwise. -o json prints one object per chunk (seq, offset, stream, at, data).

    \b
    Example:
      jobagentctl jobs logs 3f0c… --follow
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.params import uuid_arg
    from jobagentctl.client import iter_log_pages
    from jobagentctl.errors import AttemptFailed
    from jobagentctl.models import AttemptOutcome, JobStatus

    state = get_state(ctx)
    job = uuid_arg(job_id, "ID")
    printer = output.LogPrinter(state)
    with state.client() as client:
        pages = iter_log_pages(
            lambda n, after, wait: client.read_logs(job, attempt=n, after=after, wait_seconds=wait),
            attempt=attempt,
            follow=follow,
        )
        for page in pages:
            printer.write(page.chunks)
    if follow and (page.outcome, page.job_status) != (
        AttemptOutcome.COMPLETED,
        JobStatus.SUCCESSFUL,
    ):
        outcome = page.outcome.value if page.outcome else "ended"
        raise AttemptFailed(
            f"attempt {page.attempt} of job {job} did not succeed: {outcome}, "
            f"job {page.job_status.value}"
        )


def register(app: typer.Typer) -> None:
    """Add the ``jobs`` command group to ``app``."""
    app.add_typer(jobs_app, name="jobs")
