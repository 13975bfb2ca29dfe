"""Messages of the usual mistakes: each names the real cause and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import respx

from tests.fixtures import wire
from tests.fixtures.clirun import Cli
from tests.fixtures.wire import AGENT, BASE, WS

OTHER_AGENT = "55555555-5555-4555-8555-555555555555"


def test_jobagentctl_config_naming_no_file_or_a_directory(cli: Cli, tmp_path: Path) -> None:
    missing = cli("list", env={"JOBAGENTCTL_CONFIG": str(tmp_path / "nope.toml")})
    assert missing.exit_code == 2
    assert f"JOBAGENTCTL_CONFIG={tmp_path / 'nope.toml'} names no file" in missing.stderr
    assert "unset JOBAGENTCTL_CONFIG" in missing.stderr
    directory = cli("list", env={"JOBAGENTCTL_CONFIG": str(tmp_path)})
    assert directory.exit_code == 2
    assert "is a directory: point it at the config file" in directory.stderr


def test_profiles_without_a_default_suggest_profile(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[profiles.ci]\nurl = "http://ci.test"\n')
    config.chmod(0o600)
    result = cli("list", env={"JOBAGENTCTL_CONFIG": str(config), "JOBAGENTCTL_URL": None})
    assert result.exit_code == 2
    assert "no server URL" in result.stderr
    assert "--profile ci" in result.stderr


def test_key_and_key_file_both_set_names_both(cli: Cli, tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("jak_x.y")
    result = cli("list", env={"JOBAGENTCTL_API_KEY_FILE": str(key_file)})
    assert result.exit_code == 2
    assert "JOBAGENTCTL_API_KEY and JOBAGENTCTL_API_KEY_FILE are both set" in result.stderr


def test_agent_by_its_unique_name(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/job-agents").respond(
        200, json=wire.page([wire.agent(), wire.agent(id=OTHER_AGENT, name="other")])
    )
    jobs = mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").respond(200, json=wire.page([]))
    result = cli("list", "--agent", "builder")
    assert result.exit_code == 0, result.stderr
    assert jobs.called


@pytest.mark.parametrize(
    ("agents", "message"),
    [
        ([wire.agent(name="other")], "no agent of that name in this workspace"),
        (
            [wire.agent(), wire.agent(id=OTHER_AGENT)],
            f"2 agents have that name: use the id ({AGENT}, {OTHER_AGENT})",
        ),
    ],
)
def test_agent_by_a_name_that_is_missing_or_shared(
    cli: Cli, mock_api: respx.MockRouter, agents: list[dict[str, object]], message: str
) -> None:
    mock_api.get(f"{WS}/job-agents").respond(200, json=wire.page(agents))
    result = cli("list", "--agent", "builder")
    assert result.exit_code == 2
    assert message in result.stderr
    assert "valid UUID" not in result.stderr


def test_agent_name_with_a_key_that_cannot_list_agents(
    cli: Cli, mock_api: respx.MockRouter
) -> None:
    mock_api.get(f"{WS}/job-agents").respond(
        404, json={"message": "workspace not found", "code": "NOT_FOUND", "details": None}
    )
    result = cli("list", "--agent", "builder")
    assert result.exit_code == 2
    assert "use the agent's id" in result.stderr


def test_a_base_url_with_a_path_of_its_own(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(url__startswith=f"{BASE}/v2/api/").respond(
        404, json={"message": "not found", "code": "NOT_FOUND", "details": None}
    )
    result = cli("list", "--url", f"{BASE}/v2")
    assert result.exit_code == 5
    assert "the server has no such route: check --url" in result.stderr
    assert "remove '/v2' from it" in result.stderr


def test_a_missing_job_keeps_its_own_message(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/jobs/{wire.JOB}").respond(
        404, json={"message": "job not found", "code": "NOT_FOUND", "details": None}
    )
    result = cli("jobs", "get", str(wire.JOB))
    assert result.exit_code == 5
    assert "error: job not found" in result.stderr


def test_a_bare_not_found_names_both_causes(cli: Cli, mock_api: respx.MockRouter) -> None:
    """Our server answers a bare "not found" to an agent key on a workspace-only route too."""
    mock_api.get(f"{WS}/job-agents").respond(
        404, json={"message": "not found", "code": "NOT_FOUND", "details": None}
    )
    result = cli("agents", "list")
    assert result.exit_code == 5
    assert "no such route on this server, or not one this API key may use" in result.stderr
