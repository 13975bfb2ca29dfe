"""`jobagentctl server create-workspace NAME`: another workspace and its first key."""

from __future__ import annotations

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.cli.server._common import database_option

__all__ = ["register"]


def create_workspace(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Workspace name."),
    database: str | None = database_option(),
) -> None:
    """Create another workspace and its first workspace key; print them once.

    Example: jobagentctl server create-workspace staging -o json
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.server._common import run_async, server_settings
    from jobagentctl.errors import UsageError
    from jobagentctl.server import admin

    state = get_state(ctx)
    if not name.strip():
        raise UsageError("the workspace name must not be empty")
    settings = server_settings(database=database)
    created = run_async(lambda: admin.create_workspace(settings.database, name.strip()))
    output.emit(
        state,
        "workspace-created",
        {"workspaceId": str(created.workspace_id), "apiKey": created.api_key},
    )
    output.notice("The API key is shown only once: store it now.")


def register(app: typer.Typer) -> None:
    app.command("create-workspace")(create_workspace)
