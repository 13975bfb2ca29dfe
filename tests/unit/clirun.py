"""Running the app in-process for tests: piped (default) or with stdout forced to be a TTY."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from typer.testing import CliRunner, Result

from jobagentctl.cli import context
from jobagentctl.cli.app import app

from .wire import AGENT, API_KEY, BASE, WORKSPACE

ENV = {
    "JOBAGENTCTL_URL": f"{BASE}/api",
    "JOBAGENTCTL_API_KEY": API_KEY,
    "JOBAGENTCTL_WORKSPACE": str(WORKSPACE),
    "JOBAGENTCTL_AGENT": str(AGENT),
}


@dataclass
class Cli:
    """``cli("list", "--all-pages")`` runs the app with the test server's settings."""

    monkeypatch: pytest.MonkeyPatch
    env: dict[str, str] = field(default_factory=lambda: dict(ENV))

    def __call__(
        self, *args: str, tty: bool = False, env: Mapping[str, str | None] | None = None
    ) -> Result:
        self.monkeypatch.setattr(context, "stdout_is_tty", lambda: tty)
        merged: dict[str, str | None] = {**self.env, **(env or {})}
        result = CliRunner().invoke(app, list(args), env=merged)
        # Nothing a command prints may contain the key.
        assert API_KEY not in result.stdout and API_KEY not in result.stderr
        return result
