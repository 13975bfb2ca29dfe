"""`jobagentctl server create-workspace NAME`: another workspace and its first key."""

from __future__ import annotations

from typing import Annotated

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.cli.server._common import DatabaseFlag, slug_option

__all__ = ["register"]


def create_workspace(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Workspace name.")],
    database: DatabaseFlag = None,
    slug: Annotated[str | None, slug_option("NAME")] = None,
) -> None:
    """Create another workspace and its first workspace key; print them once.

    The slug (--slug, or derived from NAME) works as --workspace. A malformed --slug exits 2
    and a taken one 6, creating nothing.

    Example: jobagentctl server create-workspace "Staging EU" --slug staging-eu -o json
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.server._common import run_async, server_settings
    from jobagentctl.errors import UsageError
    from jobagentctl.server import admin

    state = get_state(ctx)
    if not name.strip():
        raise UsageError("the workspace name must not be empty")
    settings = server_settings(database=database)
    created = run_async(lambda: admin.create_workspace(settings.database, name.strip(), slug=slug))
    output.emit(
        state,
        "workspace-created",
        {"workspaceId": str(created.workspace_id), "apiKey": created.api_key, "slug": created.slug},
    )
    output.notice("The API key is shown only once: store it now.")


def register(app: typer.Typer) -> None:
    """Add ``server create-workspace`` to the ``server`` group."""
    app.command("create-workspace")(create_workspace)
