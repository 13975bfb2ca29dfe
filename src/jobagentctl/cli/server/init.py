"""`jobagentctl server init`: schema, a workspace "default" and its first key (printed once)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.cli.server._common import (
    LOCAL_PROFILE,
    DatabaseFlag,
    UpstreamKeyFileFlag,
    UpstreamUrlFlag,
    slug_option,
)

if TYPE_CHECKING:
    from jobagentctl.server.admin import CreatedWorkspace
    from jobagentctl.server.settings import ServerSettings

__all__ = ["register"]


WriteConfigFlag = Annotated[
    bool,
    typer.Option(
        "--write-config", help=f"Store the workspace and key as profile '{LOCAL_PROFILE}'."
    ),
]
ForceFlag = Annotated[
    bool,
    typer.Option("--force", help=f"With --write-config: replace an existing '{LOCAL_PROFILE}'."),
]
UrlFlag = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Server URL for the written profile [default: http://HOST:PORT from the server "
        "settings, 127.0.0.1:8080].",
        show_default=False,
    ),
]


def init(  # noqa: PLR0913 - a Typer command: its parameters are its flags
    ctx: typer.Context,
    database: DatabaseFlag = None,
    slug: Annotated[str | None, slug_option('the name "default"')] = None,
    write_config: WriteConfigFlag = False,
    force: ForceFlag = False,
    url: UrlFlag = None,
    upstream_workspace: Annotated[
        str | None,
        typer.Option(
            "--upstream-workspace",
            metavar="SLUG|ID",
            help="Gateway mode: front this ctrlplane workspace (our workspace takes its id; "
            "needs --upstream-url and ctrlplane's key).",
            show_default=False,
        ),
    ] = None,
    upstream_url: UpstreamUrlFlag = None,
    upstream_key_file: UpstreamKeyFileFlag = None,
) -> None:
    """Create the schema, a workspace "default" and a workspace key; print them once.

    The workspace's slug (--slug, or "default" made unique) works as --workspace.
    A malformed --slug exits 2 and a taken one 6, creating nothing.

    --write-config refuses to replace an existing profile 'local' (its workspace and key would
    be lost) unless --force is given; nothing is created then.

    Example: jobagentctl server init --write-config

    Gateway mode (in front of ctrlplane, docs/gateway.md):
    JOBAGENTCTL_SERVER_UPSTREAM_API_KEY=... jobagentctl server init --upstream-url
    http://ctrlplane:3000 --upstream-workspace my-workspace
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.server._common import run_async, server_settings
    from jobagentctl.errors import UsageError
    from jobagentctl.server import admin
    from jobagentctl.server.settings import redact_url
    from jobagentctl.settings import ensure_profile_free

    state = get_state(ctx)
    settings = server_settings(
        database=database, upstream_url=upstream_url, upstream_key_file=upstream_key_file
    )
    if write_config and not force:
        # Refuse before creating anything: a second workspace nobody can reach helps no one.
        ensure_profile_free(LOCAL_PROFILE)
    if upstream_workspace is not None:
        created = _init_gateway(settings, upstream_workspace, slug)
    else:
        if upstream_url is not None:
            raise UsageError("--upstream-url needs --upstream-workspace SLUG|ID")
        created = run_async(lambda: admin.init(settings.database, slug=slug))
    written = _write_local_profile(settings, created, url, force=force) if write_config else None
    output.emit(
        state,
        "server-init",
        {
            "workspaceId": str(created.workspace_id),
            "apiKey": created.api_key,
            "database": redact_url(settings.database),
            "slug": created.slug,
        },
    )
    output.notice("The API key is shown only once: store it now.")
    if written is not None:
        output.info(state, f"Wrote profile '{LOCAL_PROFILE}' to {written}")


def _init_gateway(settings: ServerSettings, workspace: str, slug: str | None) -> CreatedWorkspace:
    """``server init --upstream-workspace``: our workspace is ctrlplane's (id and slug)."""
    from jobagentctl.cli.server._common import run_async
    from jobagentctl.errors import UsageError
    from jobagentctl.server.upstream.setup import init_gateway

    if slug is not None:
        raise UsageError("--slug does not go with --upstream-workspace: the slug is ctrlplane's")
    if settings.upstream_url is None:
        raise UsageError(
            "--upstream-workspace needs --upstream-url URL (or JOBAGENTCTL_SERVER_UPSTREAM_URL)"
        )
    key = settings.upstream_key()
    url = settings.upstream_url
    return run_async(lambda: init_gateway(settings.database, url, key, workspace))


def _write_local_profile(
    settings: ServerSettings, created: CreatedWorkspace, url: str | None, *, force: bool
) -> Path:
    """Write the new workspace and key as the profile ``local``, reaching this server (a
    wildcard bind address is reached on 127.0.0.1); the file written."""
    from jobagentctl.settings import write_profile

    host = settings.host if settings.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    profile = {
        "url": url or f"http://{host}:{settings.port}",
        "workspace": str(created.workspace_id),
        "api_key": created.api_key,
    }
    return write_profile(LOCAL_PROFILE, profile, force=force)


def register(app: typer.Typer) -> None:
    """Add ``server init`` to the ``server`` group."""
    app.command("init")(init)
