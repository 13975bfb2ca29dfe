"""Per-invocation state shared by every command: global options, lazy settings and client.

Settings are only built when a command asks for them, so ``--version``, ``--help`` and
``completion`` never read the config file nor import httpx.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

import typer

from jobagentctl.errors import ConfigError

if TYPE_CHECKING:
    from jobagentctl.client import Client
    from jobagentctl.settings import ClientSettings

__all__ = ["OUTPUT_FORMATS", "AppState", "Flags", "agent_named", "get_state", "resolve_output"]

OUTPUT_FORMATS = ("table", "json", "tsv", "env")


def stdout_is_tty() -> bool:
    """Whether stdout is a terminal (tests replace this to force the TTY form)."""
    return sys.stdout.isatty()


def stderr_is_tty() -> bool:
    """Whether stderr is a terminal: spinners and live views only draw there."""
    return sys.stderr.isatty()


def resolve_output(output: str | None, json_flag: bool) -> str:
    """The output format: ``--json`` or ``-o``, else table on a TTY and tsv when piped."""
    if json_flag:
        if output not in (None, "json"):
            raise ConfigError(f"--json conflicts with -o {output}")
        return "json"
    if output is None:
        return "table" if stdout_is_tty() else "tsv"
    if output not in OUTPUT_FORMATS:
        raise ConfigError(f"unknown output format {output!r}: use {', '.join(OUTPUT_FORMATS)}")
    return output


@dataclass(frozen=True)
class Flags:
    """Connection flags as given on the command line (``None`` = not given)."""

    url: str | None = None
    workspace: str | None = None
    agent: str | None = None
    profile: str | None = None
    api_key_file: Path | None = None
    ca_bundle: Path | None = None


@dataclass
class AppState:
    """What the global options said, and the lazily built settings and client.

    Global options may come before or after the command. Each occurrence is stored here as it is
    parsed (:func:`set_global`). The output format is decided on first use, once all of them are
    known.
    """

    output_flag: str | None = None
    json_flag: bool = False
    quiet: bool = False
    debug: bool = False
    no_color: bool = False
    flags: Flags = field(default_factory=Flags)
    _output: str | None = field(default=None, repr=False)
    _settings: ClientSettings | None = field(default=None, repr=False)
    _agent_id: UUID | None = field(default=None, repr=False)

    @property
    def settings(self) -> ClientSettings:
        """The merged client settings, built on first use (this reads the config file)."""
        if self._settings is None:
            from jobagentctl.settings import ClientSettings

            self._settings = ClientSettings.load(
                url=self.flags.url,
                workspace=self.flags.workspace,
                agent=self.flags.agent,
                profile=self.flags.profile,
                api_key_file=self.flags.api_key_file,
                ca_bundle=self.flags.ca_bundle,
            )
        return self._settings

    @property
    def output(self) -> str:
        """table, json, tsv or env: from ``-o``/``--json``, else table on a TTY, tsv piped."""
        if self._output is None:
            self._output = resolve_output(self.output_flag, self.json_flag)
        return self._output

    def output_or_default(self) -> str:
        """The output format, or tsv when the flags themselves are in conflict (for errors)."""
        try:
            return self.output
        except ConfigError:
            return "tsv"

    def client(self) -> Client:
        """A new API client from the settings; the caller closes it (``with state.client()``)."""
        from jobagentctl.cli.messages import warn
        from jobagentctl.client import Client, ConnectionOptions
        from jobagentctl.settings import profile_hint

        settings = self.settings
        if settings.url is None:
            raise ConfigError(
                "no server URL: use --url, JOBAGENTCTL_URL, CTRLPLANE_URL or a config profile"
                + profile_hint(settings)
            )
        trace: Callable[[str], None] | None = None
        if self.debug:

            def trace(line: str) -> None:
                print(f"[http] {line}", file=sys.stderr)

        options = ConnectionOptions(
            timeout=settings.timeout, ca_bundle=settings.ca_bundle, trace=trace
        )
        return Client(settings.url, settings.api_key, settings.workspace, options, warn=warn)

    def require_workspace(self) -> UUID:
        """The workspace id, or a :class:`ConfigError` (exit 2) naming where to set it.

        A slug is resolved by the client (one request, remembered for the process).
        """
        from jobagentctl.settings import profile_hint

        workspace = self.settings.workspace
        if workspace is None:
            raise ConfigError(
                "no workspace: use --workspace, JOBAGENTCTL_WORKSPACE, CTRLPLANE_WORKSPACE or a "
                "config profile" + profile_hint(self.settings)
            )
        if isinstance(workspace, UUID):
            return workspace
        with self.client() as client:
            return client.workspace_id()

    def require_agent(self) -> UUID:
        """The job agent id, or a :class:`ConfigError` (exit 2) naming where to set it.

        A name is looked up once (see :meth:`agent_filter`)."""
        from jobagentctl.settings import profile_hint

        agent = self.agent_filter()
        if agent is None:
            raise ConfigError(
                "no job agent: use --agent, JOBAGENTCTL_AGENT or a config profile"
                + profile_hint(self.settings)
            )
        return agent

    def agent_filter(self) -> UUID | None:
        """The job agent id if one is set. An agent given by name is looked up among the workspace's
        agents once per process; it must be the only one of that name."""
        agent = self.settings.agent
        if agent is None or isinstance(agent, UUID):
            return agent
        if self._agent_id is None:
            with self.client() as client:
                self._agent_id = agent_named(client, agent)
        return self._agent_id

    @property
    def color(self) -> bool:
        """Colour is on unless --no-color or NO_COLOR (https://no-color.org) say otherwise."""
        return not (self.no_color or os.environ.get("NO_COLOR"))


def agent_named(client: Client, name: str) -> UUID:
    """The id of the workspace's one agent called ``name``. A :class:`ConfigError` says to use the
    id when there is none, several, or the key may not list agents."""
    from jobagentctl.client import iter_pages
    from jobagentctl.errors import AuthError, NotFound

    try:
        found = [
            agent.id
            for agent in iter_pages(lambda n, off: client.list_agents(n, off), limit=500)
            if agent.name == name
        ]
    except (NotFound, AuthError) as exc:
        raise ConfigError(
            f"--agent {name!r} is not an id, and this API key cannot list agents to look the "
            f"name up ({exc.message}): use the agent's id"
        ) from None
    if not found:
        raise ConfigError(
            f"--agent {name!r}: no agent of that name in this workspace: use an agent's id or "
            "name (jobagentctl agents list)"
        )
    if len(found) > 1:
        raise ConfigError(
            f"--agent {name!r}: {len(found)} agents have that name: use the id "
            f"({', '.join(str(agent) for agent in found)})"
        )
    return found[0]


def get_state(ctx: typer.Context) -> AppState:
    """The invocation's :class:`AppState`, kept on the root context (made on first use)."""
    root = ctx.find_root()
    if not isinstance(root.obj, AppState):
        root.obj = AppState()
    return root.obj
