"""`jobagentctl server …`: run the API server and administer its database.

The server package (FastAPI, uvicorn, psycopg) is imported inside each command, never at
import time, so client commands and ``--help`` stay fast and work without the server extras.
"""

from __future__ import annotations

import json
import os
import tempfile
import tomllib
from collections.abc import Awaitable, Callable
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import typer

from jobagentctl.errors import ConfigError, JobAgentError, UsageError

__all__ = ["server_app"]

server_app = typer.Typer(
    help="Run and administer the jobagentctl server (API, reaper, database).",
    no_args_is_help=True,
)

T = TypeVar("T")

_LOCAL_PROFILE = "local"


class Output(StrEnum):
    table = "table"
    json = "json"


# --- shared options ---------------------------------------------------------------------------

_DATABASE_HELP = (
    "Database URL: sqlite:///PATH or postgresql://user@host:port/db "
    "[env JOBAGENTCTL_SERVER_DATABASE; default sqlite:///$XDG_DATA_HOME/jobagentctl/jobagent.db]"
)


def _database_option() -> Any:
    return typer.Option(None, "--database", help=_DATABASE_HELP, show_default=False)


def _output_option() -> Any:
    return typer.Option(
        Output.table,
        "-o",
        "--output",
        help="Output format: human text or json.",
        case_sensitive=False,
    )


def _json_option() -> Any:
    return typer.Option(False, "--json", help="Same as -o json.")


def _fmt(output: Output, as_json: bool) -> Output:
    return Output.json if as_json else output


# --- plumbing ---------------------------------------------------------------------------------


def _fail(exc: JobAgentError, output: Output) -> typer.Exit:
    """Report ``exc`` on stderr (and as one JSON line with -o json); the caller raises."""
    typer.echo(f"error: {exc.message}", err=True)
    if output is Output.json:
        line = {
            "error": {
                "code": exc.code,
                "message": exc.message,
                "status": None,
                "exitCode": exc.exit_code,
            }
        }
        typer.echo(json.dumps(line), err=True)
    return typer.Exit(exc.exit_code)


def _settings(output: Output, **overrides: Any) -> Any:
    """``ServerSettings`` from flags (those given) over ``JOBAGENTCTL_SERVER_*`` over defaults."""
    from pydantic import ValidationError as PydanticValidationError

    from jobagentctl.server.settings import ServerSettings, check_database_url

    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        settings = ServerSettings(**given)
        check_database_url(settings.database)
    except PydanticValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors()
        )
        raise _fail(ConfigError(f"invalid server settings: {problems}"), output) from None
    except JobAgentError as exc:
        raise _fail(exc, output) from None
    return settings


def _run(output: Output, work: Callable[[], Awaitable[T]]) -> T:
    import asyncio

    try:
        return asyncio.run(_awaited(work))
    except JobAgentError as exc:
        raise _fail(exc, output) from None


async def _awaited(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


def _parse_uuid(value: str, what: str, output: Output) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise _fail(UsageError(f"{what} is not a UUID: {value!r}"), output) from None


def _emit(output: Output, data: dict[str, Any], human: list[str]) -> None:
    """Data to stdout: JSON on request, else a few readable lines."""
    if output is Output.json:
        typer.echo(json.dumps(data, indent=2))
    else:
        for line in human:
            typer.echo(line)


# --- config file ------------------------------------------------------------------------------


def _config_path() -> Path:
    # Same rule as the client settings (SPEC §5); duplicated to keep server commands independent.
    explicit = os.environ.get("JOBAGENTCTL_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "jobagentctl" / "config.toml"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a valid TOML basic string (same escapes, \uXXXX included).
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ConfigError(f"cannot rewrite the config file: unsupported value {value!r}")


def _toml_dump(data: dict[str, Any], prefix: str = "") -> str:
    lines: list[str] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    out = "\n".join(lines)
    for key, table in tables:
        name = f"{prefix}.{_toml_key(key)}" if prefix else _toml_key(key)
        body = _toml_dump(table, name)
        has_scalars = any(not isinstance(v, dict) for v in table.values())
        header = f"[{name}]\n" if has_scalars or not table else ""
        out += ("\n\n" if out else "") + header + body
    return out


def _toml_key(key: str) -> str:
    if key and all(c.isalnum() or c in "-_" for c in key):
        return key
    return json.dumps(key)


def _write_local_profile(url: str, workspace_id: UUID, api_key: str) -> Path:
    """Store profile ``local`` (and make it the default if none is set), file mode 0600."""
    path = _config_path()
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read the config file {path}: {exc}") from exc
    profiles = data.setdefault("profiles", {})
    if not isinstance(profiles, dict):
        raise ConfigError(f"{path}: 'profiles' is not a table")
    profiles[_LOCAL_PROFILE] = {"url": url, "workspace": str(workspace_id), "api_key": api_key}
    data.setdefault("default_profile", _LOCAL_PROFILE)
    # Top-level scalars must come before any table in TOML.
    ordered = {k: v for k, v in data.items() if not isinstance(v, dict)}
    ordered.update({k: v for k, v in data.items() if isinstance(v, dict)})
    text = _toml_dump(ordered) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written to a 0600 temporary file then renamed: the key is never world-readable, even
    # for an instant, and a crash leaves the old file intact.
    fd, tmp = tempfile.mkstemp(prefix=".config.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# --- commands ---------------------------------------------------------------------------------


@server_app.command("init")
def init_cmd(
    database: str | None = _database_option(),
    write_config: bool = typer.Option(
        False, "--write-config", help="Store the workspace and key as config profile 'local'."
    ),
    url: str | None = typer.Option(
        None,
        "--url",
        help="Server URL for the written profile [default: http://HOST:PORT from the server "
        "settings, 127.0.0.1:8080].",
        show_default=False,
    ),
    output: Output = _output_option(),
    as_json: bool = _json_option(),
) -> None:
    """Create the schema, a workspace "default" and a workspace key; print them once.

    Example: jobagentctl server init --write-config
    """
    from jobagentctl.server import admin

    fmt = _fmt(output, as_json)
    settings = _settings(fmt, database=database)
    created = _run(fmt, lambda: admin.init(settings.database))
    written: Path | None = None
    if write_config:
        host = settings.host if settings.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        profile_url = url or f"http://{host}:{settings.port}"
        try:
            written = _write_local_profile(profile_url, created.workspace_id, created.api_key)
        except (JobAgentError, OSError) as exc:
            error = exc if isinstance(exc, JobAgentError) else ConfigError(str(exc))
            raise _fail(error, fmt) from None
    from jobagentctl.server.settings import redact_url

    _emit(
        fmt,
        {
            "workspaceId": str(created.workspace_id),
            "apiKey": created.api_key,
            "database": redact_url(settings.database),
        },
        [
            f"Workspace: {created.workspace_id}",
            f"API key:   {created.api_key}",
            f"Database:  {redact_url(settings.database)}",
        ],
    )
    typer.echo("The API key is shown only once: store it now.", err=True)
    if written is not None:
        typer.echo(f"Wrote profile '{_LOCAL_PROFILE}' to {written}", err=True)


@server_app.command("start")
def start_cmd(
    database: str | None = _database_option(),
    host: str | None = typer.Option(
        None,
        "--host",
        help="Address to bind [env JOBAGENTCTL_SERVER_HOST; 127.0.0.1].",
        show_default=False,
    ),
    port: int | None = typer.Option(
        None, "--port", help="Port to bind [env JOBAGENTCTL_SERVER_PORT; 8080].", show_default=False
    ),
    lease_seconds: int | None = typer.Option(
        None,
        "--lease-seconds",
        help="Default lease [JOBAGENTCTL_SERVER_LEASE_SECONDS; 60].",
        show_default=False,
    ),
    reap_interval: float | None = typer.Option(
        None,
        "--reap-interval",
        help="Seconds between reaper passes; 0 disables [JOBAGENTCTL_SERVER_REAP_INTERVAL; 5].",
        show_default=False,
    ),
    max_reclaims: int | None = typer.Option(
        None,
        "--max-reclaims",
        help="Fail a job at its N-th lease expiry; 0 = never [JOBAGENTCTL_SERVER_MAX_RECLAIMS; 0].",
        show_default=False,
    ),
    require_claim_id: bool | None = typer.Option(
        None,
        "--require-claim-id/--no-require-claim-id",
        help="Agent keys must send claimId on leased jobs [JOBAGENTCTL_SERVER_REQUIRE_CLAIM_ID].",
        show_default=False,
    ),
    max_wait_seconds: float | None = typer.Option(
        None,
        "--max-wait-seconds",
        help="Cap of a claim-next long-poll [JOBAGENTCTL_SERVER_MAX_WAIT_SECONDS; 30].",
        show_default=False,
    ),
) -> None:
    """Run the API and the reaper; migrate first. SIGTERM/SIGINT drain in-flight requests.

    Every setting also comes from JOBAGENTCTL_SERVER_* (e.g. JOBAGENTCTL_SERVER_MIN_LEASE_SECONDS).

    Example: jobagentctl server start --database postgresql://jobagent@db:5432/jobagent --port 8080
    """
    settings = _settings(
        Output.table,
        database=database,
        host=host,
        port=port,
        lease_seconds=lease_seconds,
        reap_interval=reap_interval,
        max_reclaims=max_reclaims,
        require_claim_id=require_claim_id,
        max_wait_seconds=max_wait_seconds,
    )
    from jobagentctl.server.runner import run_server

    try:
        run_server(settings)
    except JobAgentError as exc:
        raise _fail(exc, Output.table) from None
    except OSError as exc:
        raise _fail(JobAgentError(f"server failed: {exc}"), Output.table) from None


@server_app.command("migrate")
def migrate_cmd(
    database: str | None = _database_option(),
    output: Output = _output_option(),
    as_json: bool = _json_option(),
) -> None:
    """Apply pending schema migrations (safe to run while servers are up).

    Example: jobagentctl server migrate --database postgresql://jobagent@db/jobagent
    """
    from jobagentctl.server import admin
    from jobagentctl.server.settings import redact_url

    fmt = _fmt(output, as_json)
    settings = _settings(fmt, database=database)
    applied = _run(fmt, lambda: admin.migrate(settings.database))
    summary = ", ".join(str(v) for v in applied) if applied else "none (schema is current)"
    _emit(
        fmt,
        {"applied": applied, "database": redact_url(settings.database)},
        [f"Applied migrations: {summary}"],
    )


@server_app.command("create-key")
def create_key_cmd(
    workspace: str = typer.Option(..., "--workspace", help="Workspace id."),
    agent: str | None = typer.Option(
        None, "--agent", help="Job agent id: the key may then act only for this agent."
    ),
    database: str | None = _database_option(),
    output: Output = _output_option(),
    as_json: bool = _json_option(),
) -> None:
    """Create an API key (workspace-wide, or scoped to one agent); print it once.

    Example: jobagentctl server create-key --workspace WS_ID --agent AGENT_ID -o json
    """
    from jobagentctl.server import admin

    fmt = _fmt(output, as_json)
    workspace_id = _parse_uuid(workspace, "--workspace", fmt)
    agent_id = _parse_uuid(agent, "--agent", fmt) if agent is not None else None
    settings = _settings(fmt, database=database)
    created = _run(fmt, lambda: admin.create_key(settings.database, workspace_id, agent_id))
    _emit(
        fmt,
        {
            "id": str(created.id),
            "apiKey": created.api_key,
            "workspaceId": str(created.workspace_id),
            "jobAgentId": str(created.job_agent_id) if created.job_agent_id else None,
        },
        [
            f"Key id:    {created.id}",
            f"API key:   {created.api_key}",
            f"Workspace: {created.workspace_id}",
            f"Agent:     {created.job_agent_id or '(workspace key)'}",
        ],
    )
    typer.echo("The API key is shown only once: store it now.", err=True)


@server_app.command("create-workspace")
def create_workspace_cmd(
    name: str = typer.Argument(..., help="Workspace name."),
    database: str | None = _database_option(),
    output: Output = _output_option(),
    as_json: bool = _json_option(),
) -> None:
    """Create another workspace and its first workspace key; print them once.

    Example: jobagentctl server create-workspace staging -o json
    """
    from jobagentctl.server import admin

    fmt = _fmt(output, as_json)
    if not name.strip():
        raise _fail(UsageError("the workspace name must not be empty"), fmt)
    settings = _settings(fmt, database=database)
    created = _run(fmt, lambda: admin.create_workspace(settings.database, name.strip()))
    _emit(
        fmt,
        {"workspaceId": str(created.workspace_id), "apiKey": created.api_key},
        [f"Workspace: {created.workspace_id}", f"API key:   {created.api_key}"],
    )
    typer.echo("The API key is shown only once: store it now.", err=True)


@server_app.command("revoke-key")
def revoke_key_cmd(
    key_id: str = typer.Argument(..., help="The key's id (from create-key)."),
    database: str | None = _database_option(),
    output: Output = _output_option(),
    as_json: bool = _json_option(),
) -> None:
    """Revoke an API key: requests with it get 401 within a few seconds (key cache TTL).

    Not in SPEC: an operator addition. Example: jobagentctl server revoke-key KEY_ID
    """
    from jobagentctl.server import admin

    fmt = _fmt(output, as_json)
    key_uuid = _parse_uuid(key_id, "KEY_ID", fmt)
    settings = _settings(fmt, database=database)
    _run(fmt, lambda: admin.revoke_key(settings.database, key_uuid))
    _emit(fmt, {"id": str(key_uuid), "revoked": True}, [f"Revoked key {key_uuid}"])
