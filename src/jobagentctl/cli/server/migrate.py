"""`jobagentctl server migrate`: apply pending schema migrations."""

from __future__ import annotations

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.cli.server._common import database_option

__all__ = ["register"]


def migrate(ctx: typer.Context, database: str | None = database_option()) -> None:
    """Apply pending schema migrations (safe to run while servers are up).

    Example: jobagentctl server migrate --database postgresql://jobagent@db/jobagent
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.server._common import run_async, server_settings
    from jobagentctl.server import admin
    from jobagentctl.server.settings import redact_url

    state = get_state(ctx)
    settings = server_settings(database=database)
    applied = run_async(lambda: admin.migrate(settings.database))
    output.emit(state, "migrated", {"applied": applied, "database": redact_url(settings.database)})


def register(app: typer.Typer) -> None:
    """Add ``server migrate`` to the ``server`` group."""
    app.command("migrate")(migrate)
