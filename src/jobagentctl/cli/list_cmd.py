"""`jobagentctl list`: the agent's jobs, queued ones by default."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.cli.status import filter_choices
from jobagentctl.models import JobStatus

if TYPE_CHECKING:
    from uuid import UUID

    from jobagentctl.cli.context import AppState
    from jobagentctl.client import Client

__all__ = ["agent_names_for_table", "register"]

STATUS_HELP = "Job status to show, or 'all' (statuses: queued, inProgress, successful, failure, …)."


def list_jobs(
    ctx: typer.Context,
    status: Annotated[
        str,
        typer.Option(
            "--status", "-s", metavar="S", help=STATUS_HELP, autocompletion=filter_choices
        ),
    ] = JobStatus.QUEUED.value,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=1000, help="Page size (1–1000).")
    ] = 50,
    all_pages: Annotated[
        bool, typer.Option("--all-pages", help="Fetch every page, not just one.")
    ] = False,
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
        names = agent_names_for_table(state, client)
    title = output.count_title(f"jobs ({status})", len(jobs), total)
    output.emit(state, "job", jobs, title=title, agents=names)
    output.more_hint(state, len(jobs), total)


def agent_names_for_table(state: AppState, client: Client) -> Callable[[UUID], str | None] | None:
    """The agents' names for a table's AGENT column: read (once, every page) only when a
    person will see the table."""
    from jobagentctl.cli import context
    from jobagentctl.cli.claims_live import agent_names

    if state.output != "table" or not context.stdout_is_tty():
        return None
    return agent_names(client)


def register(app: typer.Typer) -> None:
    """Add the ``list`` command to ``app``."""
    app.command("list")(list_jobs)
