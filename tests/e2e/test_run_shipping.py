"""`run` ships the command's output to the job's log, against a real server on both databases."""

from __future__ import annotations

import base64

from .runs import Harness


def _log(harness: Harness, job_id: str) -> list[tuple[str, bytes]]:
    """The attempt's log as ``(stream, bytes)``, neighbours of one stream joined (how the
    output was cut into chunks is the shipper's business)."""
    status, page = harness.server.request("GET", f"jobs/{job_id}/logs")
    assert status == 200, page
    runs: list[tuple[str, bytes]] = []
    for chunk in page["chunks"]:
        data = base64.b64decode(chunk["data"])
        if runs and runs[-1][0] == chunk["stream"]:
            runs[-1] = (chunk["stream"], runs[-1][1] + data)
        else:
            runs.append((chunk["stream"], data))
    return runs


def test_output_reaches_the_log_in_order_with_its_streams(own_harness: Harness) -> None:
    job_id = own_harness.enqueue()
    script = (
        "echo out-1; sleep 0.2; echo err-1 >&2; sleep 0.2; printf 'out-2 \\377\\n'; "
        "sleep 0.2; echo err-2 >&2; exit 3"
    )
    run = own_harness.start([], ["sh", "-c", script])
    assert run.wait() == 3, run.stderr()
    assert _log(own_harness, job_id) == [
        ("stdout", b"out-1\n"),
        ("stderr", b"err-1\n"),
        ("stdout", b"out-2 \xff\n"),  # not UTF-8: kept exactly
        ("stderr", b"err-2\n"),
    ]
    # Our own copy is unchanged, and the failure report still carries the tail.
    assert (run.workdir / "stdout").read_bytes() == b"out-1\nout-2 \xff\n"
    assert "err-2" in own_harness.job(job_id)["message"]


def test_no_ship_output_keeps_the_log_empty_and_the_tail(harness: Harness) -> None:
    job_id = harness.enqueue()
    run = harness.start(["--no-ship-output"], ["sh", "-c", "echo secret-ish; exit 1"])
    assert run.wait() == 1, run.stderr()
    assert _log(harness, job_id) == []
    assert "secret-ish" in harness.job(job_id)["message"]
