"""`jobagentctl server …` commands through Typer's CliRunner: JSON shapes, config file, exit
codes (bad URL 2, unreachable database 3, unknown workspace 5)."""

from __future__ import annotations

import json
import os
import stat
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from jobagentctl.cli.app import app
from jobagentctl.server.http.auth import split_key
from tests.fixtures.databases import sql


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in list(os.environ):
        if name.startswith(("JOBAGENTCTL_SERVER_", "JOBAGENTCTL_CONFIG")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return CliRunner()


def run(runner: CliRunner, *args: str, code: int = 0) -> Any:
    result = runner.invoke(app, ["server", *args])
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    return result


def test_init_create_workspace_create_key_revoke_key(runner: CliRunner, database_url: str) -> None:
    result = run(runner, "init", "-o", "json", "--database", database_url)
    init = json.loads(result.stdout)
    assert set(init) == {"workspaceId", "apiKey", "database", "slug"}
    assert init["slug"] == "default"
    uuid.UUID(init["workspaceId"])
    assert init["apiKey"].startswith("jac_")
    assert "shown only once" in result.stderr
    assert init["apiKey"] not in result.stderr  # secrets on stdout only

    result = run(runner, "create-workspace", "staging", "--json", "--database", database_url)
    other = json.loads(result.stdout)
    assert set(other) == {"workspaceId", "apiKey", "slug"}
    assert other["slug"] == "staging"
    assert other["workspaceId"] != init["workspaceId"]

    ws = init["workspaceId"]
    result = run(runner, "create-key", "--workspace", ws, "-o", "json", "--database", database_url)
    key = json.loads(result.stdout)
    assert set(key) == {"id", "apiKey", "workspaceId", "jobAgentId"}
    assert key["workspaceId"] == ws
    assert key["jobAgentId"] is None

    result = run(runner, "revoke-key", key["id"], "-o", "json", "--database", database_url)
    assert json.loads(result.stdout) == {"id": key["id"], "revoked": True}
    # Again: nothing to do, and said so (not "not found").
    again = run(runner, "revoke-key", key["id"], "-o", "json", "--database", database_url)
    assert json.loads(again.stdout) == {"id": key["id"], "revoked": True}
    assert "already revoked" in again.stderr
    unknown = run(runner, "revoke-key", str(uuid.uuid4()), "--database", database_url, code=5)
    assert "check the key's id" in unknown.stderr

    # Only hashes are stored.
    rows = sql(database_url, "SELECT prefix, secret_hash FROM api_key")
    assert len(rows) == 3
    for value in (init["apiKey"], other["apiKey"], key["apiKey"]):
        assert split_key(value)[1] not in repr(rows)


def test_create_key_for_an_agent_and_unknown_ids(runner: CliRunner, database_url: str) -> None:
    init = json.loads(run(runner, "init", "-o", "json", "--database", database_url).stdout)
    ws = init["workspaceId"]
    run(runner, "create-key", "--workspace", str(uuid.uuid4()), "--database", database_url, code=5)
    unknown_agent = str(uuid.uuid4())
    args = ["create-key", "--workspace", ws, "--agent", unknown_agent, "--database", database_url]
    result = run(runner, *args, "-o", "json", code=5)
    error = json.loads(result.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "NOT_FOUND"
    assert error["exitCode"] == 5
    missing = run(
        runner, "create-key", "--workspace", "no-such", "--database", database_url, code=5
    )
    assert "no workspace with slug 'no-such'" in missing.stderr
    run(runner, "create-key", "--workspace", "Not_A_Slug", "--database", database_url, code=2)
    by_name = run(runner, "create-key", "--workspace", ws, "--agent", "builder", code=2)
    assert "the agent's id: jobagentctl agents list" in by_name.stderr
    # The slug, as every other command takes it.
    by_slug = run(
        runner, "create-key", "--workspace", "default", "--json", "--database", database_url
    )
    assert json.loads(by_slug.stdout)["workspaceId"] == ws


def test_tsv_when_piped(runner: CliRunner, database_url: str) -> None:
    # The output paths of every command: tsv when piped (the table form: tests/unit).
    result = run(runner, "init", "--database", database_url)
    # The slug is the last column: scripts written before it cut the first three.
    workspace, api_key, database, slug = result.stdout.rstrip("\n").split("\t")
    uuid.UUID(workspace)
    assert api_key.startswith("jac_")
    assert (database, slug) == (database_url, "default")
    result = run(runner, "create-workspace", "Staging EU", "--database", database_url)
    workspace, api_key, slug = result.stdout.rstrip("\n").split("\t")
    assert api_key.startswith("jac_")
    assert slug == "staging-eu"
    result = run(runner, "migrate", "--database", database_url)
    assert result.stdout.split("\t")[0] == "[]"


def workspace_slugs(database_url: str) -> dict[str, str]:
    return {
        str(uuid.UUID(str(i))): s for i, s in sql(database_url, "SELECT id, slug FROM workspace")
    }


def test_slug_given_derived_and_made_unique(runner: CliRunner, database_url: str) -> None:
    def created(*args: str) -> dict[str, str]:
        out: dict[str, str] = json.loads(run(runner, *args, "-o", "json").stdout)
        return out

    init = created("init", "--slug", "team-a", "--database", database_url)
    assert init["slug"] == "team-a"
    derived = created("create-workspace", "  Staging EU!  ", "--database", database_url)
    assert derived["slug"] == "staging-eu"
    # Derived again from a name whose slug is taken: the store appends part of the id.
    again = created("create-workspace", "staging eu", "--database", database_url)
    assert again["slug"] == f"staging-eu-{uuid.UUID(again['workspaceId']).hex[:8]}"
    # Shorter than ctrlplane's 3 characters: padded, so that --workspace takes it.
    short = created("create-workspace", "QA", "--database", database_url)
    assert short["slug"] == "qa-ws"
    # What is printed is what is stored (and what --workspace SLUG resolves:
    # tests/integration/ctrlplane).
    assert workspace_slugs(database_url) == {
        created_["workspaceId"]: created_["slug"] for created_ in (init, derived, again, short)
    }


@pytest.mark.parametrize("command", [("init",), ("create-workspace", "other")])
def test_bad_slug_is_exit_2_and_taken_slug_exit_6(
    runner: CliRunner, database_url: str, command: tuple[str, ...]
) -> None:
    run(runner, "migrate", "--database", database_url)
    run(runner, "create-workspace", "first", "--slug", "taken", "--database", database_url)
    before = workspace_slugs(database_url)
    # ctrlplane's Workspace.slug: ^[a-z0-9-]+$, 3-50 characters (the client's rule too).
    for bad in ("Upper", "team.a", "under_score", "ab", "", "a" * 51, "sp ace", "ümlaut"):
        result = run(
            runner, *command, "--slug", bad, "-o", "json", "--database", database_url, code=2
        )
        error = json.loads(result.stderr.strip().splitlines()[-1])["error"]
        assert error["code"] == "VALIDATION_ERROR", error
        assert "a slug is 3-50 characters" in error["message"]
    result = run(
        runner, *command, "--slug", "taken", "-o", "json", "--database", database_url, code=6
    )
    error = json.loads(result.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "CONFLICT"
    assert "a workspace with slug 'taken' already exists" in error["message"]
    assert result.stdout == ""
    assert workspace_slugs(database_url) == before  # nothing created, no key printed
    assert len(sql(database_url, "SELECT id FROM api_key")) == 1


def test_bad_slug_touches_no_database(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'never.db'}"
    run(runner, "init", "--slug", "Not A Slug", "--database", url, code=2)
    assert not (tmp_path / "never.db").exists()


def test_migrate_is_idempotent(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    first = json.loads(run(runner, "migrate", "-o", "json", "--database", url).stdout)
    assert first["applied"]
    second = json.loads(run(runner, "migrate", "-o", "json", "--database", url).stdout)
    assert second["applied"] == []


def test_bad_database_url_is_exit_2(runner: CliRunner) -> None:
    for url in ("mysql://x/y", "nonsense", "postgresql://"):
        result = run(runner, "init", "--database", url, code=2)
        assert "database URL" in result.stderr
    result = run(runner, "start", "--database", "mysql://x", code=2)
    result = run(runner, "start", "--port", "99999", code=2)
    assert "port" in result.stderr


def test_unreachable_database_is_exit_3(runner: CliRunner) -> None:
    url = "postgresql://nobody:pw-secret@127.0.0.1:1/nothing"
    result = run(runner, "init", "-o", "json", "--database", url, code=3)
    assert "pw-secret" not in result.stderr + result.stdout  # no password in messages


def test_env_settings_are_read(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    result = runner.invoke(
        app, ["server", "init", "-o", "json"], env={"JOBAGENTCTL_SERVER_DATABASE": url}
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["database"] == url
    assert (tmp_path / "env.db").exists()


def test_default_database_is_under_xdg_data_home(runner: CliRunner, tmp_path: Path) -> None:
    result = run(runner, "init", "-o", "json")
    database = json.loads(result.stdout)["database"]
    assert database == f"sqlite:///{tmp_path / 'data' / 'jobagentctl' / 'jobagent.db'}"
    assert (tmp_path / "data" / "jobagentctl" / "jobagent.db").exists()


def test_write_config_stores_profile_local_mode_0600(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "config" / "jobagentctl" / "config.toml"
    url = f"sqlite:///{tmp_path / 'c.db'}"
    init = json.loads(run(runner, "init", "--write-config", "-o", "json", "--database", url).stdout)
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    data = tomllib.loads(config.read_text())
    assert data["default_profile"] == "local"
    assert data["profiles"]["local"] == {
        "url": "http://127.0.0.1:8080",
        "workspace": init["workspaceId"],
        "api_key": init["apiKey"],
    }


def test_write_config_keeps_other_profiles_and_the_default(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "elsewhere.toml"
    config.write_text(
        'default_profile = "prod"\n\n[profiles.prod]\nurl = "https://ctrl.example"\n'
        'workspace = "w"\ntimeout = 30\n'
    )
    monkeypatch.setenv("JOBAGENTCTL_CONFIG", str(config))
    url = f"sqlite:///{tmp_path / 'c.db'}"
    args = ["init", "--write-config", "--url", "http://127.0.0.1:9999/", "--database", url]
    run(runner, *args)
    data = tomllib.loads(config.read_text())
    assert data["default_profile"] == "prod"
    prod = {"url": "https://ctrl.example", "workspace": "w", "timeout": 30}
    assert data["profiles"]["prod"] == prod
    assert data["profiles"]["local"]["url"] == "http://127.0.0.1:9999/"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


def test_server_commands_do_not_import_the_server_at_import_time() -> None:
    import subprocess
    import sys

    code = (
        "import sys, jobagentctl.cli.server; "
        "heavy = [m for m in ('fastapi', 'uvicorn', 'psycopg', 'asyncpg', 'prometheus_client', "
        "'jobagentctl.server.http.app') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
