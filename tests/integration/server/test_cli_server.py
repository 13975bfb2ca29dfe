"""`jobagentctl server …` through the root app, on SQLite: the table form on a TTY, the JSON
error line, and `init --write-config` refusing to replace a profile (issue 12 §8)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.fixtures.clirun import Cli

# No developer settings (config file, JOBAGENTCTL_*), as when this module was a unit test.
pytestmark = pytest.mark.usefixtures("isolated_env")


def config_file(tmp_path: Path) -> Path:
    return tmp_path / "xdg-config" / "jobagentctl" / "config.toml"


def test_init_on_a_tty_is_a_table(cli: Cli, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'tty.db'}"
    result = cli("server", "init", "--database", database, tty=True)
    assert result.exit_code == 0, result.stderr
    assert "workspace" in result.stdout and "api key" in result.stdout
    assert "jac_" in result.stdout
    assert "shown only once" in result.stderr


def test_write_config_twice_refuses_without_force(cli: Cli, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'twice.db'}"
    path = config_file(tmp_path)
    first = cli("server", "init", "--write-config", "--json", "--database", database)
    assert first.exit_code == 0, first.stderr
    before = path.read_text()
    workspaces = json.loads(first.stdout)["workspaceId"]

    second = cli("server", "init", "--write-config", "--json", "--database", database)
    assert second.exit_code == 2
    assert "already exists" in second.stderr and "--force" in second.stderr
    assert second.stdout == ""  # nothing was created: no key printed
    error = json.loads(second.stderr.splitlines()[-1])["error"]
    assert error["code"] == "CONFIG_ERROR" and error["status"] is None
    assert path.read_text() == before

    forced = cli("server", "init", "--write-config", "--force", "--json", "--database", database)
    assert forced.exit_code == 0, forced.stderr
    made = json.loads(forced.stdout)
    assert made["workspaceId"] != workspaces
    profile = tomllib.loads(path.read_text())["profiles"]["local"]
    assert profile["workspace"] == made["workspaceId"]
    assert profile["api_key"] == made["apiKey"]


def test_bad_uuid_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'u.db'}"
    result = cli("server", "revoke-key", "nope", "--database", database, "--json")
    assert result.exit_code == 2
    assert json.loads(result.stderr.splitlines()[-1])["error"]["code"] == "USAGE_ERROR"


def test_settings_are_refused_in_our_words_by_the_name_given(cli: Cli, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'never.db'}"
    flag = cli("server", "start", "--database", database, "--log-max-bytes", "100")
    assert flag.exit_code == 2
    assert flag.stderr == "error: invalid server settings: --log-max-bytes: must be at least 4096\n"
    env = {"JOBAGENTCTL_SERVER_LOG_RETENTION": "5x"}
    variable = cli("server", "start", "--database", database, env=env)
    assert variable.exit_code == 2
    assert variable.stderr == (
        "error: invalid server settings: JOBAGENTCTL_SERVER_LOG_RETENTION: invalid log "
        "retention '5x': use seconds (90), or 90s, 5m, 1h, 1h30m, 7d, inf\n"
    )
    assert not (tmp_path / "never.db").exists()
