"""A reader that never reads (issue 12 §2): `run`'s stdout and stderr go to a pipe nobody
reads, the command writes without end. The run still acts on --timeout, signals and cancel,
and says what it could not write; the job is reported (or released) as usual.

Without the relays, `run` itself blocks in write() as soon as the pipe (64 KiB) is full and
none of this happens: each test then fails on its `wait()` deadline. Each also bounds the time:
the verdict comes as it would with a reader (`durationSeconds` of --report), and `run` exits at
most --grace after it (its wait for the stuck reader), with headroom for a busy machine.
"""

from __future__ import annotations

import signal
import time

from tests.fixtures.waiting import wait_until

from .runs import AgentRun, Harness, cli

# Writes forever (yes never ends by itself); `ready` once it has started.
FLOOD = "touch ready; exec yes 'a line of output that nobody will ever read'"
GRACE = 1.0
# Headroom for two busy cores: interpreter start-up, the claim, the report, the release.
SLACK = 20.0


def _ended_within(run: AgentRun, since: float, bound: float) -> None:
    """``run`` exited within ``bound`` seconds of ``since`` (monotonic), and its record was
    written before it: the wait for the stuck reader comes after the verdict, never before."""
    took = time.monotonic() - since
    assert took < bound, f"run took {took:.1f}s (bound {bound:.0f}s)"
    assert run.report(), "the record is written before run waits for its reader"


def test_timeout_fires_while_nobody_reads_the_output(harness: Harness) -> None:
    job_id = harness.enqueue()
    started = time.monotonic()
    run = harness.start(
        ["--timeout", "2s", "--grace", "1s"], ["sh", "-c", FLOOD], blocked_output=True
    )
    wait_until(lambda: run.unread_bytes() >= 60_000, what="the pipe nobody reads to fill up")
    wait_until(run.report, what="the verdict (the --report record)", interval=0.02)
    verdict_at = time.monotonic()
    assert run.wait() == 124
    # After its verdict, run waits at most --grace for the reader that never reads.
    assert time.monotonic() - verdict_at < GRACE + 5.0
    # The timeout fired on time (the job's duration: 2 s, then `yes` dies of SIGTERM at once,
    # and the report); the whole run, from its start, within timeout + grace + the reader's
    # grace + headroom.
    _ended_within(run, started, 2.0 + GRACE + GRACE + SLACK)
    duration = run.report()[0]["durationSeconds"]
    assert 2.0 <= duration < 2.0 + GRACE + 5.0, duration
    job = harness.job(job_id)
    assert job["status"] == "failure"
    assert job["message"].startswith("timed out after 2s\n")
    # The tail is the *last* output, read before the run stopped reading.
    assert job["message"].rstrip().endswith("a line of output that nobody will ever read")
    [record] = run.report()
    assert (record["status"], record["reason"]) == ("failure", "timeout")


def test_sigterm_is_acted_on_while_nobody_reads_the_output(harness: Harness) -> None:
    job_id = harness.enqueue()
    run = harness.start(
        ["--lease-seconds", "60", "--grace", "1s"], ["sh", "-c", FLOOD], blocked_output=True
    )
    wait_until((run.workdir / "ready").exists, what="the command to start")
    # The pipe is full: from here on, every write to it blocks.
    wait_until(lambda: run.unread_bytes() >= 60_000, what="the pipe nobody reads to fill up")
    run.signal(signal.SIGTERM)
    signalled = time.monotonic()
    assert run.wait() == 143
    _ended_within(run, signalled, GRACE + GRACE + SLACK)
    # Released at once (60 s lease: "queued" now can only be the release).
    assert harness.job(job_id)["status"] == "queued"


def test_cancel_is_acted_on_while_nobody_reads_the_output(harness: Harness) -> None:
    job_id = harness.enqueue()
    run = harness.start(
        ["--lease-seconds", "3", "--grace", "1s"], ["sh", "-c", FLOOD], blocked_output=True
    )
    wait_until((run.workdir / "ready").exists, what="the command to start")
    wait_until(lambda: run.unread_bytes() >= 60_000, what="the pipe nobody reads to fill up")
    cancel = cli(harness, "cancel", job_id)
    assert cancel.returncode == 0, cancel.stderr
    cancelled = time.monotonic()
    assert run.wait() == 143
    # Seen by the long-poll within about a second, then the stop and the reader's grace.
    _ended_within(run, cancelled, 1.0 + GRACE + GRACE + SLACK)
    assert run.report()[0]["reason"] == "cancelled"
    assert harness.job(job_id)["status"] == "cancelled"
