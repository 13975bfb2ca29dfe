"""Running the `jobagentctl` client against a live server: in-process or as a real process.

In-process runs (``CliRunner``) still talk HTTP to the real server process; they only save
an interpreter start per call. Exit codes a shell sees are checked with real processes too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from typer.testing import CliRunner

from jobagentctl.cli.app import app
from tests.fixtures.cli import Ran, run_cli
from tests.fixtures.live_server import ServerAddress

__all__ = ["Ran", "env_for", "jac", "jac_process"]


def env_for(server: ServerAddress, agent: str | None = None, **extra: str) -> dict[str, str]:
    # Generous timeouts: two busy cores can stall a healthy server for seconds.
    env = {**server.base_env(), **server.env(), "JOBAGENTCTL_TIMEOUT": "60"}
    if agent is not None:
        env["JOBAGENTCTL_AGENT"] = agent
    env.update(extra)
    return env


def _check(server: ServerAddress, ran: Ran) -> Ran:
    assert server.api_key not in ran.stdout + ran.stderr
    return ran


def jac(
    server: ServerAddress,
    *args: str,
    agent: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Ran:
    """``jobagentctl ARGS`` in-process, with the server's URL, workspace and key."""
    wanted = {**env_for(server, agent), **(env or {})}
    # Clear what the test process inherited (CliRunner only overlays the variables it gets).
    overlay: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith(("JOBAGENTCTL_", "CTRLPLANE_"))
    }
    overlay.update(wanted)
    result = CliRunner().invoke(app, list(args), env=overlay)
    return _check(server, Ran(result.exit_code, result.stdout, result.stderr))


def jac_process(
    server: ServerAddress,
    *args: str,
    agent: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Ran:
    """``jobagentctl ARGS`` as a real process (the installed console script)."""
    return _check(server, run_cli(*args, env={**env_for(server, agent), **(env or {})}))
