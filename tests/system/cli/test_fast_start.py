"""Fast start: client commands never import the server's stack, and Rich only for tables; the
hot script commands import no more than they do today; Tab completion imports no framework.

Runs the real entry point in a subprocess with ``-X importtime`` and reads what was imported.
(Speed itself is measured as ratios by benchmarks/cli_startup.py, never asserted here.)
"""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from tests.fixtures.cli import clean_env, run_cli

# Both PostgreSQL drivers: the server's may be either, and neither belongs to a client command.
SERVER_STACK = (
    "fastapi",
    "starlette",
    "uvicorn",
    "psycopg",
    "psycopg_pool",
    "asyncpg",
    "prometheus_client",
)


def _parse(stderr: str) -> set[str]:
    modules = set()
    for line in stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if line.startswith("import time:") and len(fields) == 3 and fields[0].strip().isdigit():
            modules.add(fields[2].strip())
    return modules


def imported_modules(*args: str, env: dict[str, str] | None = None, code: int = 0) -> set[str]:
    result = run_cli(
        *args, env=clean_env(**(env or {})), python_flags=("-X", "importtime"), timeout=60
    )
    assert result.returncode == code, result.stderr[-2000:]
    modules = _parse(result.stderr)
    assert "jobagentctl" in modules  # the trace really is there
    return modules


@functools.cache
def interpreter_baseline() -> frozenset[str]:
    """What this interpreter imports for `pass`: its site hooks (sitecustomize, Debian's
    apport_python_hook, setuptools' _distutils_hack, …) differ from one Python to another and
    are not the command's doing."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return frozenset(_parse(result.stderr))


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


def closed_port_env() -> dict[str, str]:
    """Settings that point at a port nobody listens on: a request fails at once with exit 3."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return {
        "XDG_CONFIG_HOME": "/nonexistent",
        "JOBAGENTCTL_URL": f"http://127.0.0.1:{port}",
        "JOBAGENTCTL_API_KEY": "k.s",
        "JOBAGENTCTL_WORKSPACE": "11111111-1111-4111-8111-111111111111",
        "JOBAGENTCTL_AGENT": "22222222-2222-4222-8222-222222222222",
        "JOBAGENTCTL_JOB_ID": "33333333-3333-4333-8333-333333333333",
    }


def test_a_client_command_does_not_import_rich() -> None:
    """A real request (to a closed port: exit 3) loads httpx and pydantic, but never Rich."""
    loaded = top_level(imported_modules("heartbeat", env=closed_port_env(), code=3))
    assert {"httpx", "pydantic"} <= loaded  # the command really ran
    assert not loaded & {*SERVER_STACK, "rich", "click", "pygments", "pydantic_settings"}


# What the four script commands may import: our modules, and third-party packages (stdlib
# aside). They run once per step of a shell script, so their start-up is the script's overhead.
# A new entry here must be worth its start-up time: measure it with
# `python -m benchmarks.cli_startup` before and after.
HOT_OWN = {
    "jobagentctl",
    "jobagentctl.cli",
    "jobagentctl.cli.app",
    "jobagentctl.cli.claim_cmd",
    "jobagentctl.cli.complete_cmd",
    "jobagentctl.cli.context",
    "jobagentctl.cli.entry",
    "jobagentctl.cli.heartbeat_cmd",
    "jobagentctl.cli.list_cmd",
    "jobagentctl.cli.messages",
    "jobagentctl.cli.options",
    "jobagentctl.cli.output",
    "jobagentctl.cli.params",
    "jobagentctl.cli.sanitize",
    "jobagentctl.cli.status",
    "jobagentctl.client",
    "jobagentctl.client._client",
    "jobagentctl.client._connection",
    "jobagentctl.client._ctrlplane",
    "jobagentctl.client._errors",
    "jobagentctl.client._logs",
    "jobagentctl.client._pages",
    "jobagentctl.client._trace",
    "jobagentctl.durations",
    "jobagentctl.errors",
    "jobagentctl.models",
    "jobagentctl.models.environment",
    "jobagentctl.models.logs",
    "jobagentctl.models.requests",
    "jobagentctl.models.wire",
    "jobagentctl.routes",
    "jobagentctl.settings",
}
HOT_THIRD_PARTY = {
    # typer and what it loads
    "typer",
    "shellingham",
    "annotated_doc",
    # httpx and its transport (optional extras are imported when installed)
    "httpx",
    "httpcore",
    "h11",
    "h2",
    "hpack",
    "hyperframe",
    "anyio",
    "sniffio",
    "trio",
    "certifi",
    "idna",
    "brotli",
    "brotlicffi",
    "zstandard",
    "socksio",
    # pydantic
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_extensions",
    "typing_inspection",
    # `org` is the stdlib's copy module probing for Jython's org.python.core, which some
    # installed package provides as a namespace package (the interpreter's own site hooks are
    # subtracted: interpreter_baseline)
    "org",
}


@pytest.mark.parametrize(
    "args",
    [["heartbeat"], ["complete", "--status", "successful"], ["claim", "-o", "env"], ["list"]],
    ids=["heartbeat", "complete", "claim", "list"],
)
def test_the_hot_commands_import_set_does_not_grow(args: list[str]) -> None:
    loaded = imported_modules(*args, env=closed_port_env(), code=3) - interpreter_baseline()
    own = {m for m in loaded if m.split(".")[0] == "jobagentctl"}
    assert own <= HOT_OWN, sorted(own - HOT_OWN)
    third = {
        m.split(".")[0]
        for m in loaded
        if m.split(".")[0] not in sys.stdlib_module_names and not m.startswith("_")
    } - {"jobagentctl"}
    assert third <= HOT_THIRD_PARTY, sorted(third - HOT_THIRD_PARTY)
    assert {"typer", "httpx", "pydantic"} <= third  # the command really ran


@pytest.mark.parametrize(
    "env",
    [
        {
            "COMP_WORDS": "jobagentctl inspect",
            "COMP_CWORD": "1",
            "_JOBAGENTCTL_COMPLETE": "complete_bash",
        },
        {"_TYPER_COMPLETE_ARGS": "jobagentctl jobs ", "_JOBAGENTCTL_COMPLETE": "complete_zsh"},
        {
            "_TYPER_COMPLETE_ARGS": "jobagentctl server cr",
            "_JOBAGENTCTL_COMPLETE": "complete_fish",
            "_TYPER_COMPLETE_FISH_ACTION": "get-args",
        },
    ],
    ids=["bash", "zsh", "fish"],
)
def test_tab_completion_imports_no_framework(env: dict[str, str]) -> None:
    loaded = imported_modules(env=env)
    top = top_level(loaded)
    assert not top & {"typer", "click", "httpx", "pydantic", "pydantic_settings", "rich"}
    assert not {m for m in loaded if m.startswith("jobagentctl.server")}


def test_a_plain_http_heartbeat_builds_no_tls_context() -> None:
    """The session-resuming TLS context (``client._tls``) is made only for an https:// server:
    a heartbeat to http:// neither imports it nor loads a CA bundle (~25 ms of every start)."""
    loaded = imported_modules("heartbeat", env=closed_port_env(), code=3)
    assert "jobagentctl.client._connection" in loaded  # the request path really ran
    assert "jobagentctl.client._tls" not in loaded
