"""`jobagentctl server …`: run the API server and administer its database, one module a command.

As every command, these:

- raise :mod:`jobagentctl.errors` exceptions (the root app maps them to exit codes);
- print through :mod:`jobagentctl.cli.output` under the global ``-o``/``--json``;
- import the server package (FastAPI, uvicorn, asyncpg) only inside the command that runs.
"""

from __future__ import annotations

import typer

from jobagentctl.cli.server import (
    create_key,
    create_workspace,
    init,
    migrate,
    revoke_key,
    start,
)

__all__ = ["register", "server_app"]

server_app = typer.Typer(
    help="Run and administer the jobagentctl server (API, reaper, database).",
    no_args_is_help=True,
)

for _module in (init, start, migrate, create_key, create_workspace, revoke_key):
    _module.register(server_app)


def register(app: typer.Typer) -> None:
    """Add the ``server`` command group to ``app``."""
    app.add_typer(server_app, name="server")
