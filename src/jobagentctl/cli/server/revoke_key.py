"""`jobagentctl server revoke-key KEY_ID`: requests with that key get 401."""

from __future__ import annotations

from typing import Annotated

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.cli.server._common import DatabaseFlag

__all__ = ["register"]


def revoke_key(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key's id (from create-key).")],
    database: DatabaseFlag = None,
) -> None:
    """Revoke an API key: requests with it get 401 within a few seconds (key cache TTL).
    Revoking a revoked key changes nothing and succeeds.

    Example: jobagentctl server revoke-key KEY_ID
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.params import uuid_arg
    from jobagentctl.cli.server._common import run_async, server_settings
    from jobagentctl.server import admin

    state = get_state(ctx)
    key_uuid = uuid_arg(key_id, "KEY_ID")
    settings = server_settings(database=database)
    if not run_async(lambda: admin.revoke_key(settings.database, key_uuid)):
        output.info(state, f"key {key_uuid} was already revoked: nothing changed")
    output.emit(state, "key-revoked", {"id": str(key_uuid), "revoked": True})


def register(app: typer.Typer) -> None:
    """Add ``server revoke-key`` to the ``server`` group."""
    app.command("revoke-key")(revoke_key)
