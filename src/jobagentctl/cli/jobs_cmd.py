"""`jobagentctl jobs list|get|enqueue|attempts|logs`: jobs of the workspace."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.cli.status import EVERY_STATUS, filter_choices

if TYPE_CHECKING:
    from datetime import datetime
    from uuid import UUID

    from jobagentctl.cli.context import AppState
    from jobagentctl.cli.output import LogPrinter
    from jobagentctl.models import AttemptOutcome, Job, JobStatus

__all__ = ["jobs_app", "register"]

jobs_app = typer.Typer(help="Jobs: list, get, enqueue, attempts, logs.", no_args_is_help=True)


@jobs_app.command("list")
def list_jobs(
    ctx: typer.Context,
    status: Annotated[
        str,
        typer.Option(
            "--status",
            "-s",
            metavar="S",
            help=f"A status, or {EVERY_STATUS}.",
            autocompletion=filter_choices,
        ),
    ] = EVERY_STATUS,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=1000, help="Page size (1–1000).")
    ] = 50,
    all_pages: Annotated[bool, typer.Option("--all-pages", help="Fetch every page.")] = False,
) -> None:
    """List the workspace's jobs of every agent, newest first.

    \b
    Example:
      jobagentctl jobs list --status failure
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.list_cmd import agent_names_for_table
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
            page = client.list_jobs(status=wanted, limit=limit)
            jobs, total = page.items, page.total
        names = agent_names_for_table(state, client)
    shown = len(jobs)
    title = output.count_title(f"jobs ({status})", shown, shown if all_pages else total)
    output.emit(state, "job", jobs, title=title, agents=names)
    if not all_pages:
        output.more_hint(state, shown, total)


@jobs_app.command("get")
def get_job(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID", help="The job.")],
) -> None:
    """Show one job, with its config, dispatch context and metadata. Its claimHeld says whether an
    agent still holds a claim on it (a requeued job waits for it to be let go).

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
    # Absent means no claim is held (the server says it only when true): the table, tsv and env
    # say false too; JSON stays the object as the server sent it (ctrlplane has no such field).
    held = bool(found.claim_held)
    if state.output == "env":
        output.emit_env(state, _job_env(found, held))
    elif state.output == "json":
        output.emit(state, "job-detail", found)
    else:
        output.emit(state, "job-detail", found, overrides=[{"claimHeld": held}])


def _job_env(job: Job, claim_held: bool) -> dict[str, object]:
    """``jobs get -o env``: the job's fields as ``JOBAGENTCTL_JOB_*`` variables."""
    from jobagentctl.cli.output import rfc3339
    from jobagentctl.models import JOB_ID_ENV

    def when(value: datetime | None) -> str | None:
        return rfc3339(value) if value is not None else None

    return {
        JOB_ID_ENV: job.id,
        "JOBAGENTCTL_JOB_STATUS": job.status.value,
        "JOBAGENTCTL_JOB_AGENT_ID": job.agent_id,
        "JOBAGENTCTL_JOB_CREATED_AT": when(job.created_at),
        "JOBAGENTCTL_JOB_STARTED_AT": when(job.started_at),
        "JOBAGENTCTL_JOB_COMPLETED_AT": when(job.completed_at),
        "JOBAGENTCTL_JOB_EXTERNAL_ID": job.external_id,
        "JOBAGENTCTL_JOB_MESSAGE": job.message,
        "JOBAGENTCTL_JOB_CLAIM_HELD": "true" if claim_held else "false",
    }


@jobs_app.command("enqueue")
def enqueue(
    ctx: typer.Context,
    config: Annotated[
        str | None, typer.Option("--config", metavar="JSON|@FILE", help="The job's jobAgentConfig.")
    ] = None,
    context: Annotated[
        str | None,
        typer.Option("--context", metavar="JSON|@FILE", help="The job's dispatchContext."),
    ] = None,
    metadata: Annotated[
        list[str] | None,
        typer.Option("--metadata", metavar="K=V", help="Metadata entry (repeatable)."),
    ] = None,
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
    meta = key_values(metadata or [], "--metadata") or None
    agent = state.require_agent()
    with state.client() as client:
        job = client.create_job(
            agent, job_agent_config=job_config, dispatch_context=dispatch, metadata=meta
        )
    output.emit(state, "job", job)


@jobs_app.command("attempts")
def attempts(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID", help="The job.")],
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
    job_id: Annotated[str, typer.Argument(metavar="ID", help="The job.")],
    attempt: Annotated[
        int | None,
        typer.Option("--attempt", min=1, metavar="N", help="This attempt (default: the latest)."),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Print new output until the job (or --attempt N) ends."
        ),
    ] = False,
) -> None:
    """Print what a job attempt printed (both streams, in order), as it was stored.

    With --follow, follow the job. Wait for its first attempt if it is not claimed yet, and keep
    going through server restarts. Move on to the next attempt (a marker line) when one is requeued
    or expires. Exit by the job's final attempt: 0 if it succeeded, 8 otherwise. With --attempt N
    --follow, follow that attempt alone. -o json prints one object per chunk (seq, offset, stream,
    at, data).

    \b
    Example:
      jobagentctl jobs logs 3f0c… --follow
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.params import uuid_arg

    state = get_state(ctx)
    job = uuid_arg(job_id, "ID")
    printer = output.LogPrinter(state)
    if follow and attempt is None:
        _follow_job(state, job, printer)
    else:
        _print_attempt(state, job, attempt, follow, printer)


def _print_attempt(
    state: AppState, job: UUID, attempt: int | None, follow: bool, printer: LogPrinter
) -> None:
    """One attempt's log: as stored now, or (``follow``) to the attempt's end."""
    from jobagentctl.cli.logs_follow import NO_OUTPUT
    from jobagentctl.cli.messages import info
    from jobagentctl.client import iter_log_pages
    from jobagentctl.errors import AttemptFailed
    from jobagentctl.models import AttemptOutcome, JobStatus

    printed = False
    with state.client() as client:
        pages = iter_log_pages(
            lambda n, after, wait: client.read_logs(job, attempt=n, after=after, wait_seconds=wait),
            attempt=attempt,
            follow=follow,
        )
        for page in pages:
            printer.write(page.chunks)
            printed = printed or bool(page.chunks)
    if not printed:
        info(state, NO_OUTPUT if page.ended else f"{NO_OUTPUT} yet: it is still running")
    if follow and (page.outcome, page.job_status) != (
        AttemptOutcome.COMPLETED,
        JobStatus.SUCCESSFUL,
    ):
        raise AttemptFailed(_did_not_succeed(job, page.attempt, page.outcome, page.job_status))


def _follow_job(state: AppState, job: UUID, printer: LogPrinter) -> None:
    """``--follow`` of the whole job (cli/logs_follow.py): exit 0 if its final attempt
    succeeded, else :class:`AttemptFailed` (8)."""
    from jobagentctl.cli.logs_follow import JobFollow
    from jobagentctl.cli.messages import info
    from jobagentctl.client import LOG_FOLLOW_WAIT
    from jobagentctl.errors import AttemptFailed

    with state.client() as client:
        follow = JobFollow(
            job,
            read=lambda n, after, wait: client.read_logs(
                job, attempt=n, after=after, wait_seconds=wait
            ),
            job_status=lambda: client.get_job(job).status,
            chunks=printer.write,
            marker=printer.marker,
            note=lambda text: info(state, text),
            wait_seconds=LOG_FOLLOW_WAIT,
        )
        ended = follow.run()
    if ended.succeeded:
        return
    if ended.attempt is None:
        raise AttemptFailed(
            f"job {job} ended without being claimed: its status is {ended.job_status.value}"
        )
    raise AttemptFailed(_did_not_succeed(job, ended.attempt, ended.outcome, ended.job_status))


def _did_not_succeed(
    job: UUID, attempt: int, outcome: AttemptOutcome | None, status: JobStatus
) -> str:
    """Why ``jobs logs --follow`` exits 8, e.g. ``attempt 2 of job … did not succeed: outcome
    completed, job status failure``."""
    how = outcome.value if outcome else "ended"
    return (
        f"attempt {attempt} of job {job} did not succeed: outcome {how}, job status {status.value}"
    )


def register(app: typer.Typer) -> None:
    """Add the ``jobs`` command group to ``app``."""
    app.add_typer(jobs_app, name="jobs")
