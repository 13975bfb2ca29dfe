"""The supervisor end to end with real child processes and a scripted fake API client.

(tests/system/run/ does the same against a real server; these pin down the decisions quickly.)
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from jobagentctl.errors import (
    AuthError,
    ClaimLost,
    NotClaimable,
    NotFound,
    ServerUnavailable,
)
from jobagentctl.models import ClaimedJob, JobStatus
from jobagentctl.supervisor import Log, Supervisor
from jobagentctl.supervisor.claiming import FIRST_POLL_FRACTION
from jobagentctl.supervisor.process.child import enforcement_window
from tests.fixtures.fake_client import FakeClient, claimed_job
from tests.fixtures.supervisor import DEADLINE, options, reports, run, sh, trap_reason, when

# --- results and reports -------------------------------------------------------------------


def test_exit_0_reports_successful_with_the_claim_id(tmp_path: Path) -> None:
    job = claimed_job()
    client = FakeClient(jobs=[job])
    code, _, records = run(client, options(tmp_path, ["true"]))
    assert code == 0
    assert reports(client) == [(JobStatus.SUCCESSFUL, None, job.claim_id)]
    [record] = records
    assert record["jobId"] == str(job.id)
    assert record["claimId"] == str(job.claim_id)
    assert record["attempt"] == 1
    assert record["status"] == "successful"
    assert record["exitCode"] == 0
    assert record["signal"] is None
    assert record["reason"] is None
    assert record["reported"] is True
    assert isinstance(record["startedAt"], str) and record["startedAt"].endswith("Z")
    assert client.closed >= 2  # the main client and the job's heartbeat client


def test_exit_code_passes_through_with_the_output_tail(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    client = FakeClient(jobs=[claimed_job()])
    code, _, records = run(
        client, options(tmp_path, sh("echo line1; echo 'd€f' >&2; echo line3; exit 3"))
    )
    assert code == 3
    status, message, _ = reports(client)[0]
    assert status is JobStatus.FAILURE
    assert message is not None and message.startswith("exit code 3\n")
    # Both streams are in the tail; between two pipes, arrival order is the kernel's call.
    lines = message.splitlines()[1:]
    assert sorted(lines) == ["d€f", "line1", "line3"]
    assert lines.index("line1") < lines.index("line3")
    assert records[0]["exitCode"] == 3
    out, err = capfd.readouterr()
    assert out == "line1\nline3\n"  # stdout and stderr stay separate
    assert err == "d€f\n"


def test_the_tail_is_utf8_safe(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job()])
    # "ab€cd€" is 10 bytes; the last 6 are "d€" plus a partial "€" before them: never split.
    code, _, _ = run(client, options(tmp_path, sh("printf 'ab€cd€'; exit 1"), output_tail_bytes=6))
    assert code == 1
    assert reports(client)[0][1] == "exit code 1\ncd€"


def test_killed_by_a_signal_is_128_plus_n(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job()])
    code, _, records = run(client, options(tmp_path, sh("kill -USR1 $$")))
    assert code == 128 + signal.SIGUSR1
    status, message, _ = reports(client)[0]
    assert status is JobStatus.FAILURE
    assert message == f"killed by signal {int(signal.SIGUSR1)} (SIGUSR1)"
    assert (records[0]["exitCode"], records[0]["signal"]) == (None, int(signal.SIGUSR1))


def test_missing_command_is_127_and_reported(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job()])
    code, _, records = run(client, options(tmp_path, [str(tmp_path / "missing")]))
    assert code == 127
    status, message, _ = reports(client)[0]
    assert status is JobStatus.FAILURE
    assert message == f"command not found: {tmp_path / 'missing'}"
    assert records[0]["exitCode"] == 127


def test_timeout_stops_the_child_and_reports_failure(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job()])
    code, _, records = run(client, options(tmp_path, sh(trap_reason(tmp_path)), timeout=0.5))
    assert code == 124
    assert (tmp_path / "reason").read_text() == "timeout\n"
    status, message, _ = reports(client)[0]
    assert status is JobStatus.FAILURE
    assert message is not None and message.startswith("timed out after 0.5s")
    assert records[0]["reason"] == "timeout"


def test_a_child_ignoring_the_stop_signal_is_killed_after_grace(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job()])
    started = time.monotonic()
    code, logs, records = run(
        client,
        options(tmp_path, sh("trap '' TERM; sleep 60"), timeout=0.3, grace=0.5),
    )
    assert code == 124
    assert time.monotonic() - started < DEADLINE
    assert any("SIGKILL" in line for line in logs)
    assert records[0]["reason"] == "timeout"


def test_a_grandchild_holding_stdout_does_not_hold_the_run(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job()])
    started = time.monotonic()
    code, _, _ = run(
        client, options(tmp_path, sh(f"sleep 60 & echo $! > {tmp_path}/gc; exit 0"), grace=0.5)
    )
    elapsed = time.monotonic() - started
    assert code == 0
    assert elapsed < 30  # not the grandchild's 60 s
    gc = int((tmp_path / "gc").read_text())
    assert _gone(gc)


def _gone(pid: int) -> bool:
    """Dead (or a zombie waiting for a reaper that is not us)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


def test_no_capture_hands_over_the_descriptors(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    client = FakeClient(jobs=[claimed_job()])
    code, _, _ = run(client, options(tmp_path, sh("echo out; echo err >&2; exit 2"), capture=False))
    assert code == 2
    assert reports(client)[0][1] == "exit code 2"  # no tail without capture
    out, err = capfd.readouterr()
    assert (out, err) == ("out\n", "err\n")


def test_report_retries_transient_failures(tmp_path: Path) -> None:
    def flaky(n: int) -> None:
        if n < 3:
            raise ServerUnavailable("connection refused")

    client = FakeClient(jobs=[claimed_job()], on_update_status=flaky)
    code, _, records = run(client, options(tmp_path, ["true"]))
    assert code == 0
    assert len(client.named("update_status")) == 3
    assert records[0]["reported"] is True


def test_report_gives_up_with_125_after_the_bound(tmp_path: Path) -> None:
    def down(_: int) -> None:
        raise ServerUnavailable("connection refused")

    client = FakeClient(jobs=[claimed_job()], on_update_status=down)
    code, _, records = run(client, options(tmp_path, ["true"], report_timeout=1.0))
    assert code == 125
    assert len(client.named("update_status")) >= 2
    assert (records[0]["reported"], records[0]["status"]) == (False, None)


def test_report_refused_for_good_is_125_at_once(tmp_path: Path) -> None:
    def refused(_: int) -> None:
        raise AuthError("key revoked")

    client = FakeClient(jobs=[claimed_job()], on_update_status=refused)
    code, _, _ = run(client, options(tmp_path, ["true"]))
    assert code == 125
    assert len(client.named("update_status")) == 1


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ClaimLost("gone", details={"jobStatus": "queued"}), 75),
        (ClaimLost("gone", details={"jobStatus": "cancelled"}), 143),
        (NotFound("Job not found", status=404), 5),  # deleted: job gone, not lease lost
    ],
)
def test_report_after_the_claim_went_is_lease_lost_cancelled_or_job_gone(
    tmp_path: Path, error: Exception, code: int
) -> None:
    def refuse(_: int) -> None:
        raise error

    client = FakeClient(jobs=[claimed_job()], on_update_status=refuse)
    got, _, [record] = run(client, options(tmp_path, ["true"]))
    assert got == code
    verdict = {75: "lease_lost", 143: "cancelled", 5: "job_gone"}[code]
    assert (record["verdict"], record["reported"]) == (verdict, False)


def test_an_unleased_v1_claim_whose_job_is_gone_at_the_report_is_job_gone(
    tmp_path: Path,
) -> None:
    def gone(_: int) -> None:
        raise NotFound("Job not found", status=404)

    client = FakeClient(jobs=[claimed_job(leased=False)], on_update_status=gone)
    code, logs, [record] = run(client, options(tmp_path, sh("exit 3")))
    assert (code, record["verdict"], record["exitCode"]) == (5, "job_gone", 3)
    assert client.named("heartbeat") == []
    assert any("is gone" in line for line in logs)


def test_a_heartbeat_404_stops_the_command_as_job_gone(tmp_path: Path) -> None:
    def gone(_: int) -> None:
        raise NotFound("no such job", status=404)

    client = FakeClient(jobs=[claimed_job(lease_seconds=3)], on_heartbeat=gone)
    code, _, [record] = run(client, options(tmp_path, sh(trap_reason(tmp_path))))
    assert (code, record["verdict"], record["reason"]) == (5, "job_gone", "lease_lost")
    assert (tmp_path / "reason").read_text() == "lease_lost\n"
    assert reports(client) == []


# --- claiming ------------------------------------------------------------------------------


def test_nothing_to_claim_is_7(tmp_path: Path) -> None:
    client = FakeClient()
    code, logs, records = run(client, options(tmp_path, ["true"]))
    assert code == 7
    [record] = records  # without --loop there is always one record: it says why
    assert record["verdict"] == "no_job"
    assert record["jobId"] is None and record["exitCode"] is None
    assert "no job to claim" in logs


def test_a_job_that_is_not_claimable_is_7(tmp_path: Path) -> None:
    def taken() -> ClaimedJob:
        raise NotClaimable("job is inProgress")

    client = FakeClient(on_claim=taken)
    code, _, _ = run(client, options(tmp_path, ["true"], job_id=uuid.uuid4()))
    assert code == 7
    assert len(client.named("claim_job")) == 1


def test_server_down_at_claim_is_125_without_loop(tmp_path: Path) -> None:
    def down() -> ClaimedJob:
        raise ServerUnavailable("connection refused")

    client = FakeClient(on_claim=down)
    code, _, _ = run(client, options(tmp_path, ["true"]))
    assert code == 125


@pytest.mark.parametrize(("lease", "poll"), [(42, 14.0), (600, 30.0), (0, 30.0)])
def test_claim_asks_for_the_lease_and_long_polls_in_bounded_chunks(
    tmp_path: Path, lease: int, poll: float
) -> None:
    # Each long-poll is at most 30 s (signals, --idle-timeout), and at most a third of the
    # lease: the lease counts from the request's send time, and the claim may come at its end.
    client = FakeClient(jobs=[claimed_job()])
    code, _, _ = run(client, options(tmp_path, ["true"], wait=math.inf, lease_seconds=lease))
    assert code == 0
    [claim] = client.named("claim_next")
    # The process's first long-poll waits a random part of it (agents started together spread).
    assert claim.kwargs["lease_seconds"] == lease
    assert FIRST_POLL_FRACTION * poll <= claim.kwargs["wait"] <= poll


def test_a_claim_that_took_much_of_the_lease_heartbeats_at_once(tmp_path: Path) -> None:
    # The server granted 3 s although we asked for 60, and answered after 2.5 s: counted from
    # the send time, the lease has 0.5 s left. An immediate heartbeat re-anchors it.
    job = claimed_job(lease_seconds=3)

    def slow() -> ClaimedJob:
        time.sleep(2.5)
        return job

    client = FakeClient(on_claim=slow)
    code, _, records = run(client, options(tmp_path, ["sleep", "1"], lease_seconds=60))
    assert code == 0
    assert records[0]["heartbeats"] >= 1
    assert reports(client)[0][0] is JobStatus.SUCCESSFUL


def test_a_claim_gone_before_the_command_starts_never_runs_it(tmp_path: Path) -> None:
    job = claimed_job(lease_seconds=3)

    def slow() -> ClaimedJob:
        time.sleep(1.5)
        return job

    def cancelled(_: int) -> None:
        raise ClaimLost("claim gone", details={"jobStatus": "cancelled"})

    client = FakeClient(on_claim=slow, on_heartbeat=cancelled)
    code, _, records = run(client, options(tmp_path, ["touch", str(tmp_path / "ran")]))
    assert code == 143
    assert not (tmp_path / "ran").exists()
    assert reports(client) == []
    assert records[0]["reason"] == "cancelled"


# --- the lease -------------------------------------------------------------------------------


def test_cancel_stops_the_child_and_reports_nothing(tmp_path: Path) -> None:
    def cancelled(_: int) -> None:
        raise ClaimLost("claim gone", details={"jobStatus": "cancelled"})

    client = FakeClient(jobs=[claimed_job(lease_seconds=3)], on_heartbeat=cancelled)
    code, _, records = run(client, options(tmp_path, sh(trap_reason(tmp_path))))
    assert code == 143
    assert (tmp_path / "reason").read_text() == "cancelled\n"
    assert reports(client) == []
    assert (records[0]["status"], records[0]["reason"]) == ("cancelled", "cancelled")


def test_no_heartbeat_success_before_the_deadline_is_lease_lost(tmp_path: Path) -> None:
    def down(_: int) -> None:
        raise ServerUnavailable("connection refused")

    client = FakeClient(jobs=[claimed_job(lease_seconds=2)], on_heartbeat=down)
    started = time.monotonic()
    code, logs, records = run(client, options(tmp_path, sh(trap_reason(tmp_path))))
    assert code == 75
    # Not before the watchdog's window (the tree is gone *before* the 2 s lease runs out).
    stop_at, _ = enforcement_window(2.0, 0.0, options(tmp_path, ["true"]).grace)
    assert time.monotonic() - started >= stop_at
    assert (tmp_path / "reason").read_text() == "lease_lost\n"
    assert reports(client) == []
    assert records[0]["heartbeatFailures"] >= 1
    assert (records[0]["status"], records[0]["reported"]) == (None, False)
    assert any("lease lost" in line for line in logs)


def test_heartbeats_keep_the_lease(tmp_path: Path) -> None:
    # The fake grants 3 s per heartbeat; the child outlives two leases.
    client = FakeClient(jobs=[claimed_job(lease_seconds=3)])
    code, _, records = run(client, options(tmp_path, ["sleep", "4"]))
    assert code == 0
    assert records[0]["heartbeats"] >= 2
    assert reports(client)[0][0] is JobStatus.SUCCESSFUL


def test_on_lease_lost_continue_lets_the_child_finish_unreported(tmp_path: Path) -> None:
    def lost(_: int) -> None:
        raise ClaimLost("claim gone", details={"jobStatus": "failure"})

    client = FakeClient(jobs=[claimed_job(lease_seconds=3)], on_heartbeat=lost)
    go = tmp_path / "go"
    when(lambda: bool(client.named("heartbeat")), go.touch)
    code, _, records = run(
        client,
        options(
            tmp_path,
            sh(
                f"trap 'touch {tmp_path}/got' TERM; "
                f"while [ ! -e {go} ]; do sleep 0.05; done; exit 0"
            ),
            on_lease_lost="continue",
        ),
    )
    assert code == 75
    assert reports(client) == []
    assert not (tmp_path / "got").exists()  # never signalled
    assert records[0]["reason"] == "lease_lost"


def test_unleased_claim_sends_no_heartbeats(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job(leased=False)])
    code, _, _ = run(client, options(tmp_path, ["true"], lease_seconds=0))
    assert code == 0
    assert client.named("heartbeat") == []
    assert reports(client) == [(JobStatus.SUCCESSFUL, None, None)]


# --- signals -----------------------------------------------------------------------------------


def test_sigterm_stops_the_group_and_releases_the_job(tmp_path: Path) -> None:
    job = claimed_job()
    client = FakeClient(jobs=[job])
    when((tmp_path / "ready").exists, lambda: os.kill(os.getpid(), signal.SIGTERM))
    code, _, records = run(client, options(tmp_path, sh(trap_reason(tmp_path, code=1))))
    assert code == 143
    assert (tmp_path / "got").read_text() == "TERM\n"
    assert (tmp_path / "reason").read_text() == "interrupted\n"
    assert [c.kwargs["claim_id"] for c in client.named("release")] == [job.claim_id]
    assert reports(client) == []
    assert (records[0]["status"], records[0]["reason"]) == ("queued", "interrupted")


def test_a_second_sigint_kills_the_group(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job()])
    ready, got = tmp_path / "ready", tmp_path / "got"
    script = f"trap 'echo INT >> {got}' INT; touch {ready}; while :; do sleep 0.05; done"
    when(ready.exists, lambda: os.kill(os.getpid(), signal.SIGINT))
    when(got.exists, lambda: os.kill(os.getpid(), signal.SIGINT))
    started = time.monotonic()
    code, _, _ = run(client, options(tmp_path, sh(script), grace=120))
    assert code == 130
    assert time.monotonic() - started < 60  # not the 120 s grace
    assert len(client.named("release")) == 1


def test_usr1_is_forwarded_and_does_not_end_the_run(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job()])
    ready, got = tmp_path / "ready", tmp_path / "got"
    script = (
        f"trap 'touch {got}' USR1; touch {ready}; while [ ! -e {got} ]; do sleep 0.05; done; exit 0"
    )
    when(ready.exists, lambda: os.kill(os.getpid(), signal.SIGUSR1))
    code, _, _ = run(client, options(tmp_path, sh(script)))
    assert code == 0
    assert reports(client)[0][0] is JobStatus.SUCCESSFUL


# --- --loop ------------------------------------------------------------------------------------


def test_loop_runs_jobs_until_max_jobs_and_appends_reports(tmp_path: Path) -> None:
    jobs = [claimed_job(), claimed_job(), claimed_job()]
    client = FakeClient(jobs=list(jobs))
    code, _, records = run(
        client, options(tmp_path, sh("exit $JOBAGENTCTL_ATTEMPT"), loop=True, max_jobs=2)
    )
    assert code == 0
    assert [r["jobId"] for r in records] == [str(jobs[0].id), str(jobs[1].id)]
    assert [r["exitCode"] for r in records] == [1, 1]
    assert len(client.jobs) == 1  # the third was never claimed


def test_loop_claims_the_next_job_with_each_report(tmp_path: Path) -> None:
    jobs = [claimed_job(), claimed_job(), claimed_job()]
    client = FakeClient(jobs=list(jobs), claims_next=True)
    code, _, records = run(client, options(tmp_path, ["true"], loop=True, max_jobs=3))
    assert code == 0
    assert [r["jobId"] for r in records] == [str(j.id) for j in jobs]
    # One claim request, then each report claimed the next job: 4 requests for 3 jobs, not 6.
    assert len(client.named("claim_next")) == 1
    asked = [call.kwargs["next"] for call in client.named("update_status")]
    assert [a is not None for a in asked] == [True, True, False]  # not after the last job
    assert all(a.lease_seconds == 60 and a.limit == 1 for a in asked if a is not None)


def test_loop_falls_back_to_claiming_when_the_server_ignores_claim_next(tmp_path: Path) -> None:
    jobs = [claimed_job(), claimed_job()]
    client = FakeClient(jobs=list(jobs))  # answers {id, message}: no claimed
    code, _, records = run(client, options(tmp_path, ["true"], loop=True, max_jobs=2))
    assert code == 0
    assert [r["jobId"] for r in records] == [str(j.id) for j in jobs]
    assert len(client.named("claim_next")) == 2


def test_a_report_retry_does_not_claim_again(tmp_path: Path) -> None:
    jobs = [claimed_job(), claimed_job()]

    def first_fails(n: int) -> None:
        if n == 1:
            raise ServerUnavailable("down")

    client = FakeClient(jobs=list(jobs), claims_next=True, on_update_status=first_fails)
    code, _, records = run(client, options(tmp_path, ["true"], loop=True, max_jobs=2))
    assert code == 0
    assert [r["jobId"] for r in records] == [str(j.id) for j in jobs]
    asked = [call.kwargs["next"] is not None for call in client.named("update_status")]
    assert asked == [True, False, False]  # the retry did not ask; the last job did not ask


def _drained_during_the_first_job(
    tmp_path: Path, client: FakeClient, *, trap: str = ":"
) -> list[dict[str, object]]:
    """Run ``--loop``, its first job running ``trap`` and then waiting until `run` got its
    SIGTERM (a drain); the records, once it exited 0."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    script = f"{trap}; touch {ready}; while [ ! -e {go} ]; do sleep 0.05; done"

    def term_then_go() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        go.touch()

    when(ready.exists, term_then_go)
    code, _, records = run(client, options(tmp_path, sh(script), loop=True))
    assert code == 0
    return records


def test_a_job_claimed_with_the_last_report_is_released_when_the_loop_drains(
    tmp_path: Path,
) -> None:
    jobs = [claimed_job(), claimed_job()]
    client = FakeClient(jobs=list(jobs), claims_next=True)
    records = _drained_during_the_first_job(tmp_path, client)
    assert [r["jobId"] for r in records] == [str(jobs[0].id)]
    # Drained: the report did not ask for a next job, or gave it straight back.
    claimed = sum(1 for c in client.named("update_status") if c.kwargs["next"] is not None)
    released = [c.args[0] for c in client.named("release")]
    assert released == ([jobs[1].id] if claimed else [])
    assert len(client.jobs) == (0 if claimed else 1)


def test_loop_ends_at_the_idle_timeout(tmp_path: Path) -> None:
    client = FakeClient()
    started = time.monotonic()
    code, _, _ = run(client, options(tmp_path, ["true"], loop=True, wait=0.5, idle_timeout=0.5))
    assert code == 0
    assert 0.5 <= time.monotonic() - started < DEADLINE


def test_loop_retries_a_server_that_is_down(tmp_path: Path) -> None:
    calls = iter([ServerUnavailable("down"), ServerUnavailable("down")])
    job = claimed_job()

    def flaky() -> ClaimedJob:
        error = next(calls, None)
        if error is not None:
            raise error
        return job

    client = FakeClient(on_claim=flaky)
    code, _, records = run(
        client, options(tmp_path, ["true"], loop=True, max_jobs=1, wait=math.inf)
    )
    assert code == 0
    assert [r["jobId"] for r in records] == [str(job.id)]


def test_first_sigterm_in_loop_drains(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job(), claimed_job()])
    trap = f"trap 'touch {tmp_path}/got' TERM"
    records = _drained_during_the_first_job(tmp_path, client, trap=trap)
    assert not (tmp_path / "got").exists()  # the job was not signalled
    assert [r["status"] for r in records] == ["successful"]
    # No second job ran: it is still queued, or (claimed in the instant of the signal) given
    # straight back.
    assert len(client.jobs) + len(client.named("release")) == 1


def test_sigterm_while_waiting_for_work_in_loop_exits_0(tmp_path: Path) -> None:
    client = FakeClient()
    when(lambda: len(client.named("claim_next")) >= 2, lambda: os.kill(os.getpid(), 15))
    code, _, _ = run(client, options(tmp_path, ["true"], loop=True))
    assert code == 0


def test_a_job_claimed_while_stopping_is_released(tmp_path: Path) -> None:
    job = claimed_job()
    in_flight, gate = threading.Event(), threading.Event()

    def slow_claim() -> ClaimedJob:
        in_flight.set()
        gate.wait(DEADLINE)
        return job

    client = FakeClient(on_claim=slow_claim)
    sup = Supervisor(options(tmp_path, ["true"], loop=True), lambda: client, log=Log())
    when(in_flight.is_set, lambda: os.kill(os.getpid(), signal.SIGTERM))
    # The long-poll answers only after the supervisor stopped waiting for it.
    when(lambda: sup.draining, gate.set)
    assert sup.run() == 0
    assert [c.args[0] for c in client.named("release")] == [job.id]
    assert sup.records == []  # it never ran


# --- the command's own exit codes never pass for run's: the verdict says who chose it ------


@pytest.mark.parametrize("own", [7, 75, 124, 125, 126, 127, 130, 143])
def test_a_command_exit_code_that_collides_with_runs_own_says_completed(
    tmp_path: Path, own: int
) -> None:
    job = claimed_job()
    client = FakeClient(jobs=[job])
    code, _, [record] = run(client, options(tmp_path, sh(f"exit {own}")))
    assert code == own
    assert record["verdict"] == "completed"
    assert (record["exitCode"], record["status"], record["reported"]) == (own, "failure", True)
    assert reports(client) == [(JobStatus.FAILURE, f"exit code {own}", job.claim_id)]


def test_no_job_and_a_command_exiting_7_differ_by_verdict(tmp_path: Path) -> None:
    _, _, [nothing] = run(FakeClient(), options(tmp_path, sh("exit 7")))
    _, _, [seven] = run(FakeClient(jobs=[claimed_job()]), options(tmp_path, sh("exit 7")))
    assert (nothing["verdict"], seven["verdict"]) == ("no_job", "completed")


def test_lease_lost_and_a_command_exiting_75_differ_by_verdict(tmp_path: Path) -> None:
    def lost(n: int) -> None:
        # No job status: a claim lost to expiry (a "queued" refusal inside our own lease reads
        # as an operator's requeue, whose verdict is requeued).
        raise ClaimLost("claim expired")

    client = FakeClient(jobs=[claimed_job(lease_seconds=3)], on_heartbeat=lost)
    code, _, [record] = run(client, options(tmp_path, sh("sleep 60")))
    assert (code, record["verdict"], record["exitCode"]) == (75, "lease_lost", None)
    assert record["signal"] == 15


def test_run_failing_and_a_command_exiting_125_differ_by_verdict(tmp_path: Path) -> None:
    def down() -> ClaimedJob:
        raise ServerUnavailable("connection refused")

    code, _, [record] = run(FakeClient(on_claim=down), options(tmp_path, ["true"]))
    assert (code, record["verdict"]) == (125, "failed")

    def refused(n: int) -> None:
        raise AuthError("invalid API key", status=401)

    client = FakeClient(jobs=[claimed_job()], on_update_status=refused)
    code, _, [record] = run(client, options(tmp_path, sh("exit 0")))
    # The command succeeded, but its result could not be recorded: run's own failure.
    assert (code, record["verdict"], record["exitCode"], record["reported"]) == (
        125,
        "failed",
        0,
        False,
    )


def test_the_failure_message_carries_the_last_lines_not_the_first(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job()])
    script = "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done; exit 1"
    code, _, _ = run(client, options(tmp_path, sh(script), output_tail_bytes=100))
    assert code == 1
    message = reports(client)[0][1]
    assert message is not None
    assert message.endswith("line-1998\nline-1999\n")
    assert "line-0\n" not in message
