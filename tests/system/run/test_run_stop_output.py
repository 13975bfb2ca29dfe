"""What a command prints while it is being stopped (a cancel, a requeue) reaches its job's log,
and what a server refuses is never lost silently (issue 35, items 1 and 3), against a real
server.

The command prints a line of work every half second and, on SIGTERM, three cleanup lines over
1.5 s: the lines an operator needs most ("rolled back X"). `run` ships until it lets go of the
claim, and flushes everything before.
"""

from __future__ import annotations

import base64
import re

import pytest

from tests.fixtures.waiting import wait_until

from .runs import Harness, cli
from .slow_proxy import slow_proxy

WORK_THEN_CLEANUP = (
    # (stderr too into stdout: the shell's own "Terminated" for the killed sleep is output.)
    "exec 2>&1; trap 'for i in 1 2 3; do echo \"cleanup $i\"; sleep 0.5; done; exit 0' TERM; "
    'i=0; while :; do i=$((i+1)); echo "work $i"; [ $i -ge 3 ] && touch ready; sleep 0.5; done'
)
NOT_SHIPPED = re.compile(
    r"jobagentctl: (\d+) bytes of output not shipped to the job's log: the server refused them"
)


def _log_bytes(harness: Harness, job_id: str, attempt: int | None = None) -> bytes:
    """Every byte of output the job's attempt (by default the latest) stored (no markers
    expected)."""
    data = b""
    after = 0
    while True:
        path = f"jobs/{job_id}/logs?after={after}&limit=1000"
        path += "" if attempt is None else f"&attempt={attempt}"
        status, page = harness.server.request("GET", path)
        assert status == 200, page
        if not page["chunks"]:
            return data
        for chunk in page["chunks"]:
            assert chunk["stream"] == "stdout", chunk
            data += base64.b64decode(chunk["data"])
        after = page["chunks"][-1]["seq"]


def _lines(data: bytes) -> list[str]:
    return data.decode().splitlines()


@pytest.mark.parametrize("command", ["cancel", "requeue"])
def test_output_around_a_stop_reaches_the_log_whole(own_harness: Harness, command: str) -> None:
    # The holder of a revoked claim may append to its own attempt until it lets go, and `run`
    # ships until then: the last work and every cleanup line are in the log, nothing is said
    # lost. (The log used to end at the last batch before the cancel.)
    job_id = own_harness.enqueue()
    run = own_harness.start(["--lease-seconds", "300"], ["sh", "-c", WORK_THEN_CLEANUP])
    wait_until((run.workdir / "ready").exists, what="three lines of work")
    done = cli(own_harness, command, job_id)
    assert done.returncode == 0, done.stderr
    run.wait()
    printed = (run.workdir / "stdout").read_bytes()  # our own copy: everything
    assert _lines(printed)[-3:] == ["cleanup 1", "cleanup 2", "cleanup 3"], printed
    # The first attempt's log (after a requeue the job is queued again, with a new attempt
    # to come).
    assert _log_bytes(own_harness, job_id, attempt=1) == printed
    assert NOT_SHIPPED.findall(run.stderr()) == []


def test_a_refusing_server_costs_what_it_refused_said_once(harness: Harness) -> None:
    # The server refuses every append after the first (409, as for a claim let go): the work
    # before it is in the log, the rest, cleanup lines included, is counted on stderr, once.
    job_id = harness.enqueue()
    refusing = False

    def after_the_cancel(method: str, path: str, n: int) -> int | None:
        return 409 if refusing and method == "POST" and path.endswith("/logs") else None

    with slow_proxy(harness.server.url, refuse=after_the_cancel) as proxy:
        env = {"JOBAGENTCTL_URL": proxy.url}
        run = harness.start(["--lease-seconds", "300"], ["sh", "-c", WORK_THEN_CLEANUP], env=env)
        wait_until((run.workdir / "ready").exists, what="three lines of work")
        wait_until(lambda: _log_bytes(harness, job_id), what="some work in the log")
        refusing = True
        done = cli(harness, "cancel", job_id)
        assert done.returncode == 0, done.stderr
        run.wait()
    printed = (run.workdir / "stdout").read_bytes()
    stored = _log_bytes(harness, job_id)
    [count] = NOT_SHIPPED.findall(run.stderr())
    assert stored and printed.startswith(stored)
    assert len(stored) + int(count) == len(printed)
    assert _lines(printed)[-1] == "cleanup 3"


def test_a_loop_ships_again_once_its_server_has_logs(harness: Harness) -> None:
    # The first job's append is answered 404 (a server without logs, as before 0.4.0); the
    # server is then "upgraded": the next job of the same `run --loop` ships its output.
    first, second = harness.enqueue(), harness.enqueue()
    appends = 0

    def old_then_upgraded(method: str, path: str, n: int) -> int | None:
        nonlocal appends
        if method == "POST" and path.endswith("/logs"):
            appends += 1
            return 404 if appends == 1 else None
        return None

    with slow_proxy(harness.server.url, refuse=old_then_upgraded) as proxy:
        script = 'echo "hello $JOBAGENTCTL_JOB_ID"'
        env = {"JOBAGENTCTL_URL": proxy.url}
        run = harness.start(["--loop", "--max-jobs", "2"], ["sh", "-c", script], env=env)
        assert run.wait() == 0, run.stderr()
    records = run.report()
    assert [r["status"] for r in records] == ["successful", "successful"]
    assert {r["jobId"] for r in records} == {first, second}
    before, after = (r["jobId"] for r in records)
    assert _log_bytes(harness, before) == b""  # the "old" server kept nothing
    assert _log_bytes(harness, after) == f"hello {after}\n".encode()
    stderr = run.stderr()
    assert stderr.count("the server has no log support") == 1, stderr
    assert stderr.count("the server keeps job logs now") == 1, stderr
