"""README's bash agent (claim, heartbeat, complete), run verbatim against a real server.

The script is read from README.md at test time. Its stand-in ``deploy.sh`` records every deploy
and leaves a ``sleep`` behind in its process group; each test asserts what the README promises:
the result reported once (``LOG_URL`` unset or set), ``./agent.sh | cat`` ending when the script
does, a server restart mid-job survived (SQLite and PostgreSQL), a lost lease stopping the whole
work, an interrupted or killed script leaving nothing running, and no job deployed twice.
"""

from __future__ import annotations

import json
import signal

import pytest

from tests.fixtures.waiting import wait_until

from .conftest import Proc, Sandbox, needs
from .recipes import block

AGENT = "README.md › A bash agent: claim, heartbeat, complete"

pytestmark = pytest.mark.usefixtures("_tools")


@pytest.fixture
def _tools() -> None:
    needs("bash", "jq")


def _agent(box: Sandbox, **env: str) -> Proc:
    return box.bash(block(AGENT).text, **env)


def _completed(box: Sandbox, job_id: str) -> list[str]:
    return [a["outcome"] for a in box.attempts(job_id)]


def test_it_deploys_once_reports_and_its_pipe_closes_when_it_exits(sandbox: Sandbox) -> None:
    """The old recipe died under `set -u` on the unset LOG_URL after the deploy (the job was
    deployed again), and its heartbeat `sleep` held stdout for lease/3 after it exited."""
    job = sandbox.enqueue(jobAgentConfig={"version": "1.2.3"})
    sandbox.release()
    # A long lease: a heartbeat sleep left behind would hold the pipe for 40 s.
    agent = _agent(sandbox, JOBAGENTCTL_LEASE_SECONDS="120")
    assert agent.wait() == 0, agent.output()
    # `./agent.sh | cat`: the reader sees EOF as soon as nothing holds the pipe any more.
    assert agent.stdout_closed.wait(15), "something still holds the script's stdout"
    sandbox.no_leftovers()
    assert 'deploying {"version":"1.2.3"}' in agent.stdout
    assert sandbox.job(job)["status"] == "successful"
    assert _completed(sandbox, job) == ["completed"]
    assert len(sandbox.deploys()) == 1


def test_a_failed_deploy_is_reported_with_its_exit_code_and_log_link(sandbox: Sandbox) -> None:
    job = sandbox.enqueue()
    sandbox.release()
    agent = _agent(sandbox, DEPLOY_EXIT="3", LOG_URL="https://ci.example.com/runs/42")
    assert agent.wait() == 3, agent.output()
    got = sandbox.job(job)
    assert (got["status"], got["message"]) == ("failure", "exit code 3")
    assert json.loads(got["metadata"]["ctrlplane/links"]) == {
        "Logs": "https://ci.example.com/runs/42"
    }
    sandbox.no_leftovers()


@pytest.mark.parametrize("database_url", ["sqlite", "postgres"], indirect=True)
def test_a_server_restart_mid_job_is_survived_and_the_job_deployed_once(
    own_sandbox: Sandbox,
) -> None:
    """One transient heartbeat failure (exit 3) used to kill the script and orphan deploy.sh;
    the job went back to the queue and was deployed again."""
    box = own_sandbox
    job = box.enqueue()
    # Heartbeats every 15 s; the lease (45 s) leaves ~30 s for the server to come back (a
    # cold start on two busy cores takes that long).
    agent = _agent(box, JOBAGENTCTL_LEASE_SECONDS="45")
    wait_until(box.deploys, what="the deploy to start")
    box.server.stop()
    # Down for at least 3 s, and until a heartbeat has failed against the stopped server.
    wait_until(
        lambda: "cannot reach the server" in agent.stderr, what="a heartbeat to fail", timeout=30
    )
    box.server.start()
    box.release()
    assert agent.wait() == 0, agent.output()
    assert box.job(job)["status"] == "successful"
    assert _completed(box, job) == ["completed"]
    assert len(box.deploys()) == 1
    box.no_leftovers()


def test_a_lost_lease_stops_the_whole_work_and_reports_nothing(sandbox: Sandbox) -> None:
    job = sandbox.enqueue()
    agent = _agent(sandbox, JOBAGENTCTL_LEASE_SECONDS="6")
    wait_until(sandbox.deploys, what="the deploy to start")
    status, _ = sandbox.server.request("PUT", f"jobs/{job}/status", {"status": "cancelled"})
    assert status == 202, status
    assert agent.wait() == 75, agent.output()
    assert "the lease was lost" in agent.stderr
    sandbox.no_leftovers()  # deploy.sh and the sleep it left in its group
    assert sandbox.job(job)["status"] == "cancelled"
    assert len(sandbox.deploys()) == 1


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_agent_stops_the_work_and_leaves_nothing(
    sandbox: Sandbox, signum: int, code: int
) -> None:
    job = sandbox.enqueue()
    agent = _agent(sandbox)
    wait_until(sandbox.deploys, what="the deploy to start")
    agent.proc.send_signal(signum)
    assert agent.wait() == code, agent.output()
    sandbox.no_leftovers()
    # Not reported: the job waits for its lease to run out, then the reaper re-queues it.
    assert sandbox.job(job)["status"] == "inProgress"


def test_a_killed_agent_does_not_leave_the_work_running(sandbox: Sandbox) -> None:
    sandbox.enqueue()
    agent = _agent(sandbox, JOBAGENTCTL_LEASE_SECONDS="15")
    wait_until(sandbox.deploys, what="the deploy to start")
    agent.proc.kill()  # the script only: its heartbeat loop notices at its next beat
    agent.wait()
    sandbox.no_leftovers()
