"""`jobagentctl list`: the agent's jobs, queued ones by default."""

from __future__ import annotations

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.models import JobStatus

__all__ = ["register"]

STATUS_HELP = "Job status to show, or 'all' (statuses: queued, inProgress, successful, failure, …)."


def list_jobs(
    ctx: typer.Context,
    status: str = typer.Option(
        JobStatus.QUEUED.value, "--status", "-s", metavar="S", help=STATUS_HELP
    ),
    limit: int = typer.Option(50, "--limit", "-n", min=1, max=1000, help="Page size (1–1000)."),
    all_pages: bool = typer.Option(False, "--all-pages", help="Fetch every page, not just one."),
) -> None:
    """List the agent's jobs, newest first (default: queued ones).

    \b
    Example:
      jobagentctl --agent "$AGENT" list --status all --all-pages
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.status import status_filter
    from jobagentctl.client import iter_cursor_pages

    state = get_state(ctx)
    wanted = status_filter(status)
    agent = state.require_agent()
    with state.client() as client:
        if all_pages:
            jobs = list(
                iter_cursor_pages(
                    lambda n, off, cur: client.list_agent_jobs(
                        agent, status=wanted, limit=n, offset=off, cursor=cur
                    )
                )
            )
            total = len(jobs)
        else:
            page = client.list_agent_jobs(agent, status=wanted, limit=limit)
            jobs, total = page.items, page.total
    output.emit(state, "job", jobs, title=f"{len(jobs)} of {total} jobs ({status})")
    if not all_pages and total > len(jobs):
        output.info(state, f"showing {len(jobs)} of {total}; use --all-pages for the rest")


def register(app: typer.Typer) -> None:
    """Add the ``list`` command to ``app``."""
    app.command("list")(list_jobs)
