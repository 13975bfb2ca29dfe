"""Fast start: client commands never import the server's stack, and Rich only for tables.

Runs the real entry point in a subprocess with ``-X importtime`` and reads what was imported.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SERVER_STACK = ("fastapi", "starlette", "uvicorn", "psycopg", "psycopg_pool", "prometheus_client")


def imported_modules(*args: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBAGENTCTL_", "CTRLPLANE_"))}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "jobagentctl", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    modules = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            modules.add(line.rsplit("|", 1)[1].strip())
    assert "jobagentctl" in modules  # the trace really is there
    return modules


def top_level(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


@pytest.mark.parametrize(
    ("args", "forbidden"),
    [
        (["--version"], (*SERVER_STACK, "rich", "httpx", "pydantic_settings")),
        (["heartbeat", "--help"], (*SERVER_STACK, "rich")),
        (["completion", "bash"], (*SERVER_STACK, "rich", "httpx")),
    ],
    ids=["version", "heartbeat-help", "completion"],
)
def test_nothing_heavy_is_imported(args: list[str], forbidden: tuple[str, ...]) -> None:
    loaded = top_level(imported_modules(*args))
    assert not loaded & set(forbidden), sorted(loaded & set(forbidden))


def test_a_client_command_does_not_import_rich() -> None:
    """A real request (to a closed port: exit 3) loads httpx and settings, but never Rich."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBAGENTCTL_", "CTRLPLANE_"))}
    env.update(
        XDG_CONFIG_HOME="/nonexistent",
        JOBAGENTCTL_URL=f"http://127.0.0.1:{port}",
        JOBAGENTCTL_API_KEY="k.s",
        JOBAGENTCTL_WORKSPACE="11111111-1111-4111-8111-111111111111",
        JOBAGENTCTL_JOB_ID="33333333-3333-4333-8333-333333333333",
    )
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "jobagentctl", "heartbeat"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3, result.stderr[-2000:]
    loaded = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert {"httpx", "pydantic_settings"} <= loaded  # the command really ran
    assert not loaded & {*SERVER_STACK, "rich", "click", "pygments"}
