"""`jobagentctl run` against a real server: results, exit codes and reports (SPEC §6.8–§6.9).

One shared SQLite server: the supervisor speaks HTTP, and the dialects are covered by the
server's own tests; tests/system/run/test_run_lease.py runs the lease cases on PostgreSQL too.
"""

from __future__ import annotations

import signal
import time

from tests.fixtures.waiting import wait_until

from .runs import DEADLINE, Harness, gone


def test_exit_code_passes_through_and_failure_carries_the_output(harness: Harness) -> None:
    job_id = harness.enqueue()
    run = harness.start([], ["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"])
    assert run.wait() == 3
    job = harness.job(job_id)
    assert job["status"] == "failure"
    assert job["message"].startswith("exit code 3\n")
    assert "to-stdout" in job["message"] and "to-stderr" in job["message"]
    # Passed through, each on its own stream, alongside jobagentctl's own notes on stderr.
    assert run.stdout() == "to-stdout\n"
    assert "to-stderr\n" in run.stderr()
    [record] = run.report()
    assert (record["jobId"], record["exitCode"], record["status"]) == (job_id, 3, "failure")
    assert record["reported"] is True


def test_success_is_reported_with_the_claim(harness: Harness) -> None:
    job_id = harness.enqueue(job_agent_config={"script": "ok"})
    script = (
        'test "$(cat "$JOBAGENTCTL_JOB_FILE" | grep -c ok)" = 1 && test -z "$JOBAGENTCTL_API_KEY"'
    )
    run = harness.start([], ["sh", "-c", script])
    assert run.wait() == 0, run.stderr()
    assert harness.job(job_id)["status"] == "successful"
    [attempt] = harness.attempts(job_id)
    assert attempt["outcome"] == "completed"
    assert run.report()[0]["claimId"] == attempt["claimId"]
    # The API key is nowhere in what jobagentctl printed.
    assert harness.server.api_key not in run.stderr() + run.stdout()


def test_missing_command_is_127(harness: Harness) -> None:
    job_id = harness.enqueue()
    run = harness.start([], ["no-such-command-anywhere"])
    assert run.wait() == 127
    job = harness.job(job_id)
    assert (job["status"], job["message"]) == (
        "failure",
        "command not found: no-such-command-anywhere",
    )


def test_killed_by_a_signal_is_128_plus_n(harness: Harness) -> None:
    job_id = harness.enqueue()
    run = harness.start([], ["sh", "-c", "kill -KILL $$"])
    assert run.wait() == 128 + signal.SIGKILL
    job = harness.job(job_id)
    assert job["status"] == "failure"
    assert job["message"].startswith("killed by signal 9 (SIGKILL)")
    assert run.report()[0]["signal"] == 9


def test_timeout_is_124_and_reported(harness: Harness) -> None:
    job_id = harness.enqueue()
    script = (
        "trap 'cat \"$JOBAGENTCTL_STOP_REASON_FILE\" > reason; exit 1' TERM; "
        "while :; do sleep 0.05; done"
    )
    run = harness.start(["--timeout", "1s"], ["sh", "-c", script])
    assert run.wait() == 124
    assert (run.workdir / "reason").read_text() == "timeout\n"
    job = harness.job(job_id)
    assert job["status"] == "failure"
    assert job["message"].startswith("timed out after 1s")


def test_nothing_to_claim_is_7(harness: Harness) -> None:
    run = harness.start([], ["true"])
    assert run.wait() == 7
    [record] = run.report()
    assert (record["verdict"], record["jobId"]) == ("no_job", None)


def test_a_grandchild_holding_stdout_does_not_hang_the_run(harness: Harness) -> None:
    job_id = harness.enqueue()
    started = time.monotonic()
    # The background sleep keeps the output pipe open long after its parent exits.
    run = harness.start(["--grace", "1s"], ["sh", "-c", "sleep 120 & echo $! > gc.pid; exit 0"])
    assert run.wait() == 0
    assert time.monotonic() - started < DEADLINE  # far less than the grandchild's 120 s
    assert harness.job(job_id)["status"] == "successful"
    gc = int((run.workdir / "gc.pid").read_text())
    wait_until(lambda: gone(gc), what="the grandchild to be killed with the group")
