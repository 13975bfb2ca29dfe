"""CliRunner tests of list, claim, heartbeat and complete: piped, on a TTY, json, env."""

from __future__ import annotations

import json
import shlex

import httpx
import pytest
import respx

from tests.fixtures import wire
from tests.fixtures.clirun import Cli
from tests.fixtures.wire import AGENT, CLAIM, JOB, WS


def body(route: respx.Route) -> object:
    return json.loads(route.calls.last.request.content)


# --- list -------------------------------------------------------------------------------------


def test_list_piped_is_tsv_without_header(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").respond(
        200, json=wire.page([wire.job(message="line1\nline2\tx")])
    )
    result = cli("list")
    assert result.exit_code == 0
    assert result.stdout == (
        f"{JOB}\tqueued\t{AGENT}\t2024-05-01T12:00:00Z\t\t\t\tline1\\nline2\\tx\n"
    )
    assert result.stderr == ""
    assert route.calls.last.request.url.params["status"] == "queued"


def test_list_on_a_tty_is_a_table(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").respond(
        200, json=wire.page([wire.job()], total=3)
    )
    result = cli("list", tty=True)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "STATUS" in line)
    assert header.split()[:3] == ["JOB", "STATUS", "AGENT"]
    row = next(line for line in lines if str(JOB) in line)
    assert "queued" in row and " ago" in row
    assert "1 of 3 (use --all-pages or --limit)" in result.stderr


def test_list_json_and_option_after_command(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").respond(200, json=wire.page([wire.job()]))
    before = cli("--json", "list")
    after = cli("list", "--json")
    assert before.exit_code == after.exit_code == 0
    assert before.stdout == after.stdout
    data = json.loads(after.stdout)
    assert isinstance(data, list)
    assert data[0]["id"] == str(JOB)
    assert data[0]["createdAt"] == "2024-05-01T12:00:00Z"
    assert data[0]["jobAgentId"] == str(AGENT)


def test_list_empty_is_success(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").respond(200, json=wire.page([]))
    piped = cli("list")
    assert (piped.exit_code, piped.stdout, piped.stderr) == (0, "", "")
    tty = cli("list", tty=True)
    assert tty.exit_code == 0
    assert "(none)" in tty.stdout
    assert json.loads(cli("list", "-o", "json").stdout) == []


def test_list_all_statuses_and_pages(cli: Cli, mock_api: respx.MockRouter) -> None:
    jobs = [wire.job(id=str(i) * 8 + "-1111-4111-8111-111111111111") for i in range(1, 4)]

    def server(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        assert "status" not in request.url.params
        return httpx.Response(200, json=wire.page(jobs[offset : offset + 2], total=3))

    mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").mock(side_effect=server)
    result = cli("list", "--status", "all", "--all-pages")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 3


def test_all_pages_follow_the_servers_cursor(cli: Cli, mock_api: respx.MockRouter) -> None:
    jobs = [wire.job(id=str(i) * 8 + "-1111-4111-8111-111111111111") for i in range(1, 4)]
    pages = {None: (jobs[:2], "c2"), "c2": (jobs[2:], None)}

    def server(request: httpx.Request) -> httpx.Response:
        assert request.url.params["offset"] == "0"  # the cursor, not an offset, moves on
        items, following = pages[request.url.params.get("cursor")]
        return httpx.Response(200, json={**wire.page(items, total=3), "nextCursor": following})

    for route in (f"{WS}/job-agents/{AGENT}/jobs", f"{WS}/jobs"):
        mock_api.get(route).mock(side_effect=server)
    for args in (("list",), ("jobs", "list")):
        result = cli(*args, "--all-pages", "-o", "json")
        assert result.exit_code == 0, result.stderr
        assert [job["id"] for job in json.loads(result.stdout)] == [j["id"] for j in jobs]


def test_list_status_is_validated(cli: Cli) -> None:
    result = cli("list", "--status", "done")
    assert result.exit_code == 2
    assert "unknown status 'done'" in result.stderr


def test_list_status_spelling_is_folded(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").respond(200, json=wire.page([]))
    assert cli("list", "--status", "in_progress").exit_code == 0
    assert route.calls.last.request.url.params["status"] == "inProgress"


def test_list_needs_an_agent(cli: Cli) -> None:
    result = cli("list", env={"JOBAGENTCTL_AGENT": None})
    assert result.exit_code == 2
    assert "no job agent" in result.stderr


# --- claim ------------------------------------------------------------------------------------


def test_claim_by_id_piped(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.post(f"{WS}/job-agents/{AGENT}/jobs/{JOB}/claim").respond(
        200, json=wire.claimed()
    )
    result = cli("claim", str(JOB), "--lease-seconds", "90")
    assert result.exit_code == 0
    assert result.stdout == f"{JOB}\t{CLAIM}\t1\t60\t2024-05-01T12:01:00Z\tinProgress\n"
    assert body(route) == {"leaseSeconds": 90}


def test_claim_env_output_evals(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.post(f"{WS}/job-agents/{AGENT}/claim").respond(200, json=wire.claimed())
    result = cli("claim", "-o", "env", env={"JOBAGENTCTL_LEASE_SECONDS": "45"})
    assert result.exit_code == 0
    assert body(route) == {"leaseSeconds": 45, "waitSeconds": 0.0}
    assert result.stdout.splitlines() == [
        f"export JOBAGENTCTL_JOB_ID={JOB}",
        f"export JOBAGENTCTL_CLAIM_ID={CLAIM}",
        "export JOBAGENTCTL_LEASE_SECONDS=60",
        "export JOBAGENTCTL_ATTEMPT=1",
    ]
    for line in result.stdout.splitlines():
        assert shlex.split(line)[0] == "export"


def test_claim_limit_claims_a_batch_in_one_request(cli: Cli, mock_api: respx.MockRouter) -> None:
    second = wire.claimed(
        id="00000000-0000-4000-8000-0000000000b2", claimId="00000000-0000-4000-8000-0000000000c2"
    )
    route = mock_api.post(f"{WS}/job-agents/{AGENT}/claim").respond(
        200, json={"items": [wire.claimed(), second]}
    )
    result = cli("claim", "--limit", "5", "--json")
    assert result.exit_code == 0, result.stderr
    assert "ignored" not in result.stderr
    assert body(route) == {"leaseSeconds": 60, "waitSeconds": 0.0, "limit": 5}
    assert [j["claimId"] for j in json.loads(result.stdout)] == [str(CLAIM), second["claimId"]]
    piped = cli("claim", "--limit", "2")
    assert [line.split("\t")[1] for line in piped.stdout.splitlines()] == [
        str(CLAIM),
        second["claimId"],
    ]


def test_claim_limit_from_a_server_that_does_not_batch(
    cli: Cli, mock_api: respx.MockRouter
) -> None:
    mock_api.post(f"{WS}/job-agents/{AGENT}/claim").respond(200, json=wire.claimed())
    result = cli("claim", "--limit", "3", "--json")
    assert result.exit_code == 0
    assert [j["claimId"] for j in json.loads(result.stdout)] == [str(CLAIM)]
    # Said once on stderr: the server took the request without the limit the user set.
    assert "the server ignored the claim's limit of 3" in result.stderr
    again = cli("claim", "--limit", "3", "--json")
    assert "ignored" not in again.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--limit", "2", "-o", "env"],
        ["--limit", "0"],
        ["--limit", "101"],
        [str(JOB), "--limit", "2"],
    ],
)
def test_claim_limit_usage_errors(cli: Cli, args: list[str]) -> None:
    result = cli("claim", *args)
    assert result.exit_code == 2, result.stdout


def test_claim_nothing_queued_is_7(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.post(f"{WS}/job-agents/{AGENT}/claim").respond(204)
    result = cli("claim")
    assert result.exit_code == 7
    assert result.stdout == ""
    assert "no job queued" in result.stderr


def test_claim_wait_long_polls(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.post(f"{WS}/job-agents/{AGENT}/claim").respond(200, json=wire.claimed())
    result = cli("claim", "--wait", "2m", "--json")
    assert result.exit_code == 0
    assert body(route) == {"leaseSeconds": 60, "waitSeconds": pytest.approx(120, abs=1)}
    claimed = json.loads(result.stdout)
    assert claimed["claimId"] == str(CLAIM)
    assert route.calls.last.request.extensions["timeout"]["read"] > 120


def test_claim_v1_server_without_claim_id(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.post(f"{WS}/job-agents/{AGENT}/jobs/{JOB}/claim").respond(
        200, json=wire.job(status="inProgress")
    )
    result = cli("claim", str(JOB), "-o", "env")
    assert result.exit_code == 0
    assert "export JOBAGENTCTL_CLAIM_ID=''" in result.stdout.splitlines()
    assert "export JOBAGENTCTL_LEASE_SECONDS=''" in result.stdout.splitlines()
    assert "granted no lease" in result.stderr


def test_claim_unleased_on_purpose_does_not_warn(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.post(f"{WS}/job-agents/{AGENT}/jobs/{JOB}/claim").respond(
        200, json=wire.claimed(claimId=None, leaseSeconds=None)
    )
    result = cli("claim", str(JOB), "--lease-seconds", "0")
    assert result.exit_code == 0
    assert body(route) == {"leaseSeconds": 0}
    assert result.stderr == ""


def test_claim_on_a_tty_shows_the_job(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.post(f"{WS}/job-agents/{AGENT}/jobs/{JOB}/claim").respond(200, json=wire.claimed())
    result = cli("claim", str(JOB), tty=True)
    assert result.exit_code == 0
    assert str(CLAIM) in result.stdout
    assert "jobAgentConfig" in result.stdout  # the rest of the object is shown too


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["claim", str(JOB), "--wait", "5s"], "--wait applies only"),
        (["claim", "not-a-uuid"], "JOB_ID: not a UUID"),
        (["claim", "--wait", "5 minutes"], "invalid --wait"),
    ],
)
def test_claim_usage_errors(cli: Cli, args: list[str], message: str) -> None:
    result = cli(*args)
    assert result.exit_code == 2
    assert message in result.stderr


# --- heartbeat --------------------------------------------------------------------------------


def test_heartbeat_from_claim_environment(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.post(f"{WS}/jobs/{JOB}/heartbeat").respond(200, json=wire.heartbeat())
    env = {"JOBAGENTCTL_JOB_ID": str(JOB), "JOBAGENTCTL_CLAIM_ID": str(CLAIM)}
    result = cli("heartbeat", env=env)
    assert result.exit_code == 0
    assert body(route) == {"claimId": str(CLAIM)}
    assert result.stdout == f"{JOB}\t{CLAIM}\t1\t60\t2024-05-01T12:02:00Z\n"
    as_json = json.loads(cli("heartbeat", "--json", env=env).stdout)
    assert as_json["claimExpiresAt"] == "2024-05-01T12:02:00Z"


def test_heartbeat_arguments_beat_environment(cli: Cli, mock_api: respx.MockRouter) -> None:
    other = "55555555-5555-4555-8555-555555555555"
    route = mock_api.post(f"{WS}/jobs/{other}/heartbeat").respond(200, json=wire.heartbeat())
    env = {"JOBAGENTCTL_JOB_ID": str(JOB), "JOBAGENTCTL_CLAIM_ID": str(CLAIM)}
    result = cli("heartbeat", other, "--claim-id", other, "--lease-seconds", "300", env=env)
    assert result.exit_code == 0
    assert body(route) == {"claimId": other, "leaseSeconds": 300}


def test_heartbeat_needs_a_job(cli: Cli) -> None:
    result = cli("heartbeat")
    assert result.exit_code == 2
    assert "JOBAGENTCTL_JOB_ID" in result.stderr


def test_heartbeat_claim_lost_is_6(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.post(f"{WS}/jobs/{JOB}/heartbeat").respond(
        409, json=wire.error("CLAIM_LOST", "claim expired and was reaped", {"jobStatus": "queued"})
    )
    result = cli("heartbeat", str(JOB), "--claim-id", str(CLAIM), "--json")
    assert result.exit_code == 6
    error = json.loads(result.stderr.splitlines()[-1])["error"]
    assert error == {
        "code": "CLAIM_LOST",
        "message": "claim expired and was reaped",
        "status": 409,
        "exitCode": 6,
        "details": {"jobStatus": "queued"},
    }


def test_heartbeat_against_v1_server(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.post(f"{WS}/jobs/{JOB}/heartbeat").respond(404, json={"error": "Not Found"})
    result = cli("heartbeat", str(JOB), "--claim-id", str(CLAIM))
    assert result.exit_code == 1
    assert "server has no lease support" in result.stderr


@pytest.mark.parametrize("claim_env", ["", None])
def test_an_empty_claim_id_is_unset(
    cli: Cli, mock_api: respx.MockRouter, claim_env: str | None
) -> None:
    """Empty = unset, for heartbeat as for complete: the heartbeat goes without a claim id."""
    route = mock_api.post(f"{WS}/jobs/{JOB}/heartbeat").respond(200, json=wire.heartbeat())
    result = cli(
        "heartbeat", env={"JOBAGENTCTL_JOB_ID": str(JOB), "JOBAGENTCTL_CLAIM_ID": claim_env}
    )
    assert result.exit_code == 0, result.stderr
    assert body(route) == {}
    empty_job = cli("heartbeat", env={"JOBAGENTCTL_JOB_ID": ""})
    assert empty_job.exit_code == 2
    assert "missing JOB_ID" in empty_job.stderr


# --- complete ---------------------------------------------------------------------------------


def test_complete_exit_code_zero(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.put(f"{WS}/jobs/{JOB}/status").respond(202, json=wire.accepted("updated"))
    env = {"JOBAGENTCTL_JOB_ID": str(JOB), "JOBAGENTCTL_CLAIM_ID": str(CLAIM)}
    result = cli("complete", "--exit-code", "0", env=env)
    assert result.exit_code == 0
    assert body(route) == {"status": "successful", "claimId": str(CLAIM)}
    assert result.stdout == f"{JOB}\tupdated\n"


def test_complete_failure_with_links(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.put(f"{WS}/jobs/{JOB}/status").respond(202, json=wire.accepted())
    result = cli(
        "complete",
        str(JOB),
        "--exit-code",
        "3",
        "--external-id",
        "run-7",
        "--link",
        "Logs=https://ci.example.com/7?a=b",
        "--link",
        "Diff=https://x/y",
    )
    assert result.exit_code == 0
    sent = body(route)
    assert sent == {
        "status": "failure",
        "message": "exit code 3",
        "externalId": "run-7",
        "metadata": {
            "ctrlplane/links": json.dumps(
                {"Logs": "https://ci.example.com/7?a=b", "Diff": "https://x/y"}
            )
        },
    }


def test_complete_on_a_tty_confirms_on_stderr(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.put(f"{WS}/jobs/{JOB}/status").respond(202, json=wire.accepted("Job status updated"))
    result = cli("complete", str(JOB), "--status", "skipped", "-m", "nothing to do", tty=True)
    assert result.exit_code == 0
    assert result.stdout == ""
    assert f"job {JOB}: skipped (Job status updated)" in result.stderr
    quiet = cli("-q", "complete", str(JOB), "--status", "skipped", tty=True)
    assert (quiet.stdout, quiet.stderr) == ("", "")


def test_complete_json_is_the_accepted_object(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.put(f"{WS}/jobs/{JOB}/status").respond(202, json=wire.accepted("ok"))
    result = cli("complete", str(JOB), "--status", "successful", "--json")
    assert json.loads(result.stdout) == {"id": str(JOB), "message": "ok"}


def test_complete_v1_claim_reports_without_fencing(cli: Cli, mock_api: respx.MockRouter) -> None:
    route = mock_api.put(f"{WS}/jobs/{JOB}/status").respond(202, json=wire.accepted())
    env = {"JOBAGENTCTL_JOB_ID": str(JOB), "JOBAGENTCTL_CLAIM_ID": ""}
    assert cli("complete", "--status", "successful", env=env).exit_code == 0
    assert body(route) == {"status": "successful"}


# An API error: its class's exit code, and its message as the one error line.
API_ERRORS = {
    "requeue unknown job": (
        ("PUT", f"{WS}/jobs/{JOB}/status", 404, "NOT_FOUND", "job not found"),
        ["requeue", str(JOB)],
        5,
    ),
    "claim not claimable": (
        (
            "POST",
            f"{WS}/job-agents/{AGENT}/jobs/{JOB}/claim",
            409,
            "NOT_CLAIMABLE",
            "job is inProgress",
        ),
        ["claim", str(JOB)],
        6,
    ),
    "complete claim mismatch": (
        (
            "PUT",
            f"{WS}/jobs/{JOB}/status",
            409,
            "CLAIM_MISMATCH",
            "another attempt holds the claim",
        ),
        ["complete", str(JOB), "--exit-code", "0", "--claim-id", str(CLAIM)],
        6,
    ),
}


@pytest.mark.parametrize("case", list(API_ERRORS))
def test_an_api_error_is_its_exit_code(cli: Cli, mock_api: respx.MockRouter, case: str) -> None:
    (method, url, status, code, message), args, exit_code = API_ERRORS[case]
    mock_api.route(method=method, url=url).respond(status, json=wire.error(code, message))
    result = cli(*args)
    assert result.exit_code == exit_code
    assert result.stderr == f"error: {message}\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--status", "successful", "--exit-code", "0"], "exactly one of"),
        ([], "exactly one of"),
        (["--status", "queued"], "not a terminal status"),
        (["--status", "great"], "unknown status"),
        (["--exit-code", "0", "--link", "no-equals"], "expected KEY=VALUE"),
        (["--exit-code", "0", "--claim-id", "zzz"], "--claim-id: not a UUID"),
    ],
)
def test_complete_usage_errors(cli: Cli, args: list[str], message: str) -> None:
    result = cli("complete", str(JOB), *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_jobs_logs_of_an_expired_log_says_so_and_exits_5(
    cli: Cli, mock_api: respx.MockRouter
) -> None:
    body = {
        "message": "the log of attempt 1 was deleted by the server's log retention",
        "code": "LOG_EXPIRED",
        "details": {"jobId": str(JOB), "attempt": 1},
    }
    mock_api.get(f"{WS}/jobs/{JOB}/logs").respond(410, json=body)
    result = cli("jobs", "logs", str(JOB), "--follow")
    assert result.exit_code == 5, result.stderr
    assert "deleted by the server's log retention" in result.stderr
    assert result.stdout == ""


def test_jobs_logs_follow_exits_8_when_the_attempt_failed(
    cli: Cli, mock_api: respx.MockRouter
) -> None:
    ended = {
        "jobId": str(JOB),
        "attempt": 2,
        "chunks": [],
        "nextSeq": 1,
        "ended": True,
        "outcome": "expired",
        "jobStatus": "queued",
    }
    route = mock_api.get(f"{WS}/jobs/{JOB}/logs").respond(200, json=ended)
    result = cli("jobs", "logs", str(JOB), "--follow", "--attempt", "2")
    assert result.exit_code == 8, result.stderr
    assert "attempt 2" in result.stderr and "expired" in result.stderr
    assert route.calls.last.request.url.params["attempt"] == "2"
    ok = cli("jobs", "logs", str(JOB), "--attempt", "2")  # without --follow: printed, exit 0
    assert ok.exit_code == 0, ok.stderr


# --- a page of a longer list, at 80 columns ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "path"),
    [(["list"], f"{WS}/job-agents/{AGENT}/jobs"), (["jobs", "list"], f"{WS}/jobs")],
)
def test_a_page_says_how_many_there_are_and_keeps_statuses_whole(
    cli: Cli,
    mock_api: respx.MockRouter,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    path: str,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    long_message = "a long message that would take the width " * 3
    items = [
        wire.job(status=status, externalId="ext-" + "x" * 40, message=long_message)
        for status in ("actionRequired", "inProgress", "queued")
    ]
    mock_api.get(path).respond(200, json=wire.page(items, total=10_000))
    result = cli(*args, tty=True)
    assert result.exit_code == 0, result.stderr
    assert "3 of 10,000 (use --all-pages or --limit)" in result.stderr
    for status in ("actionRequired", "inProgress", "queued"):
        assert f" {status} " in result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    # The title counts as the hint does.
    assert result.stdout.splitlines()[0].endswith(": 3 of 10,000")
    # Piped, stdout is data, and stderr still says the list was cut (not with -q).
    piped = cli(*args)
    assert piped.exit_code == 0
    assert piped.stderr == "3 of 10,000 (use --all-pages or --limit)\n"
    assert cli(*args, "-q").stderr == ""
    quiet = cli(*args, "-q", tty=True)
    assert "10,000" not in quiet.stderr
