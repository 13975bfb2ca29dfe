"""`run --no-output-timeout` and the heartbeat's ``lastOutputAt`` against a real server."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from tests.fixtures.waiting import wait_until

from .runs import Harness


def test_no_output_timeout_stops_a_silent_command(harness: Harness) -> None:
    job_id = harness.enqueue()
    # Talks for a while (each line restarts the clock), then falls silent for good.
    script = (
        "trap 'cat \"$JOBAGENTCTL_STOP_REASON_FILE\" > reason; exit 1' TERM; "
        "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.3; done; date +%s.%N > quiet; "
        "while :; do sleep 0.05; done"
    )
    run = harness.start(["--no-output-timeout", "1s"], ["sh", "-c", script])
    assert run.wait() == 124, run.stderr()
    ended = time.time()
    assert (run.workdir / "reason").read_text() == "no_output\n"
    # Stopped for its silence, not while it was talking.
    assert ended - float((run.workdir / "quiet").read_text()) >= 0.7
    job = harness.job(job_id)
    assert job["status"] == "failure"
    assert job["message"].startswith("no output for 1s\n")
    assert "tick 6" in job["message"]
    [record] = run.report()
    assert (record["reason"], record["verdict"], record["status"]) == (
        "no_output",
        "no_output",
        "failure",
    )
    assert "no output for 1s (--no-output-timeout): stopping" in run.stderr()


def test_heartbeats_tell_the_server_when_the_command_last_printed(harness: Harness) -> None:
    job_id = harness.enqueue()
    script = "echo hello; while [ ! -f done ]; do sleep 0.05; done"
    run = harness.start(["--lease-seconds", "3"], ["sh", "-c", script])

    def claim() -> dict[str, Any] | None:
        status, body = harness.server.request("GET", "job-claims")
        assert status == 200, body
        found = [c for c in body["items"] if c["jobId"] == job_id]
        return found[0] if found and found[0].get("lastOutputAt") else None

    seen = wait_until(claim, what="a heartbeat with lastOutputAt")

    def at(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    assert at(seen["lastOutputAt"]) >= at(seen["claimedAt"])
    (run.workdir / "done").touch()
    assert run.wait() == 0, run.stderr()
