"""`jobagentctl run` keeps its lease with heartbeats, on SQLite and PostgreSQL (a server each).

Crashed and frozen agents are in test_run_crash.py; server outages in test_run_faults.py.
"""

from __future__ import annotations

from .runs import Harness

LEASE = "2"  # seconds: heartbeats every ~1 s, the reaper sweeps every 0.2 s


def test_a_job_longer_than_several_leases_succeeds_on_heartbeats(own_harness: Harness) -> None:
    job_id = own_harness.enqueue()
    # 6 s of work is three lease lengths: without heartbeats the reaper would requeue it.
    run = own_harness.start(["--lease-seconds", LEASE], ["sleep", "6"])
    assert run.wait() == 0, run.stderr()
    [record] = run.report()
    assert record["heartbeats"] >= 2
    assert record["status"] == "successful"
    assert own_harness.job(job_id)["status"] == "successful"
    [attempt] = own_harness.attempts(job_id)  # never reaped, never re-claimed
    assert attempt["outcome"] == "completed"
