"""Gateway mode: what V1 alone cannot do. A SIGKILLed agent's job goes back to queued in
ctrlplane and another agent process completes it; a cancel made in ctrlplane stops `run`;
an operator's requeue through the gateway waits for the holder (no overlap). Both databases."""

from __future__ import annotations

import os
import signal
import subprocess

from tests.fixtures.cli import cli_command, run_cli
from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn
from tests.fixtures.waiting import wait_until
from tests.system.gateway.conftest import GatewayServer


def _run(
    gateway: GatewayServer, agent: str, *command: str, lease: int = 2
) -> subprocess.Popen[bytes]:
    """``jobagentctl run`` as an agent host runs it, in its own session (killable as one)."""
    return subprocess.Popen(
        cli_command("run", "--lease-seconds", str(lease), "--wait", "30s", "--", *command),
        env=gateway.agent_env(agent),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _attempts(gateway: GatewayServer, job: str) -> list[tuple[int, str | None]]:
    status, attempts = gateway.request("GET", f"jobs/{job}/attempts")
    assert status == 200, attempts
    return [(a["attempt"], a["outcome"]) for a in attempts]


def test_sigkilled_agent_job_is_queued_again_upstream_and_completed_by_another(
    gateway: GatewayServer, ctrlplane: CtrlplaneStandIn
) -> None:
    agent = ctrlplane.add_agent("pull")
    job = ctrlplane.seed_job(agent)
    first = _run(gateway, agent, "sleep", "300")
    try:
        wait_until(lambda: ctrlplane.job(job).status == "in_progress", what="claimed upstream")
        os.killpg(first.pid, signal.SIGKILL)  # the agent host dies: nobody heartbeats
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    # The lease (2 s) runs out, the gateway's reaper sends the job back to queued upstream.
    wait_until(lambda: ctrlplane.job(job).status == "queued", what="requeued in ctrlplane")
    assert _attempts(gateway, job) == [(1, "expired")]

    ran = run_cli(
        "run", "--lease-seconds", "5", "--wait", "30s", "--", "true", env=gateway.agent_env(agent)
    )
    assert ran.returncode == 0, ran.stderr
    assert ctrlplane.job(job).status == "successful"
    assert _attempts(gateway, job) == [(1, "expired"), (2, "completed")]


def test_a_cancel_made_in_ctrlplane_stops_run(
    gateway: GatewayServer, ctrlplane: CtrlplaneStandIn
) -> None:
    agent = ctrlplane.add_agent("pull")
    job = ctrlplane.seed_job(agent)
    proc = _run(gateway, agent, "sleep", "300", lease=30)
    try:
        wait_until(lambda: ctrlplane.job(job).status == "in_progress", what="claimed upstream")
        with ctrlplane.state.lock:  # cancelled in ctrlplane's UI: the gateway is not told
            ctrlplane.state.jobs[job].status = "cancelled"
        # The sync (1 s here, after the claim settled) ends the claim; the heartbeat's 409
        # with jobStatus cancelled stops the command: exit 143.
        assert proc.wait(60) == 143, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert ctrlplane.job(job).status == "cancelled"  # nothing reported over it
    assert _attempts(gateway, job) == [(1, "cancelled")]


def test_an_operator_requeue_through_the_gateway_waits_for_the_holder(
    gateway: GatewayServer, ctrlplane: CtrlplaneStandIn
) -> None:
    agent = ctrlplane.add_agent("pull")
    job = ctrlplane.seed_job(agent)
    status, claimed = gateway.request(
        "POST", f"job-agents/{agent}/claim", {"leaseSeconds": 3, "waitSeconds": 0}
    )
    assert status == 200, claimed
    status, body = gateway.request("PUT", f"jobs/{job}/status", {"status": "queued"})
    assert status == 202, body
    # The holder still runs: ctrlplane does not list the job as queued yet.
    assert ctrlplane.job(job).status == "in_progress"
    status, beat = gateway.request("POST", f"jobs/{job}/heartbeat", {"claimId": claimed["claimId"]})
    assert status == 409 and beat["details"]["jobStatus"] == "queued", beat
    # Once its lease ran out (it never let go), the requeue reaches ctrlplane.
    wait_until(lambda: ctrlplane.job(job).status == "queued", what="requeued in ctrlplane")
    status, again = gateway.request(
        "POST", f"job-agents/{agent}/claim", {"leaseSeconds": 30, "waitSeconds": 5}
    )
    assert status == 200 and again["attempt"] == 2, again
