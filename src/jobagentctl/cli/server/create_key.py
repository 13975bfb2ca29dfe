"""`jobagentctl server create-key`: a workspace key, or one scoped to an agent (printed once)."""

from __future__ import annotations

import re
from typing import Annotated
from uuid import UUID

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.cli.server._common import DatabaseFlag

__all__ = ["register", "workspace_reference"]


def create_key(
    ctx: typer.Context,
    workspace: Annotated[str, typer.Option("--workspace", help="Workspace id or slug.")],
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="Job agent id: the key may then act only for this agent."),
    ] = None,
    database: DatabaseFlag = None,
) -> None:
    """Create an API key (workspace-wide, or scoped to one agent); print it once.

    Example: jobagentctl server create-key --workspace WS_ID --agent AGENT_ID -o json
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.params import uuid_arg
    from jobagentctl.cli.server._common import run_async, server_settings
    from jobagentctl.errors import JobAgentError, UsageError
    from jobagentctl.server import admin

    state = get_state(ctx)
    workspace_ref = workspace_reference(workspace)
    try:
        agent_id = uuid_arg(agent, "--agent") if agent is not None else None
    except UsageError as exc:
        # A key is bound to the agent's id (names may repeat): say where to find it.
        raise UsageError(f"{exc.message} (the agent's id: jobagentctl agents list)") from None
    settings = server_settings(database=database)

    async def checked_create() -> admin.CreatedKey:
        # A schema past this release's window is refused here as by server start and migrate:
        # a key written by a release that does not know the tables may not be what the newer
        # servers read (exit 2, one line).
        try:
            async with admin.opened_store(settings.database) as store:
                window = await store.schema_window()
        except JobAgentError:
            window = None  # not migrated, unreachable, a bad URL: create_key says so as before
        if window is not None:
            window.check()
        return await admin.create_key(settings.database, workspace_ref, agent_id)

    created = run_async(checked_create)
    output.emit(
        state,
        "key-created",
        {
            "id": str(created.id),
            "apiKey": created.api_key,
            "workspaceId": str(created.workspace_id),
            "jobAgentId": str(created.job_agent_id) if created.job_agent_id else None,
        },
    )
    output.notice("The API key is shown only once: store it now.")


def workspace_reference(value: str) -> UUID | str:
    """``--workspace`` as a UUID or a slug (as every other command takes it); a usage error
    (exit 2) for anything that can be neither."""
    from jobagentctl.errors import UsageError
    from jobagentctl.models import SLUG_PATTERN, Workspace

    reference = Workspace.reference(value.strip())
    if reference is None or (
        isinstance(reference, str) and not re.fullmatch(SLUG_PATTERN, reference)
    ):
        raise UsageError(
            f"--workspace {value!r}: not a workspace id nor a slug (3-50 lowercase letters, "
            "digits and '-')"
        )
    return reference


def register(app: typer.Typer) -> None:
    """Add ``server create-key`` to the ``server`` group."""
    app.command("create-key")(create_key)
