"""An operator's `requeue` of a running job never runs it twice at once: the old `run` stops
its command (which takes its time to clean up), and the job is claimable again only once that
command has exited — a second `run` waiting in `--loop` starts it after, never alongside.
`requeue --force` is the one way to skip the wait (an agent known to be dead)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.waiting import wait_until

from .runs import AgentRun, Harness, cli

LONG_LEASE = "300"  # no heartbeat and no expiry within the test: only the requeue acts
# The first attempt: on SIGTERM it cleans up until the test lets it go (file `release`), then
# writes when it exited. --grace is long enough that it is never killed meanwhile.
SLOW_STOP = (
    "trap 'touch stopping; while [ ! -e release ]; do sleep 0.05; done;"
    " date +%s.%N > ended; exit 0' TERM; "
    "touch ready; while :; do sleep 0.05; done"
)
STARTED = "date +%s.%N > started"


def _first_run_and_a_waiting_second(harness: Harness) -> tuple[str, AgentRun, AgentRun]:
    job_id = harness.enqueue()
    first = harness.start(
        ["--job", job_id, "--lease-seconds", LONG_LEASE, "--grace", "120"],
        ["sh", "-c", SLOW_STOP],
        name="first",
    )
    wait_until((first.workdir / "ready").exists, what="the first attempt to start")
    second = harness.start(
        ["--loop", "--lease-seconds", LONG_LEASE], ["sh", "-c", STARTED], name="second"
    )
    return job_id, first, second


def _requeue(harness: Harness, job_id: str, *flags: str) -> None:
    done = cli(harness, "requeue", job_id, *flags)
    assert done.returncode == 0, done.stderr


def _time(path: Path) -> float:
    return float(path.read_text())


def _written(path: Path) -> bool:
    """The command's time is in the file (the shell creates it before `date` writes)."""
    return path.exists() and path.read_text().endswith("\n")


def test_a_requeued_job_starts_again_only_after_the_old_command_exited(
    harness: Harness,
) -> None:
    job_id, first, second = _first_run_and_a_waiting_second(harness)
    _requeue(harness, job_id)
    wait_until((first.workdir / "stopping").exists, what="the first attempt to get SIGTERM")

    # While the old command cleans up, the claim shows as revoked and the job waits.
    claims = cli(harness, "inspect-claims", "--state", "revoked", "-o", "json")
    assert claims.returncode == 0, claims.stderr
    [claim] = json.loads(claims.stdout)
    assert claim["jobId"] == job_id and claim["state"] == "revoked"
    got = cli(harness, "jobs", "get", job_id, "-o", "json")
    assert got.returncode == 0, got.stderr
    job = json.loads(got.stdout)
    assert (job["status"], job["claimHeld"]) == ("queued", True)
    assert not (second.workdir / "started").exists()

    (first.workdir / "release").touch()
    assert first.wait() == 75, first.stderr()
    started = second.workdir / "started"
    wait_until(lambda: _written(started), what="the second attempt to start")
    assert _time(second.workdir / "started") > _time(first.workdir / "ended")
    wait_until(lambda: harness.job(job_id)["status"] == "successful", what="attempt 2 to end")
    outcomes = [a["outcome"] for a in harness.attempts(job_id)]
    assert outcomes == ["released", "completed"]


def test_requeue_force_does_not_wait_for_the_old_command(harness: Harness) -> None:
    job_id, first, second = _first_run_and_a_waiting_second(harness)
    _requeue(harness, job_id, "--force")
    # The documented risk: attempt 2 runs while attempt 1 is still cleaning up.
    wait_until((second.workdir / "started").exists, what="the second attempt to start")
    assert not (first.workdir / "ended").exists()
    (first.workdir / "release").touch()
    assert first.wait() == 75, first.stderr()
