"""README's bash agent (claim, heartbeat, complete), run verbatim against a real server.

The script is read from README.md at test time. Its stand-in ``deploy.sh`` records every deploy
and leaves a ``sleep`` behind in its process group; each test asserts what the README promises:
the result reported once (``LOG_URL`` unset or set), ``./agent.sh | cat`` ending when the script
does, a server restart mid-job survived (SQLite and PostgreSQL), a lost lease stopping the whole
work, a frozen server's lease honoured (the work gone before the server's expiry), a claim
without a lease run without heartbeats, an interrupted or killed script leaving nothing running
(its temporary directory included), and no job deployed twice.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn
from tests.fixtures.processes import TOKEN_VARIABLE, new_token
from tests.fixtures.waiting import wait_until

from .conftest import DEPLOY_SH, Proc, Sandbox, needs
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


def _quiet(agent: Proc) -> None:
    """No job-control notices ("line 80: 1234 Killed  ./deploy.sh …") on the script's stderr."""
    for word in ("Terminated", "Killed"):
        assert word not in agent.stderr, agent.output()


# A deploy.sh that ignores SIGTERM (and so does the sleep it leaves in its group): only SIGKILL
# ends its process group. It writes its pid (its group's id: a job-control job's leader).
STUBBORN_DEPLOY_SH = """#!/usr/bin/env bash
trap '' TERM
echo "$JOBAGENTCTL_JOB_ID" >> "$DEPLOY_LOG"
sleep 300 >/dev/null 2>&1 &
echo $$ > "$DEPLOY_PID.tmp" && mv "$DEPLOY_PID.tmp" "$DEPLOY_PID"
while :; do sleep 0.05; done
"""


def _group_alive(pgid: int) -> bool:
    """Any live (non-zombie) process in process group ``pgid``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _claim_expiry(database_url: str, job_id: str) -> float:
    """The claim's expiry as the server stored it (Unix time, from the database's clock),
    read from its SQLite file directly: the server itself is frozen."""
    path = database_url.removeprefix("sqlite:///")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        row = conn.execute(
            "SELECT claim_expires_at FROM job_claim WHERE job_id = ?", (job_id,)
        ).fetchone()
    finally:
        conn.close()
    assert row is not None, f"no claim row for job {job_id}"
    return float(row[0])


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
    _quiet(agent)
    sandbox.no_leftovers()  # deploy.sh and the sleep it left in its group
    assert sandbox.job(job)["status"] == "cancelled"
    assert len(sandbox.deploys()) == 1


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process groups from /proc")
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_frozen_server_does_not_keep_the_work_past_the_lease(own_sandbox: Sandbox) -> None:
    """Issue 12, gap A: with the server frozen (SIGSTOP) each heartbeat used to hang for
    JOBAGENTCTL_TIMEOUT (10 s), the deadline was checked only between beats, and the stop
    gave SIGTERM 10 s more: a deploy that ignores SIGTERM ran ~18 s past the server's expiry.
    Now its whole group is gone before the expiry the server stored."""
    box = own_sandbox
    box.write("deploy.sh", STUBBORN_DEPLOY_SH, executable=True)
    pid_file = box.dir / "deploy.pid"
    job = box.enqueue()
    # 10 s: heartbeats every 3 s, the stop at 7 s after the last answered one (SIGKILL at 9 s).
    agent = _agent(box, JOBAGENTCTL_LEASE_SECONDS="10", DEPLOY_PID=str(pid_file))
    wait_until(pid_file.exists, what="the deploy to start")
    pgid = int(pid_file.read_text())
    assert os.getpgid(pgid) == pgid, "deploy.sh leads a process group of its own"
    # One heartbeat answered after the claim, so the freeze cuts a running heartbeat loop.
    wait_until(
        lambda: any(
            c["jobId"] == job and c.get("lastHeartbeatAt")
            for c in box.server.request("GET", "job-claims")[1]["items"]
        ),
        what="a heartbeat",
    )
    assert box.server.proc is not None
    os.kill(box.server.proc.pid, signal.SIGSTOP)
    try:
        expiry = _claim_expiry(box.server.database_url, job)
        assert _group_alive(pgid), "the work is running when the server freezes"
        # Wait past the expiry (with headroom): the group must be gone before it.
        gone_at = wait_until(
            lambda: None if _group_alive(pgid) else time.time(),
            what="the work's process group to be empty",
            timeout=max(expiry - time.time(), 0) + 30,
            interval=0.05,
        )
        assert gone_at <= expiry + 0.5, (
            f"the work ran {gone_at - expiry:.1f}s past the server's expiry\n{agent.output()}"
        )
    finally:
        os.kill(box.server.proc.pid, signal.SIGCONT)
    assert agent.wait() == 75, agent.output()
    assert "the lease was lost" in agent.stderr
    _quiet(agent)
    box.no_leftovers()
    assert len(box.deploys()) == 1


def test_a_claim_without_a_lease_runs_without_heartbeats(sandbox: Sandbox) -> None:
    """Issue 12, gap B: with no lease (asked for 0 here; ctrlplane grants none) the deadline
    used to be in the past: the deploy was killed at once and the job stayed inProgress. Now
    the work runs to its end and is reported (no claim id, no heartbeat)."""
    job = sandbox.enqueue()
    agent = _agent(sandbox, JOBAGENTCTL_LEASE_SECONDS="0")
    wait_until(sandbox.deploys, what="the deploy to start")
    # The old script stopped the work at once; give it time to do so, then let it finish.
    time.sleep(3)
    assert agent.proc.poll() is None, agent.output()
    sandbox.release()
    assert agent.wait() == 0, agent.output()
    assert "deployed" in agent.stdout
    got = sandbox.job(job)
    assert got["status"] == "successful"
    (attempt,) = sandbox.attempts(job)
    assert attempt["claimId"] is None  # an unleased claim: nothing heartbeat it
    assert len(sandbox.deploys()) == 1
    sandbox.no_leftovers()


def test_against_ctrlplane_the_job_runs_without_a_lease(
    ctrlplane: CtrlplaneStandIn, tmp_path: Path
) -> None:
    """ctrlplane has no leases (its claims are V1): the same script runs the job without
    heartbeats and reports it."""
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent, job_agent_config={"version": "2.0"})
    workdir = tmp_path / "ctrlplane-agent"
    workdir.mkdir()
    (workdir / "release").touch()
    env = {
        **ctrlplane.base_env(),
        **ctrlplane.env(),
        "JOBAGENTCTL_AGENT": agent,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(workdir / "home"),
        "DEPLOY_LOG": str(workdir / "deploys.log"),
        "RELEASE": str(workdir / "release"),
        TOKEN_VARIABLE: new_token(),
    }
    box = Sandbox.bare(workdir, env)
    try:
        box.write("deploy.sh", DEPLOY_SH, executable=True)
        agent_run = box.bash(block(AGENT).text)
        assert agent_run.wait() == 0, agent_run.output()
        assert 'deploying {"version":"2.0"}' in agent_run.stdout
        assert "no lease support" in agent_run.stderr  # said by `claim`, once
        assert ctrlplane.job(job).status == "successful"
        assert not [path for _, path, _ in ctrlplane.requests() if path.endswith("/heartbeat")]
        box.no_leftovers()
    finally:
        box.close()


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_agent_stops_the_work_and_leaves_nothing(
    sandbox: Sandbox, signum: int, code: int
) -> None:
    job = sandbox.enqueue()
    tmp = sandbox.dir / "tmp"
    tmp.mkdir()
    agent = _agent(sandbox, TMPDIR=str(tmp))
    wait_until(sandbox.deploys, what="the deploy to start")
    assert list(tmp.iterdir()), "the script's mktemp -d directory"
    agent.proc.send_signal(signum)
    # The stop takes at most the grace (10 s); 60 s leaves the diagnosis to Proc.wait, before
    # pytest-timeout's 120 s would cut it off.
    assert agent.wait(60) == code, agent.output()
    sandbox.no_leftovers()
    assert not list(tmp.iterdir()), "the temporary directory is removed"
    _quiet(agent)
    # Not reported: the job waits for its lease to run out, then the reaper re-queues it.
    assert sandbox.job(job)["status"] == "inProgress"


def test_a_killed_agent_does_not_leave_the_work_running(sandbox: Sandbox) -> None:
    sandbox.enqueue()
    agent = _agent(sandbox, JOBAGENTCTL_LEASE_SECONDS="15")
    wait_until(sandbox.deploys, what="the deploy to start")
    agent.proc.kill()  # the script only: its heartbeat loop notices at its next beat
    agent.wait()
    sandbox.no_leftovers()
