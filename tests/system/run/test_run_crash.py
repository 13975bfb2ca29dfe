"""A crashed or frozen agent loses its lease: the job is re-run, and the old attempt is fenced.

SIGKILL runs on SQLite and PostgreSQL (a server each); the frozen agent shares a SQLite server.
"""

from __future__ import annotations

import signal

from tests.fixtures.waiting import wait_until

from .runs import Harness, kill_group_of

LEASE = "2"  # seconds: heartbeats every ~1 s, the reaper sweeps every 0.2 s


def test_sigkill_of_the_agent_requeues_the_job_for_attempt_2(own_harness: Harness) -> None:
    job_id = own_harness.enqueue()
    first = own_harness.start(
        ["--lease-seconds", LEASE],
        ["sh", "-c", "echo $$ > child.pid; while :; do sleep 0.05; done"],
        name="first",
    )
    pid_file = first.workdir / "child.pid"
    try:
        wait_until(pid_file.exists, what="the first child to start")
        first.signal(signal.SIGKILL)
        assert first.wait() == -signal.SIGKILL
    finally:
        # The child lives in its own session: a SIGKILLed agent cannot take it along.
        kill_group_of(pid_file)
    wait_until(lambda: own_harness.job(job_id)["status"] == "queued", what="the reaper to requeue")
    second = own_harness.start(
        ["--lease-seconds", LEASE],
        ["sh", "-c", 'echo "$JOBAGENTCTL_ATTEMPT" > attempt'],
        name="second",
    )
    assert second.wait() == 0, second.stderr()
    assert (second.workdir / "attempt").read_text() == "2\n"
    assert second.report()[0]["attempt"] == 2
    outcomes = [(a["attempt"], a["outcome"]) for a in own_harness.attempts(job_id)]
    assert outcomes == [(1, "expired"), (2, "completed")]


def test_an_agent_frozen_past_its_lease_stops_the_child_and_cannot_report(
    harness: Harness,
) -> None:
    job_id = harness.enqueue()
    script = (
        'echo "$JOBAGENTCTL_CLAIM_ID" > claim; '
        "trap 'cat \"$JOBAGENTCTL_STOP_REASON_FILE\" > reason; exit 0' TERM; "
        "touch ready; while :; do sleep 0.05; done"
    )
    run = harness.start(["--lease-seconds", LEASE], ["sh", "-c", script])
    wait_until((run.workdir / "ready").exists, what="the child to start")
    run.signal(signal.SIGSTOP)
    try:
        # Frozen, it cannot heartbeat: the lease expires and the reaper requeues the job.
        wait_until(lambda: harness.job(job_id)["status"] == "queued", what="the reaper to requeue")
    finally:
        run.signal(signal.SIGCONT)
    assert run.wait() == 75, run.stderr()
    assert (run.workdir / "reason").read_text() == "lease_lost\n"
    assert "lease lost" in run.stderr()
    [record] = run.report()
    assert (record["reason"], record["reported"], record["status"]) == ("lease_lost", False, None)
    # The stale attempt is fenced off: its claim id can no longer set a status.
    old_claim = (run.workdir / "claim").read_text().strip()
    status, body = harness.server.request(
        "PUT", f"jobs/{job_id}/status", {"status": "successful", "claimId": old_claim}
    )
    assert status == 409, body
    assert harness.job(job_id)["status"] == "queued"
