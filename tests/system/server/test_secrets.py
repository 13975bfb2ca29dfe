"""Secrets: API keys are hashed at rest, and no secret reaches the server's log, the
CLI's ``--debug`` trace or any error message; files holding a key or a job are mode 0600.

Keys are made the way operators make them (``server init``, ``server create-key``,
``server create-workspace``) and used against a real server, valid and wrong ones alike; then
every row of every table, the SQLite files byte by byte, the server's stderr (debug level, with
the access log) and the CLI's stdout and stderr are searched for the secrets.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from jobagentctl.server.store import sqlite_path
from tests.fixtures import pgsync
from tests.fixtures.cli import run_cli
from tests.fixtures.live_server import LiveServer, LiveServerFactory, free_port

# The CLI's behaviour does not depend on the database: one dialect is enough there.
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _secret(key: str) -> str:
    return key.split(".", 1)[1]


def dump_database(database_url: str) -> str:
    """Every row of every table as text; for SQLite also every byte of the database files."""
    parts: list[str] = []
    if database_url.startswith("sqlite:"):
        import sqlite3

        path = sqlite_path(database_url)
        conn = sqlite3.connect(path)
        try:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            for table in tables:
                parts += [repr(row) for row in conn.execute(f'SELECT * FROM "{table}"')]
        finally:
            conn.close()
        for file in Path(path).parent.glob(Path(path).name + "*"):  # the file, -wal, -shm
            parts.append(file.read_bytes().decode("latin-1"))
        assert tables, "no table found: the dump read nothing"
        return "\n".join(parts)
    with pgsync.connect(database_url) as pg:
        tables = [
            r[0]
            for r in pg.fetch(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        ]
        for table in tables:
            parts += [r[0] for r in pg.fetch(f'SELECT t::text FROM "{table}" AS t')]
    assert tables, "no table found: the dump read nothing"
    return "\n".join(parts)


def _assert_absent(text: str, secrets: Iterable[str], where: str) -> None:
    for secret in secrets:
        assert secret not in text, f"a secret ({secret[:6]}…) appears in {where}"


@pytest.fixture
def keyed_server(live_server_factory: LiveServerFactory) -> LiveServer:
    """A server logging at debug level with the access log on: the most it ever writes."""
    return live_server_factory(log_level="debug", access_log=True)


def test_keys_are_hashed_at_rest_and_never_logged(keyed_server: LiveServer) -> None:
    server = keyed_server
    agent = server.create_agent("hashed")
    agent_key = server.create_key(agent)
    revoked = server.create_key()
    server.revoke_key(revoked)
    made = run_cli(
        "server",
        "create-workspace",
        "second",
        "-o",
        "json",
        "--database",
        server.database_url,
        env=server.base_env(),
    )
    assert made.returncode == 0, made.stderr
    other_key = json.loads(made.stdout)["apiKey"]
    valid = [server.api_key, agent_key, revoked, other_key]
    wrong = [k.split(".", 1)[0] + ".Wr0ngSecretWr0ngSecretWr0ngSecret" for k in valid]

    # Use every key, and send wrong secrets for known prefixes, bodies that fail validation
    # and keys in malformed shapes: anything that could end up in a log line.
    assert server.request("GET", "jobs")[0] == 200
    assert server.request("GET", f"job-agents/{agent}/jobs", api_key=agent_key)[0] == 200
    assert server.request("GET", "jobs", api_key=revoked)[0] == 401
    for key in wrong:
        assert server.request("GET", "jobs", api_key=key)[0] == 401
        assert (
            server.request("POST", f"job-agents/{agent}/claim", {"x": key}, api_key=key)[0] == 401
        )
    status, _ = server.request("PUT", "jobs/not-a-uuid/status", {"status": server.api_key})
    assert status == 400
    status, body = server.request("PUT", f"job-agents/{agent}", {"name": 5, "type": agent_key})
    assert status == 400
    _assert_absent(json.dumps(body), [_secret(agent_key)], "a validation error")

    secrets = [_secret(k) for k in valid + wrong]
    dump = dump_database(server.database_url)
    _assert_absent(dump, secrets, "the database")
    for key in valid:  # what is stored instead: the SHA-256 of the secret
        assert hashlib.sha256(_secret(key).encode()).hexdigest() in dump

    server.stop()
    log = server.log()
    assert " 401" in log and "GET /api/v1/" in log, "the access log did not capture requests"
    _assert_absent(log, secrets, "the server log")


@sqlite_only
def test_cli_debug_output_and_errors_hold_no_secret(
    live_server: LiveServer, tmp_path: Path
) -> None:
    server = live_server
    agent = server.create_agent("cli")
    job = server.enqueue(agent)
    agent_key = server.create_key(agent)
    env = {**server.base_env(), **server.env(), "JOBAGENTCTL_AGENT": agent}
    env["JOBAGENTCTL_API_KEY"] = agent_key
    wrong = agent_key.split(".", 1)[0] + ".Wr0ngSecretWr0ngSecretWr0ngSecret"
    key_file = tmp_path / "key"
    key_file.write_text(agent_key + "\n")
    key_file.chmod(0o600)
    down = f"http://127.0.0.1:{free_port()}"

    runs: list[tuple[list[str], dict[str, str], int | None]] = [
        (["--debug", "list"], env, 0),
        (["--debug", "-o", "json", "claim", job["id"], "--lease-seconds", "60"], env, 0),
        (["--debug", "heartbeat", job["id"]], env, 0),
        (["--debug", "-o", "json", "complete", job["id"], "--exit-code", "0"], env, 0),
        (["--debug", "-o", "json", "jobs", "get", job["id"]], env, 0),
        (["--debug", "-o", "json", "list"], {**env, "JOBAGENTCTL_API_KEY": wrong}, 4),
        (["-o", "json", "list"], {**env, "JOBAGENTCTL_API_KEY": wrong}, 4),
        (["--debug", "--api-key-file", str(key_file), "list"], _without_key(env), 0),
        (["--debug", "-o", "json", "list"], {**env, "JOBAGENTCTL_URL": down}, 3),
        (["--debug", "-o", "json", "heartbeat", job["id"]], env, 6),
        (["--debug", "-o", "json", "jobs", "get", "not-a-uuid"], env, None),
    ]
    secrets = [_secret(agent_key), _secret(wrong)]
    for args, run_env, expected in runs:
        proc = run_cli(*args, env=run_env)
        if expected is not None:
            assert proc.returncode == expected, (args, proc.returncode, proc.stderr[-2000:])
        _assert_absent(proc.stdout + proc.stderr, secrets, f"`jobagentctl {' '.join(args)}`")
        if "--debug" in args and expected in (0, 4, 6):
            # The trace is there (so the search above had something to search) and redacted.
            assert "X-API-Key" in proc.stderr or "x-api-key" in proc.stderr, proc.stderr[-2000:]
            assert "<redacted>" in proc.stderr


def _without_key(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != "JOBAGENTCTL_API_KEY"}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_server_init_writes_the_config_file_0600(tmp_path: Path) -> None:
    config_home = tmp_path / "config"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBAGENTCTL_", "CTRLPLANE_"))}
    env |= {"XDG_CONFIG_HOME": str(config_home), "XDG_DATA_HOME": str(tmp_path / "data")}
    database = f"sqlite:///{tmp_path / 'init.db'}"
    path = config_home / "jobagentctl" / "config.toml"

    # A permissive umask must not leak into the file's mode.
    first = run_cli(
        "server", "init", "--write-config", "-o", "json", "--database", database, env=env, umask=0
    )
    assert first.returncode == 0, first.stderr
    assert _mode(path) == 0o600
    assert json.loads(first.stdout)["apiKey"] in path.read_text()

    # Rewriting an existing, world-readable file (--force: the profile exists) leaves it 0600.
    path.chmod(0o644)
    second = run_cli(
        "server",
        "init",
        "--write-config",
        "--force",
        "-o",
        "json",
        "--database",
        database,
        env=env,
        umask=0o022,
    )
    assert second.returncode == 0, second.stderr
    assert _mode(path) == 0o600
    assert json.loads(second.stdout)["apiKey"] in path.read_text()
    leftovers = [p.name for p in path.parent.iterdir() if p.name != path.name]
    assert leftovers == [], "a temporary copy of the key was left behind"


PROBE = """
import json, os, stat
job_file = os.environ["JOBAGENTCTL_JOB_FILE"]
print(json.dumps({
    "file_mode": stat.S_IMODE(os.stat(job_file).st_mode),
    "dir_mode": stat.S_IMODE(os.stat(os.path.dirname(job_file)).st_mode),
    "job_id": json.load(open(job_file))["id"],
    "key_vars": sorted(k for k in os.environ if "API_KEY" in k),
    "job_file": job_file,
}))
"""


@sqlite_only
def test_run_job_file_is_0600_and_the_key_stays_out_of_the_child(live_server: LiveServer) -> None:
    server = live_server
    agent = server.create_agent("runner")
    job = server.enqueue(agent)
    env = {**server.base_env(), **server.env(), "JOBAGENTCTL_AGENT": agent}
    proc = run_cli(
        "run", "--lease-seconds", "30", "--", sys.executable, "-c", PROBE, env=env, umask=0
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["job_id"] == job["id"]
    assert seen["file_mode"] == 0o600
    assert seen["dir_mode"] == 0o700
    assert seen["key_vars"] == [], "the API key reached the child without --pass-api-key"
    assert not Path(seen["job_file"]).exists(), "the job file outlived the run"
    _assert_absent(proc.stdout + proc.stderr, [_secret(server.api_key)], "run's output")
