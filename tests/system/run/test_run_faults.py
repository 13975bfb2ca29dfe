"""`jobagentctl run` through server outages and an operator's cancel."""

from __future__ import annotations

import time

import pytest

from tests.fixtures.waiting import wait_until

from .runs import Harness

sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

WAIT_FOR_GO = "touch ready; while [ ! -e go ]; do sleep 0.05; done; exit 0"
TRAP_STOP = (
    "trap 'cat \"$JOBAGENTCTL_STOP_REASON_FILE\" > reason; exit 0' TERM; "
    "touch ready; while :; do sleep 0.05; done"
)


@sqlite_only
def test_a_server_outage_shorter_than_the_lease_is_ridden_out(own_harness: Harness) -> None:
    server = own_harness.server
    job_id = own_harness.enqueue()
    # A 15 s lease heartbeats every ~5 s: the outage below (one failed heartbeat, then a
    # restart) stays well inside it even on a slow machine.
    run = own_harness.start(["--lease-seconds", "15"], ["sh", "-c", WAIT_FOR_GO])
    wait_until((run.workdir / "ready").exists, what="the child to start")
    server.stop()
    wait_until(lambda: "heartbeat failed" in run.stderr(), what="a heartbeat to fail")
    server.start()
    (run.workdir / "go").touch()
    assert run.wait() == 0, run.stderr()
    [record] = run.report()
    assert record["heartbeatFailures"] >= 1
    assert (record["status"], record["reported"]) == ("successful", True)
    assert own_harness.job(job_id)["status"] == "successful"
    assert [a["outcome"] for a in own_harness.attempts(job_id)] == ["completed"]


@sqlite_only
def test_a_server_outage_longer_than_the_lease_loses_it(own_harness: Harness) -> None:
    server = own_harness.server
    job_id = own_harness.enqueue()
    run = own_harness.start(["--lease-seconds", "2"], ["sh", "-c", TRAP_STOP])
    wait_until((run.workdir / "ready").exists, what="the child to start")
    server.stop()
    assert run.wait() == 75, run.stderr()
    assert (run.workdir / "reason").read_text() == "lease_lost\n"
    assert run.report()[0]["reported"] is False
    # Back up, the server's reaper finds the claim expired: the job is queued, not reported.
    server.start()
    wait_until(lambda: own_harness.job(job_id)["status"] == "queued", what="the reaper to requeue")


def test_cancel_stops_the_child_within_a_heartbeat_interval(harness: Harness) -> None:
    job_id = harness.enqueue()
    run = harness.start(["--lease-seconds", "3"], ["sh", "-c", TRAP_STOP])  # beats every ≤ 1 s
    wait_until((run.workdir / "ready").exists, what="the child to start")
    cancel = harness.server.cli("cancel", job_id)
    assert cancel.returncode == 0, cancel.stderr
    cancelled_at = time.monotonic()
    wait_until((run.workdir / "reason").exists, what="the child to get the stop signal")
    # One heartbeat interval (1 s), plus generous slack for two busy cores.
    assert time.monotonic() - cancelled_at < 1.0 + 4.0
    assert (run.workdir / "reason").read_text() == "cancelled\n"
    assert run.wait() == 143, run.stderr()
    job = harness.job(job_id)
    assert job["status"] == "cancelled"
    assert job.get("message") is None  # nothing reported over the cancel (absent: omitted)
    assert [a["outcome"] for a in harness.attempts(job_id)] == ["cancelled"]
    assert run.report()[0]["status"] == "cancelled"
