"""The README table's "jobagentctl server" cells that other suites do not already cover: the
same commands as tests/integration/ctrlplane/test_cli_against_ctrlplane.py, against our own
server on both databases."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.cli import cli_command
from tests.fixtures.databases import sql
from tests.fixtures.live_server import LiveServer
from tests.fixtures.server_cli import Ran, env_for, jac, jac_process
from tests.fixtures.waiting import wait_until

# Slow: a live server process per test: `make test-fast` leaves it out, `make test` runs it.
pytestmark = pytest.mark.slow


def claim_and_fail(server: LiveServer, agent: str, job: str, exit_code: int) -> tuple[Ran, Ran]:
    """``claim JOB -o json`` then ``complete JOB --exit-code N`` with its claim id; both ran."""
    claimed = jac(server, "claim", job, "-o", "json", agent=agent)
    assert claimed.returncode == 0, claimed.stderr
    claim_id = json.loads(claimed.stdout)["claimId"]
    done = jac(server, "complete", job, "--exit-code", str(exit_code), "--claim-id", claim_id)
    assert done.returncode == 0, done.stderr
    return claimed, done


def test_jobs_list_status_agents_list_get_on_our_server(live_server: LiveServer) -> None:
    agent = live_server.create_agent("ours")
    failed = live_server.enqueue(agent)["id"]
    kept = live_server.enqueue(agent)["id"]
    claimed, done = claim_and_fail(live_server, agent, failed, 1)
    assert "did not store" not in done.stderr  # our server stores the message
    assert live_server.get_job(failed)["message"] == "exit code 1"
    listed = jac(live_server, "jobs", "list", "--status", "failure", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert [job["id"] for job in json.loads(listed.stdout)] == [failed]
    assert kept in jac(live_server, "jobs", "list").stdout
    shown = jac(live_server, "jobs", "get", failed, "-o", "json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["status"] == "failure"
    agents = jac(live_server, "agents", "list", "-o", "json")
    assert agent in [a["id"] for a in json.loads(agents.stdout)]
    got = jac(live_server, "agents", "get", agent, "-o", "json")
    assert got.returncode == 0 and json.loads(got.stdout)["name"] == "ours"
    # Our server has claim-next: no fallback, no warning.
    assert "no lease support" not in claimed.stderr


def test_run_job_that_is_not_queued_exits_7_on_our_server(live_server: LiveServer) -> None:
    agent = live_server.create_agent("busy")
    job = live_server.enqueue(agent)["id"]
    assert jac(live_server, "claim", job, agent=agent).returncode == 0
    ran = jac_process(live_server, "run", "--job", job, "--", "true", agent=agent)
    assert ran.returncode == 7, ran.stderr


def test_workspace_slug_on_our_server(live_server: LiveServer) -> None:
    status, workspace = live_server.request("GET", f"/api/v1/workspaces/{live_server.workspace_id}")
    slug = workspace["slug"] if status == 200 else "default"
    ran = jac(live_server, "agents", "list", env={"JOBAGENTCTL_WORKSPACE": slug})
    assert ran.returncode == 0, ran.stderr


def test_requeue_of_a_failed_job_then_attempts_shows_the_next_attempt(
    live_server: LiveServer,
) -> None:
    """As ctrlplane's V1 handlers allow: an operator's `requeue` of a failed job queues it
    again, and its next claim is attempt N+1 in `jobs attempts`, on both databases."""
    agent = live_server.create_agent("retried")
    job = live_server.enqueue(agent)["id"]
    first, _ = claim_and_fail(live_server, agent, job, 3)
    claim_id = json.loads(first.stdout)["claimId"]
    assert live_server.get_job(job)["status"] == "failure"
    requeued = jac(live_server, "requeue", job)
    assert requeued.returncode == 0, requeued.stderr
    assert live_server.get_job(job)["status"] == "queued"
    again = jac(live_server, "claim", "-o", "json", agent=agent)  # the next job: this one
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["id"], json.loads(again.stdout)["attempt"]) == (job, 2)
    shown = jac(live_server, "jobs", "attempts", job, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    attempts = json.loads(shown.stdout)
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "completed"), (2, None)]
    assert attempts[1]["claimId"] == json.loads(again.stdout)["claimId"] != claim_id
    piped = jac(live_server, "jobs", "attempts", job)
    rows = [line.split("\t")[:2] for line in piped.stdout.splitlines()]
    assert rows == [["1", "completed"], ["2", ""]]


def _server(server: LiveServer, *args: str) -> Ran:
    return jac(server, "server", *args, "-o", "json", "--database", server.database_url)


def test_every_slug_the_server_prints_works_as_workspace(live_server: LiveServer) -> None:
    """The server's slug rule was once wider than the client's (``--slug team.a`` was
    accepted, then ``--workspace team.a`` exited 2). Both follow
    ctrlplane's Workspace.slug now, ``^[a-z0-9-]+$``, 3-50 characters: whatever `server
    init` or `create-workspace` prints (given, derived, padded, made unique) resolves."""
    printed = []
    init = _server(live_server, "init", "--slug", "team-a")
    assert init.returncode == 0, init.stderr
    printed.append(json.loads(init.stdout))
    for name in ("QA", "Staging EU!", "staging eu"):  # padded; derived; made unique
        made = _server(live_server, "create-workspace", name)
        assert made.returncode == 0, made.stderr
        printed.append(json.loads(made.stdout))
    slugs = [p["slug"] for p in printed]
    assert slugs[:3] == ["team-a", "qa-ws", "staging-eu"], slugs
    assert slugs[3].startswith("staging-eu-")
    for workspace in printed:
        key = {"JOBAGENTCTL_API_KEY": workspace["apiKey"]}
        ran = jac(live_server, "--workspace", workspace["slug"], "agents", "list", env=key)
        assert ran.returncode == 0, (workspace["slug"], ran.stderr)
        by_env = jac(
            live_server,
            "agents",
            "list",
            env={**key, "JOBAGENTCTL_WORKSPACE": workspace["slug"]},
        )
        assert by_env.returncode == 0, (workspace["slug"], by_env.stderr)
    # What the client would refuse, the server refuses too (usage error, nothing created).
    for bad in ("team.a", "under_score", "ab", "x" * 51):
        refused = _server(live_server, "create-workspace", "other", "--slug", bad)
        assert refused.returncode == 2, (bad, refused.stderr)
        assert "3-50 characters" in refused.stderr
        client = jac(live_server, "--workspace", bad, "agents", "list")
        assert client.returncode == 2, (bad, client.stderr)


def test_run_report_on_a_deleted_job_is_job_gone_on_our_server(
    live_server: LiveServer, tmp_path: Path
) -> None:
    agent = live_server.create_agent("vanishing")
    job = live_server.enqueue(agent)["id"]
    script = f"touch {tmp_path}/ready; while [ ! -e {tmp_path}/go ]; do sleep 0.05; done"
    proc = subprocess.Popen(
        cli_command("run", "--", "sh", "-c", script),
        env=env_for(live_server, agent),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: (tmp_path / "ready").exists(), what="the command to start")
        # The job is deleted under the running command (an operator, a workspace clean-up).
        mark = "?" if live_server.database_url.startswith("sqlite") else "%s"
        for table, column in (("job_claim", "job_id"), ("job_attempt", "job_id"), ("job", "id")):
            sql(live_server.database_url, f"DELETE FROM {table} WHERE {column} = {mark}", [job])
        (tmp_path / "go").touch()
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 5, err
    assert "gone" in err and "lease lost" not in err
