"""`jobagentctl server migrate`: apply pending schema migrations."""

from __future__ import annotations

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.cli.server._common import DatabaseFlag

__all__ = ["register"]


def migrate(ctx: typer.Context, database: DatabaseFlag = None) -> None:
    """Apply pending schema migrations (safe to run while servers of this release and the
    previous one are up: see docs/operators.md, "Upgrading").

    A database migrated past this release by a newer one is said so. Within the window (its newer
    migrations only expand the schema) it is a warning, else an error (exit 2).

    Example: jobagentctl server migrate --database postgresql://jobagent@db/jobagent
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.messages import warn
    from jobagentctl.cli.server._common import run_async, server_settings
    from jobagentctl.server import admin
    from jobagentctl.server.settings import redact_url

    state = get_state(ctx)
    settings = server_settings(database=database)
    applied, window = run_async(lambda: admin.migrate(settings.database))
    note = window.note()
    if note is not None:  # newer than this release, within its window: not "nothing to do"
        warn(note)
    result = {
        "applied": applied,
        "database": redact_url(settings.database),
        "schemaVersion": window.newest,
        "releaseSchemaVersion": window.known,
    }
    output.emit(state, "migrated", result)


def register(app: typer.Typer) -> None:
    """Add ``server migrate`` to the ``server`` group."""
    app.command("migrate")(migrate)
