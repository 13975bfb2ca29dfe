"""What the `server` commands share: the --database option, server settings, running async work."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from pydantic import ValidationError as PydanticValidationError

    from jobagentctl.server.settings import ServerSettings

__all__ = [
    "LOCAL_PROFILE",
    "DatabaseFlag",
    "UpstreamKeyFileFlag",
    "UpstreamUrlFlag",
    "run_async",
    "server_settings",
    "slug_option",
]

T = TypeVar("T")

# The config profile `server init --write-config` writes.
LOCAL_PROFILE = "local"

_DATABASE_HELP = (
    "Database URL: sqlite:///PATH or postgresql://user@host:port/db "
    "[env JOBAGENTCTL_SERVER_DATABASE; default sqlite:///$XDG_DATA_HOME/jobagentctl/jobagent.db]"
)


# The options the ``server`` commands share, as ``Annotated`` types (default None: unset).
DatabaseFlag = Annotated[
    str | None, typer.Option("--database", help=_DATABASE_HELP, show_default=False)
]
# --upstream-url of gateway mode (docs/gateway.md).
UpstreamUrlFlag = Annotated[
    str | None,
    typer.Option(
        "--upstream-url",
        metavar="URL",
        help="Gateway mode: ctrlplane's API URL, with or without /api "
        "[env JOBAGENTCTL_SERVER_UPSTREAM_URL].",
        show_default=False,
    ),
]
# --upstream-key-file: ctrlplane's API key, never as a flag value.
UpstreamKeyFileFlag = Annotated[
    Path | None,
    typer.Option(
        "--upstream-key-file",
        metavar="FILE",
        help="Gateway mode: a file holding ctrlplane's API key (else env "
        "JOBAGENTCTL_SERVER_UPSTREAM_API_KEY; never a flag value).",
        show_default=False,
    ),
]


def slug_option(derived_from: str) -> Any:
    """The --slug option of the commands that create a workspace, for ``Annotated``.

    ``derived_from`` names what the default slug is made of.
    """
    return typer.Option(
        "--slug",
        metavar="SLUG",
        help="The workspace's slug, usable as --workspace: 3-50 of a-z, 0-9 and '-' (as "
        f"ctrlplane's) [default: derived from {derived_from}; made unique if taken]",
        show_default=False,
    )


def _problems(exc: PydanticValidationError, flags: dict[str, Any]) -> str:
    """Each refused setting by the name it was given as, and what is wrong, in our words. The name
    is ``--log-max-bytes`` for a flag, ``JOBAGENTCTL_SERVER_LOG_MAX_BYTES`` otherwise. Never
    pydantic's phrasing nor the value: it may be a secret, e.g. in a URL."""
    from jobagentctl.server.settings import ENV_PREFIX
    from jobagentctl.settings import problem_text

    said = []
    for err in exc.errors(include_input=False, include_url=False):
        field = str(err["loc"][0]) if err["loc"] else ""
        if not field:
            name = "settings"
        elif field in flags:
            name = "--" + field.replace("_", "-")
        else:
            name = f"{ENV_PREFIX}{field.upper()}"
        said.append(f"{name}: {problem_text(err)}")
    return "; ".join(said)


def server_settings(**overrides: Any) -> ServerSettings:
    """``ServerSettings`` from flags (those given) over ``JOBAGENTCTL_SERVER_*`` over defaults."""
    from pydantic import ValidationError as PydanticValidationError

    from jobagentctl.cli import output
    from jobagentctl.errors import ConfigError
    from jobagentctl.server.settings import ServerSettings, check_database_url, url_has_password

    if overrides.get("database") and url_has_password(overrides["database"]):
        # A flag is in every local user's `ps` and in shell history: say so, and where the
        # password would be safe.
        output.warn(
            "the password in --database is visible to every local user (ps, shell history); "
            "give the URL in JOBAGENTCTL_SERVER_DATABASE, or leave the password out and use "
            "PGPASSFILE (~/.pgpass) or PGPASSWORD"
        )

    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        settings = ServerSettings(**given)
    except PydanticValidationError as exc:
        raise ConfigError(f"invalid server settings: {_problems(exc, given)}") from None
    check_database_url(settings.database)
    return settings


def run_async(work: Callable[[], Awaitable[T]]) -> T:
    """Run one coroutine of the admin module to completion."""
    import asyncio

    async def awaited() -> T:
        return await work()

    return asyncio.run(awaited())
