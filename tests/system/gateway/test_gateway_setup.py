"""Gateway set-up as an operator does it, and the commands of ours that work through it: `server
init --upstream-workspace` (its errors and exit codes; ctrlplane's key never printed), keys
bound to one of ctrlplane's agents, `run` then `jobs logs`, `jobs attempts`, `agents list`."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.cli import run_cli
from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn
from tests.fixtures.live_server import clean_env
from tests.system.gateway.conftest import GatewayServer

UPSTREAM_KEY_ENV = "JOBAGENTCTL_SERVER_UPSTREAM_API_KEY"


def _init(
    ctrlplane: CtrlplaneStandIn, tmp_path: Path, *extra: str, key: bool = True
) -> tuple[int, str, str]:
    env = clean_env(tmp_path)
    if key:
        env[UPSTREAM_KEY_ENV] = ctrlplane.api_key
    ran = run_cli(
        "server",
        "init",
        "-o",
        "json",
        "--database",
        f"sqlite:///{tmp_path / 'gw.db'}",
        "--upstream-url",
        f"http://127.0.0.1:{ctrlplane.port}",
        *extra,
        env=env,
    )
    return ran.returncode, ran.stdout, ran.stderr


def test_init_takes_ctrlplanes_workspace_and_never_prints_its_key(
    ctrlplane: CtrlplaneStandIn, tmp_path: Path
) -> None:
    code, out, err = _init(ctrlplane, tmp_path, "--upstream-workspace", ctrlplane.workspace_slug)
    assert code == 0, err
    created = json.loads(out)
    assert set(created) == {"workspaceId", "apiKey", "database", "slug"}
    assert created["workspaceId"] == ctrlplane.workspace_id
    assert created["slug"] == ctrlplane.workspace_slug
    assert ctrlplane.api_key not in out + err
    # By id too, with the key from a file; again on the same store: another key of ours.
    key_file = tmp_path / "ctrlplane.key"
    key_file.write_text(ctrlplane.api_key + "\n")
    code, out, err = _init(
        ctrlplane,
        tmp_path,
        "--upstream-workspace",
        ctrlplane.workspace_id,
        "--upstream-key-file",
        str(key_file),
        key=False,
    )
    assert code == 0, err
    assert json.loads(out)["workspaceId"] == ctrlplane.workspace_id
    assert ctrlplane.api_key not in out + err


def test_init_errors_have_their_exit_codes(ctrlplane: CtrlplaneStandIn, tmp_path: Path) -> None:
    code, _, err = _init(ctrlplane, tmp_path, "--upstream-workspace", "no-such-ws")
    assert code == 5, err
    code, _, err = _init(ctrlplane, tmp_path, "--upstream-workspace", "x", key=False)
    assert code == 2 and UPSTREAM_KEY_ENV in err, err
    code, _, err = _init(ctrlplane, tmp_path)  # --upstream-url alone
    assert code == 2 and "--upstream-workspace" in err, err
    env = {**clean_env(tmp_path), UPSTREAM_KEY_ENV: "not-a-key"}
    ran = run_cli(
        "server",
        "init",
        "--database",
        f"sqlite:///{tmp_path / 'other.db'}",
        "--upstream-url",
        f"http://127.0.0.1:{ctrlplane.port}",
        "--upstream-workspace",
        ctrlplane.workspace_slug,
        env=env,
    )
    assert ran.returncode == 2 and "refused the upstream API key" in ran.stderr, ran.stderr
    assert "not-a-key" not in ran.stdout + ran.stderr


def test_start_without_ctrlplanes_key_exits_2(ctrlplane: CtrlplaneStandIn, tmp_path: Path) -> None:
    ran = run_cli(
        "server",
        "start",
        "--database",
        f"sqlite:///{tmp_path / 'gw.db'}",
        "--upstream-url",
        f"http://127.0.0.1:{ctrlplane.port}",
        env=clean_env(tmp_path),
    )
    assert ran.returncode == 2 and UPSTREAM_KEY_ENV in ran.stderr, ran.stderr


def test_agent_key_run_logs_attempts_and_presence_through_the_gateway(
    gateway: GatewayServer, ctrlplane: CtrlplaneStandIn
) -> None:
    agent = ctrlplane.add_agent("pull")
    job = ctrlplane.seed_job(agent)
    other = ctrlplane.seed_job(ctrlplane.add_agent("other"))
    gateway.stop()
    gateway.start()  # the agent made in ctrlplane since init: copied at the first sync
    key = _wait_for_key(gateway, agent)
    env = {**gateway.agent_env(agent), "JOBAGENTCTL_API_KEY": key}
    ran = run_cli("run", "--lease-seconds", "10", "--", "echo", "hello from the job", env=env)
    assert ran.returncode == 0, ran.stderr
    assert ctrlplane.job(job).status == "successful"
    logs = run_cli("jobs", "logs", job, env=env)
    assert logs.returncode == 0 and "hello from the job" in logs.stdout, logs.stderr
    attempts = run_cli("jobs", "attempts", job, "-o", "json", env=env)
    assert [a["outcome"] for a in json.loads(attempts.stdout)] == ["completed"]
    # The agent key is scoped: another agent's job is 404 (exit 5), as on our server.
    assert run_cli("jobs", "get", other, env=env).returncode == 5
    listed = gateway.cli("agents", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    states = {a["id"]: a.get("state") for a in json.loads(listed.stdout)}
    assert states[agent] == "idle", states
    assert ctrlplane.api_key not in gateway.log()


def _wait_for_key(gateway: GatewayServer, agent: str) -> str:
    from tests.fixtures.waiting import wait_until

    def made() -> str | None:
        try:
            return gateway.create_key(agent)
        except RuntimeError:
            return None  # not copied from ctrlplane yet

    key = wait_until(made, what="a key bound to ctrlplane's agent")
    assert key is not None
    return key
