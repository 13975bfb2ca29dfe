"""A reader that never reads (issue 12 §2): `run`'s stdout and stderr go to a pipe nobody
reads, the command writes without end. The run still acts on --timeout, signals and cancel,
and says what it could not write; the job is reported (or released) as usual.

Without the relays, `run` itself blocks in write() as soon as the pipe (64 KiB) is full and
none of this happens: each test then fails on its `wait()` deadline.
"""

from __future__ import annotations

import signal

from tests.fixtures.waiting import wait_until

from .runs import Harness, cli

# Writes forever (yes never ends by itself); `ready` once it has started.
FLOOD = "touch ready; exec yes 'a line of output that nobody will ever read'"


def test_timeout_fires_while_nobody_reads_the_output(harness: Harness) -> None:
    job_id = harness.enqueue()
    run = harness.start(
        ["--timeout", "2s", "--grace", "1s"], ["sh", "-c", FLOOD], blocked_output=True
    )
    wait_until(lambda: run.unread_bytes() >= 60_000, what="the pipe nobody reads to fill up")
    assert run.wait() == 124
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
    assert run.wait() == 143
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
    assert run.wait() == 143
    assert run.report()[0]["reason"] == "cancelled"
    assert harness.job(job_id)["status"] == "cancelled"
