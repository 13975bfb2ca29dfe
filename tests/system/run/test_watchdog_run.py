"""`jobagentctl run` killed or frozen: the job's whole tree is gone before the server requeues
the job (issue 13). A real server, a real `run`, a job that double-forks a daemon out of its
process group; each death is seen through a pidfd and compared with the moment the reaper
closed the attempt (both wall clock, same machine).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.fixtures.waiting import wait_until

from .runs import DEADLINE, Harness

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"),
    reason="the watchdog's guarantees (and these tests' pidfds) are Linux's",
)

LEASE = "6"  # long enough that a busy machine's scheduling is small beside the margins

# The command: a daemon that leaves the session, a background child in the group; the pids go
# to files, then "ready". The shell exits on the stop signal (writing the stop reason).
JOB = """
( setsid sh -c 'echo $$ > daemon.pid; exec sleep 1000' & )
sleep 1000 & echo $! > background.pid
while [ ! -s daemon.pid ]; do sleep 0.01; done
echo $$ > leader.pid
trap 'cat "$JOBAGENTCTL_STOP_REASON_FILE" > reason; exit 0' TERM
touch ready
while :; do sleep 0.05; done
"""


class Deaths:
    """Watches pids through pidfds from a thread; when each was seen gone (wall clock)."""

    def __init__(self, pids: list[int]) -> None:
        self.seen: dict[int, float] = {}
        self._fds = {os.pidfd_open(pid): pid for pid in pids}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._fds:
            for fd in select.select(list(self._fds), [], [], DEADLINE)[0]:
                self.seen[self._fds.pop(fd)] = time.time()
                os.close(fd)

    def wait(self) -> dict[int, float]:
        self._thread.join(DEADLINE * 2)
        assert not self._fds, f"still alive: {sorted(self._fds.values())}"
        return self.seen


def _start(harness: Harness) -> tuple[str, Path, Deaths, list[int]]:
    job_id = harness.enqueue()
    run = harness.start(["--lease-seconds", LEASE], ["sh", "-c", JOB])
    wait_until((run.workdir / "ready").exists, what="the command to start")
    pids = [int((run.workdir / f"{n}.pid").read_text()) for n in ("leader", "background", "daemon")]
    assert os.getsid(pids[2]) != os.getsid(pids[0])  # the daemon left the job's session
    return job_id, run.workdir, Deaths(pids), pids


def _requeued_at(harness: Harness, job_id: str) -> float:
    """When the reaper closed the first attempt (it expired)."""
    wait_until(lambda: harness.job(job_id)["status"] == "queued", what="the reaper to requeue")
    first = harness.attempts(job_id)[0]
    assert first["outcome"] == "expired", first
    return datetime.fromisoformat(first["endedAt"].replace("Z", "+00:00")).timestamp()


def test_run_sigkilled_its_jobs_tree_is_gone_before_the_requeue(harness: Harness) -> None:
    job_id, workdir, deaths, pids = _start(harness)
    run = harness.runs[-1]
    run.signal(signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL
    seen = deaths.wait()
    requeued = _requeued_at(harness, job_id)
    assert max(seen.values()) < requeued, (seen, requeued)
    assert (workdir / "reason").read_text() == "lease_lost\n"
    assert set(seen) == set(pids)


def test_run_frozen_its_jobs_tree_is_gone_before_the_requeue(harness: Harness) -> None:
    job_id, workdir, deaths, _ = _start(harness)
    run = harness.runs[-1]
    run.signal(signal.SIGSTOP)
    try:
        seen = deaths.wait()
        requeued = _requeued_at(harness, job_id)
    finally:
        run.signal(signal.SIGCONT)
    assert max(seen.values()) < requeued, (seen, requeued)
    assert (workdir / "reason").read_text() == "lease_lost\n"
    # Thawed, run learns that its lease was lost (the watchdog said so) and reports nothing.
    assert run.wait() == 75, run.stderr()
    assert run.report()[0]["reason"] == "lease_lost"
    assert harness.attempts(job_id)[0]["outcome"] == "expired"
