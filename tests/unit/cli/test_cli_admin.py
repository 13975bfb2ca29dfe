"""CliRunner tests of inspect-claims, requeue, cancel, agents, jobs, completion and --debug."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import NAMESPACE_URL, uuid5

import pytest
import respx

from jobagentctl import __version__
from jobagentctl.cli import output
from jobagentctl.errors import NotFound
from tests.fixtures import wire
from tests.fixtures.clirun import Cli
from tests.fixtures.wire import AGENT, BASE, JOB, WORKSPACE, WS


def ago(seconds: float) -> str:
    return output.rfc3339(datetime.now(UTC) - timedelta(seconds=seconds))


def body(route: respx.Route) -> object:
    return json.loads(route.calls.last.request.content)


# --- inspect-claims ---------------------------------------------------------------------------

FRESH = wire.claim_row("active", jobId="aaaaaaaa-0000-4000-8000-000000000001")
EXPIRED = wire.claim_row("expired", jobId="aaaaaaaa-0000-4000-8000-000000000002")
UNLEASED = wire.claim_row("unleased", jobId="aaaaaaaa-0000-4000-8000-000000000003")


def test_inspect_claims_piped(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.get(f"{WS}/job-claims").respond(
        200, json=wire.page([FRESH, EXPIRED, UNLEASED])
    )
    result = cli("inspect-claims")
    assert result.exit_code == 0
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [(r[0], r[1]) for r in rows] == [
        (FRESH["jobId"], "active"),
        (EXPIRED["jobId"], "expired"),
        (UNLEASED["jobId"], "unleased"),
    ]
    assert len(rows[0]) == 10  # the last: QUIET (seconds)
    assert rows[2][3] == ""  # an unleased claim has no claim id
    params = route.calls.last.request.url.params
    assert params["state"] == "all"
    assert params["jobAgentId"] == str(AGENT)  # --agent / JOBAGENTCTL_AGENT filters


def test_inspect_claims_all_agents_without_agent(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.get(f"{WS}/job-claims").respond(200, json=wire.page([]))
    result = cli("inspect-claims", "--state", "expired", env={"JOBAGENTCTL_AGENT": None})
    assert (result.exit_code, result.stdout) == (0, "")
    assert "jobAgentId" not in route.calls.last.request.url.params
    assert route.calls.last.request.url.params["state"] == "expired"


def test_inspect_claims_stale_after(cli: Cli, mock_api: respx.MockRouter) -> None:
    quiet_one = wire.claim_row("active", lastHeartbeatAt=ago(600), claimExpiresAt=ago(-30))
    lively = wire.claim_row("active", lastHeartbeatAt=ago(5), claimExpiresAt=ago(-55))
    mock_api.get(f"{WS}/job-claims").respond(200, json=wire.page([quiet_one, lively]))
    result = cli("inspect-claims", "--stale-after", "2m", "--json")
    assert result.exit_code == 0
    states = [c["state"] for c in json.loads(result.stdout)]
    assert states == ["stale", "active"]
    stuck = cli("inspect-claims", "--stale-after", "2m", "--fail-if-stuck")
    assert stuck.exit_code == 6
    assert "1 stuck claim:" in stuck.stderr
    # Without --stale-after the same claims are not stuck.
    assert cli("inspect-claims", "--fail-if-stuck").exit_code == 0


def test_fail_if_stuck_counts_with_thousands_separators(
    cli: Cli, mock_api: respx.MockRouter
) -> None:
    expired = [wire.claim_row("expired", claimExpiresAt=ago(60)) for _ in range(1_234)]
    mock_api.get(f"{WS}/job-claims").mock(
        side_effect=lambda request: respx.MockResponse(
            200,
            json=wire.page(
                expired[int(request.url.params["offset"]) :][: int(request.url.params["limit"])],
                total=len(expired),
            ),
        )
    )
    stuck = cli("inspect-claims", "--fail-if-stuck", "-q")
    assert stuck.exit_code == 6
    assert "1,234 stuck claims: expired, unleased, stale or quiet" in stuck.stderr


def test_inspect_claims_quiet_after(cli: Cli, mock_api: respx.MockRouter) -> None:
    alive = {"lastHeartbeatAt": ago(5), "claimExpiresAt": ago(-55)}
    silent = wire.claim_row("active", claimedAt=ago(1200), lastOutputAt=ago(900), **alive)
    talking = wire.claim_row("active", claimedAt=ago(1200), lastOutputAt=ago(3), **alive)
    mute = wire.claim_row("active", claimedAt=ago(1000), **alive)  # never printed: since claimed
    mock_api.get(f"{WS}/job-claims").respond(200, json=wire.page([silent, talking, mute]))
    result = cli("inspect-claims", "--quiet-after", "10m", "--json")
    assert result.exit_code == 0
    claims = json.loads(result.stdout)
    assert [c["state"] for c in claims] == ["quiet", "active", "quiet"]
    assert [c["quietSeconds"] // 10 for c in claims] == [90, 0, 100]
    stuck = cli("inspect-claims", "--quiet-after", "10m", "--fail-if-stuck")
    assert stuck.exit_code == 6
    assert "2 stuck claims:" in stuck.stderr
    assert stuck.stdout.splitlines()[0].split("\t")[-1] == str(claims[0]["quietSeconds"])
    # Quiet for less than asked, or not asked: not stuck.
    assert cli("inspect-claims", "--quiet-after", "20m", "--fail-if-stuck").exit_code == 0
    assert cli("inspect-claims", "--fail-if-stuck").exit_code == 0
    table = cli("inspect-claims", "--quiet-after", "10m", tty=True)
    assert "QUIET" in table.stdout and re.search(r"\b15m0\ds\b", table.stdout)
    # The watch asks the server to mark them (quietAfter) and counts the quiet ones as stuck.
    mock_api.get(f"{WS}/job-agents").respond(200, json=wire.page([]))
    urgent = mock_api.get(f"{WS}/job-claims/urgent").respond(
        200,
        json={
            "items": [silent, mute, talking],
            "counts": {"quiet": 2, "active": 1},
            "total": 3,
            "limit": 22,
        },
    )
    watched = cli(
        "inspect-claims", "--watch", "--interval", "0.01", "--quiet-after", "10m",
        "--fail-if-stuck", tty=True,
    )  # fmt: skip
    assert watched.exit_code == 6, watched.stderr
    assert urgent.calls.last.request.url.params["quietAfter"] == "600.0"


@pytest.mark.parametrize("claim", [EXPIRED, UNLEASED], ids=["expired", "unleased"])
def test_fail_if_stuck(cli: Cli, mock_api: respx.MockRouter, claim: dict[str, object]) -> None:
    mock_api.get(f"{WS}/job-claims").respond(200, json=wire.page([FRESH, claim]))
    result = cli("inspect-claims", "--fail-if-stuck")
    assert result.exit_code == 6
    assert len(result.stdout.splitlines()) == 2  # the data is still printed


def test_inspect_claims_table_on_tty(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/job-claims").respond(200, json=wire.page([FRESH, EXPIRED, UNLEASED]))
    result = cli("inspect-claims", tty=True)
    assert result.exit_code == 0
    header = next(line for line in result.stdout.splitlines() if "STATE" in line)
    assert header.split()[:3] == ["JOB", "STATE", "AGENT"]
    assert "LAST HEARTBEAT" in header
    for state in ("active", "expired", "unleased"):
        assert state in result.stdout
    assert " ago" in result.stdout


def test_watch_needs_a_terminal(cli: Cli) -> None:
    result = cli("inspect-claims", "--watch")
    assert result.exit_code == 2
    assert "needs a terminal" in result.stderr


def urgent(*claims: dict[str, object], total: int | None = None) -> dict[str, object]:
    """A ``job-claims/urgent`` answer: these claims, counted by state."""
    counts: dict[str, int] = {}
    for claim in claims:
        counts[str(claim["state"])] = counts.get(str(claim["state"]), 0) + 1
    if total is not None:
        counts["active"] = counts.get("active", 0) + total - len(claims)
    return {"items": list(claims), "counts": counts, "total": sum(counts.values()), "limit": 50}


def test_watch_redraws_until_stuck(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/job-agents").respond(200, json=wire.page([wire.agent()]))
    route = mock_api.get(f"{WS}/job-claims/urgent")
    route.side_effect = [
        respx.MockResponse(200, json=urgent(FRESH)),
        respx.MockResponse(200, json=urgent(EXPIRED, FRESH, total=5000)),
    ]
    args = ["inspect-claims", "--watch", "--interval", "0.01", "--fail-if-stuck"]
    result = cli(*args, tty=True, env={"LINES": "30"})
    assert result.exit_code == 6
    assert route.call_count == 2
    # Only the rows that fit were asked for (30 lines, less the summary and the header).
    assert route.calls[0].request.url.params["limit"] == "28"
    assert "5,000 claims: 1 expired, 4,999 active · 4,998 not shown" in result.stdout
    # The ids share their first 7 digits: shown as long as it takes to tell them apart.
    assert EXPIRED["jobId"].replace("-", "") in result.stdout
    assert "builder" in result.stdout  # the agent by name


def test_watch_on_a_server_without_the_ranked_route(cli: Cli, mock_api: respx.MockRouter) -> None:
    """An older server: every claim is read, ranked and counted here."""
    mock_api.get(f"{WS}/job-agents").respond(200, json=wire.page([wire.agent()]))
    mock_api.get(f"{WS}/job-claims/urgent").respond(
        404, json={"message": "not found", "code": "NOT_FOUND", "details": None}
    )
    every = mock_api.get(f"{WS}/job-claims").respond(
        200, json=wire.page([FRESH, UNLEASED, EXPIRED])
    )
    result = cli("inspect-claims", "--watch", "--fail-if-stuck", tty=True)
    assert result.exit_code == 6
    assert every.called
    rows = [line.split()[0] for line in result.stdout.splitlines()[2:] if line.strip()]
    assert rows == ["expired", "unleased", "active"]
    assert "3 claims: 1 expired, 1 unleased, 1 active" in result.stdout


def test_watch_ends_on_ctrl_c(
    cli: Cli, mock_api: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    mock_api.get(f"{WS}/job-agents").respond(200, json=wire.page([wire.agent()]))
    mock_api.get(f"{WS}/job-claims/urgent").respond(200, json=urgent(FRESH))

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("jobagentctl.cli.inspect_claims_cmd.sleep", interrupt)
    result = cli("inspect-claims", "--watch", tty=True)
    assert result.exit_code == 130
    assert "1 claim: 1 active" in result.stdout
    assert "active  aaaaaaa  " in result.stdout  # one id: its first 7 digits


@pytest.mark.parametrize(
    "args", [["--state", "stuck"], ["--stale-after", "soon"], ["--watch", "--interval", "0"]]
)
def test_inspect_claims_usage_errors(cli: Cli, args: list[str]) -> None:
    assert cli("inspect-claims", *args, tty=True).exit_code == 2


def test_inspect_claims_v1_server(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/job-claims").respond(404, text="<html>Not Found</html>")
    result = cli("inspect-claims")
    assert result.exit_code == 1
    assert "server has no lease support" in result.stderr


def test_inspect_claims_state_an_older_server_does_not_know(
    cli: Cli, mock_api: respx.MockRouter
) -> None:
    # What a 0.3 server answers to ?state=revoked (its framework's enum check, our 400 shape).
    field = {
        "field": "query.state",
        "message": "Input should be 'active', 'expired', 'unleased' or 'all'",
        "type": "enum",
    }
    body = {
        "message": "invalid request: query.state",
        "code": "VALIDATION_ERROR",
        "details": {"errors": [field]},
    }
    mock_api.get(f"{WS}/job-claims").respond(400, json=body)
    result = cli("inspect-claims", "--state", "revoked")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: --state revoked: the server does not support this state (it is older than "
        "this jobagentctl); use --state all, or one of: active, expired, unleased"
    )


# --- requeue, cancel --------------------------------------------------------------------------


@pytest.mark.parametrize(("command", "status"), [("requeue", "queued"), ("cancel", "cancelled")])
def test_operator_overrides(
    cli: Cli, mock_api: respx.MockRouter, command: str, status: str
) -> None:
    route = mock_api.put(f"{WS}/jobs/{JOB}/status").respond(202, json=wire.accepted("updated"))
    # No claim held afterwards (claimHeld absent): nothing more is said.
    mock_api.get(f"{WS}/jobs/{JOB}").respond(200, json=wire.job())
    result = cli(command, str(JOB), "-m", "operator")
    assert result.exit_code == 0
    assert body(route) == {"status": status, "message": "operator"}
    assert result.stdout == f"{JOB}\tupdated\n"
    assert "not claimable" not in result.stderr
    tty = cli(command, str(JOB), tty=True)
    assert tty.stdout == ""
    assert f"job {JOB}: {status}" in tty.stderr


# --- agents -----------------------------------------------------------------------------------


def test_agents_list(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/job-agents").respond(200, json=wire.page([wire.agent()]))
    # No presence from this server (as ctrlplane): empty STATE, LAST SEEN, HELD, "-" on a TTY.
    assert cli("agents", "list").stdout == f"{AGENT}\tbuilder\tshell\t\t\t\n"
    assert json.loads(cli("agents", "list", "--json").stdout)[0]["name"] == "builder"
    tty = cli("agents", "list", tty=True).stdout
    assert "builder" in tty and "LAST SEEN" in tty


def test_agents_list_state_and_the_state_filter(cli: Cli, mock_api: respx.MockRouter) -> None:
    seen = {"state": "idle", "lastSeenAt": wire.T0}
    route = mock_api.get(f"{WS}/job-agents").respond(200, json=wire.page([wire.agent(**seen)]))
    out = cli("agents", "list", "--state", "idle").stdout
    assert out == f"{AGENT}\tbuilder\tshell\tidle\t{wire.T0}\t\n"
    assert route.calls.last.request.url.params["state"] == "idle"
    assert cli("agents", "list", "--state", "asleep").exit_code == 2
    # A server that ignores the filter and knows no presence: nothing matches, and it says so.
    mock_api.get(f"{WS}/job-agents").respond(200, json=wire.page([wire.agent()]))
    result = cli("agents", "list", "--state", "busy")
    assert result.exit_code == 0 and result.stdout == ""
    assert "does not report agent presence" in result.stderr


def test_agents_list_shows_what_an_agent_holds_beside_its_state(
    cli: Cli, mock_api: respx.MockRouter
) -> None:
    dead = {"state": "offline", "lastSeenAt": wire.T0, "heldClaims": 2}
    mock_api.get(f"{WS}/job-agents").respond(200, json=wire.page([wire.agent(**dead)]))
    assert cli("agents", "list").stdout == f"{AGENT}\tbuilder\tshell\toffline\t{wire.T0}\t2\n"
    tty = cli("agents", "list", tty=True).stdout
    assert "HELD" in tty and "offline" in tty
    assert json.loads(cli("agents", "list", "--json").stdout)[0]["heldClaims"] == 2


def test_agents_get_defaults_to_the_configured_agent(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/job-agents/{AGENT}").respond(
        200, json=wire.agent(config={"leaseSeconds": 5})
    )
    result = cli("agents", "get", "--json")
    assert json.loads(result.stdout)["config"] == {"leaseSeconds": 5}
    tty = cli("agents", "get", tty=True)
    assert '{"leaseSeconds": 5}' in tty.stdout


def test_agents_register_derives_a_stable_id(cli: Cli, mock_api: respx.MockRouter) -> None:
    derived = uuid5(NAMESPACE_URL, f"jobagentctl:agent/{WORKSPACE}/builder")
    put = mock_api.put(f"{WS}/job-agents/{derived}").respond(202, json=wire.accepted())
    mock_api.get(f"{WS}/job-agents/{derived}").respond(200, json=wire.agent(id=str(derived)))
    result = cli("agents", "register", "builder", "--config", '{"leaseSeconds": 30}', "--json")
    assert result.exit_code == 0, result.stderr
    assert body(put) == {"name": "builder", "type": "http-pull", "config": {"leaseSeconds": 30}}
    assert json.loads(result.stdout)["id"] == str(derived)
    assert f"export JOBAGENTCTL_AGENT={derived}" in result.stderr


def test_agents_register_with_id_and_config_file(
    cli: Cli, mock_api: respx.MockRouter, tmp_path: Path
) -> None:
    put = mock_api.put(f"{WS}/job-agents/{AGENT}").respond(202, json=wire.accepted())
    mock_api.get(f"{WS}/job-agents/{AGENT}").respond(200, json=wire.agent())
    config = tmp_path / "agent.json"
    config.write_text('{"region": "eu"}')
    result = cli(
        "agents", "register", "x", "--id", str(AGENT), "--type", "k8s", "--config", f"@{config}"
    )
    assert result.exit_code == 0
    assert body(put) == {"name": "x", "type": "k8s", "config": {"region": "eu"}}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("[1]", "expected a JSON object"),
        ("{oops", "invalid JSON"),
        ("@/nonexistent", "cannot read"),
    ],
)
def test_agents_register_bad_config(cli: Cli, config: str, message: str) -> None:
    result = cli("agents", "register", "x", "--config", config)
    assert result.exit_code == 2
    assert message in result.stderr


def test_agents_delete(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.delete(f"{WS}/job-agents/{AGENT}").respond(202, json=wire.accepted("deleted"))
    result = cli("agents", "delete", str(AGENT), "--json")
    assert json.loads(result.stdout)["message"] == "deleted"


# --- jobs -------------------------------------------------------------------------------------


def test_jobs_get(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}").respond(200, json=wire.job(dispatchContext={"release": "v1"}))
    result = cli("jobs", "get", str(JOB), "--json")
    assert json.loads(result.stdout)["dispatchContext"] == {"release": "v1"}
    assert cli("jobs", "get", str(JOB)).stdout.startswith(f"{JOB}\tqueued\t")


def test_jobs_enqueue(cli: Cli, mock_api: respx.MockRouter, tmp_path: Path) -> None:
    route = mock_api.post(f"{WS}/job-agents/{AGENT}/jobs").respond(201, json=wire.job())
    context = tmp_path / "ctx.json"
    context.write_text('{"environment": "prod"}')
    result = cli(
        "jobs",
        "enqueue",
        "--config",
        '{"script": "make"}',
        "--context",
        f"@{context}",
        "--metadata",
        "team=infra",
        "--metadata",
        "ticket=OPS-1=2",
    )
    assert result.exit_code == 0
    assert body(route) == {
        "jobAgentConfig": {"script": "make"},
        "dispatchContext": {"environment": "prod"},
        "metadata": {"team": "infra", "ticket": "OPS-1=2"},
    }
    assert result.stdout.startswith(str(JOB))


def test_jobs_enqueue_from_stdin(
    cli: Cli, mock_api: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    route = mock_api.post(f"{WS}/job-agents/{AGENT}/jobs").respond(201, json=wire.job())
    from typer.testing import CliRunner

    from jobagentctl.cli.app import app

    result = CliRunner().invoke(
        app, ["jobs", "enqueue", "--config", "@-"], input='{"a": 1}', env=cli.env
    )
    assert result.exit_code == 0, result.stderr
    assert body(route) == {"jobAgentConfig": {"a": 1}}


def test_jobs_attempts(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}/attempts").respond(
        200, json=[wire.attempt(1, "expired"), wire.attempt(2, None)]
    )
    rows = [line.split("\t") for line in cli("jobs", "attempts", str(JOB)).stdout.splitlines()]
    assert [(r[0], r[1]) for r in rows] == [("1", "expired"), ("2", "")]
    assert "ATTEMPT" in cli("jobs", "attempts", str(JOB), tty=True).stdout


def test_jobs_list(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.get(f"{WS}/jobs").respond(200, json=wire.page([wire.job()]))
    assert cli("jobs", "list", "--status", "queued").exit_code == 0
    assert route.calls.last.request.url.params["status"] == "queued"


# --- env output only where it means something, misc -------------------------------------------


def test_env_output_is_for_one_object(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/jobs").respond(200, json=wire.page([wire.job()]))
    result = cli("jobs", "list", "-o", "env")
    assert result.exit_code == 2
    assert "not available" in result.stderr
    mock_api.get(f"{WS}/jobs/{JOB}").respond(200, json=wire.job())
    got = cli("jobs", "get", str(JOB), "-o", "env")
    assert got.exit_code == 0, got.stderr
    assert f"export JOBAGENTCTL_JOB_ID={JOB}\n" in got.stdout
    assert "export JOBAGENTCTL_JOB_CLAIM_HELD=false\n" in got.stdout


def test_version_and_help_need_no_settings(cli: Cli, tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[[[")
    env = {"JOBAGENTCTL_CONFIG": str(broken)}
    version = cli("--version", env=env)
    assert (version.exit_code, version.stdout) == (0, f"jobagentctl {__version__}\n")
    assert cli("heartbeat", "--help", env=env).exit_code == 0
    assert cli("completion", "bash", env=env).exit_code == 0
    assert cli("list", env=env).exit_code == 2  # a command that needs settings reads it


def test_debug_trace_on_stderr_without_key(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}").respond(200, json=wire.job())
    result = cli("--debug", "jobs", "get", str(JOB))
    assert result.exit_code == 0
    assert "[http] > GET" in result.stderr
    assert "<redacted>" in result.stderr
    assert "[http]" not in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--json", "jobs", "get", str(JOB)],
        ["jobs", "get", str(JOB), "--json"],
        ["jobs", "get", "--json", str(JOB)],
        ["-o", "json", "jobs", "get", str(JOB)],
        ["jobs", "get", str(JOB), "-ojson"],
        ["jobs", "get", str(JOB), "--output=json"],
    ],
)
def test_global_options_before_or_after_the_command(
    cli: Cli, mock_api: respx.MockRouter, args: list[str]
) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}").respond(200, json=wire.job())
    result = cli(*args)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["id"] == str(JOB)


def test_global_connection_options_after_the_command(cli: Cli, mock_api: respx.MockRouter) -> None:
    other = "99999999-9999-4999-8999-999999999999"
    route = mock_api.get(f"{BASE}/api/v1/workspaces/{other}/jobs/{JOB}").respond(
        200, json=wire.job()
    )
    result = cli("jobs", "get", str(JOB), "--workspace", other, "-q", "--debug")
    assert result.exit_code == 0, result.stderr
    assert route.called
    assert "[http] > GET" in result.stderr  # --debug after the command took effect too


def test_conflicting_output_options_are_a_usage_error(cli: Cli) -> None:
    result = cli("--json", "jobs", "get", str(JOB), "-o", "tsv")
    assert result.exit_code == 2
    assert "--json conflicts with -o tsv" in result.stderr
    assert cli("jobs", "get", str(JOB), "-o", "yaml").exit_code == 2


def test_a_command_keeps_its_own_option_of_a_global_name(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`server create-key --workspace` is the command's; the global one is not touched."""
    import jobagentctl.server.admin as admin

    seen: dict[str, object] = {}

    async def create(database: str, workspace_id: object, agent_id: object) -> object:
        seen.update(own=str(workspace_id))
        raise NotFound("no such workspace")

    monkeypatch.setattr(admin, "create_key", create)
    ws = "99999999-9999-4999-8999-999999999999"
    result = cli("server", "create-key", "--workspace", ws, "--json", "--database", "sqlite://")
    assert seen["own"] == ws
    assert result.exit_code == 5
    assert json.loads(result.stderr.splitlines()[-1])["error"]["code"] == "NOT_FOUND"


def test_run_passes_options_after_its_command_to_the_command(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jobagentctl.supervisor as supervisor

    seen: dict[str, object] = {}

    class Fake:
        def __init__(self, options: object, client: object, log: object) -> None:
            seen["command"] = options.command  # type: ignore[attr-defined]

        def run(self) -> int:
            return 0

    monkeypatch.setattr(supervisor, "Supervisor", Fake)
    result = cli("run", "-q", "--json", "--", "tool", "--json", "-q", "--workspace", "X")
    assert result.exit_code == 0, result.stderr
    assert seen["command"] == ["tool", "--json", "-q", "--workspace", "X"]
    seen.clear()
    result = cli("--json", "run", "tool", "-o", "tsv")  # no `--`: CMD starts at `tool`
    assert result.exit_code == 0, result.stderr
    assert seen["command"] == ["tool", "-o", "tsv"]


# --- every remaining command with a TTY forced -------------------------------------------------

DERIVED = uuid5(NAMESPACE_URL, f"jobagentctl:agent/{WORKSPACE}/builder")


@pytest.mark.parametrize(
    ("args", "routes", "stdout_has", "stderr_has"),
    [
        (
            ["heartbeat", str(JOB), "--claim-id", str(wire.CLAIM)],
            [("POST", f"{WS}/jobs/{JOB}/heartbeat", 200, wire.heartbeat())],
            "expires",
            "",
        ),
        (
            ["agents", "register", "builder"],
            [
                ("PUT", f"{WS}/job-agents/{DERIVED}", 202, wire.accepted()),
                ("GET", f"{WS}/job-agents/{DERIVED}", 200, wire.agent(id=str(DERIVED))),
            ],
            "builder",
            f"export JOBAGENTCTL_AGENT={DERIVED}",
        ),
        (
            ["agents", "delete", str(AGENT)],
            [("DELETE", f"{WS}/job-agents/{AGENT}", 202, wire.accepted("deleted"))],
            "",
            f"agent {AGENT}: deleted",
        ),
        (
            ["jobs", "get", str(JOB)],
            [("GET", f"{WS}/jobs/{JOB}", 200, wire.job())],
            "jobAgentConfig",
            "",
        ),
        (
            ["jobs", "enqueue"],
            [("POST", f"{WS}/job-agents/{AGENT}/jobs", 201, wire.job())],
            str(JOB),
            "",
        ),
        (
            ["jobs", "list"],
            [("GET", f"{WS}/jobs", 200, wire.page([wire.job()]))],
            "STATUS",
            "",
        ),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and isinstance(v[0], str) else None,
)
def test_tty_form(
    cli: Cli,
    mock_api: respx.MockRouter,
    args: list[str],
    routes: list[tuple[str, str, int, object]],
    stdout_has: str,
    stderr_has: str,
) -> None:
    for method, url, status, payload in routes:
        mock_api.route(method=method, url=url).respond(status, json=payload)
    result = cli(*args, tty=True)
    assert result.exit_code == 0, result.stderr
    assert stdout_has in result.stdout
    assert stderr_has in result.stderr
    if not stdout_has:
        assert result.stdout == ""
    if not stderr_has:
        assert result.stderr == ""


# --- server commands: a password on the command line ------------------------------------------


@pytest.mark.parametrize(
    ("url", "warned"),
    [
        ("postgresql://jobagent:hunter2-secret@127.0.0.1:1/jobagent", True),
        ("postgresql://jobagent@127.0.0.1:1/jobagent?password=hunter2-secret", True),
        ("postgresql://jobagent@127.0.0.1:1/jobagent", False),
    ],
    ids=["userinfo", "query", "no-password"],
)
def test_regression_a_password_in_database_flag_is_warned_about(
    cli: Cli, url: str, warned: bool
) -> None:
    """Issue 11 §10: a flag shows in `ps`; the warning names the safe ways, never the secret."""
    result = cli("server", "migrate", "--database", url, env={"PGCONNECT_TIMEOUT": "2"})
    assert result.exit_code != 0  # nobody listens on port 1
    assert ("visible to every local user" in result.stderr) is warned
    assert "hunter2-secret" not in result.stdout + result.stderr
    if warned:
        assert "JOBAGENTCTL_SERVER_DATABASE" in result.stderr and "PGPASSFILE" in result.stderr
