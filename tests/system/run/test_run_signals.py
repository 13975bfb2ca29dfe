"""Signals to `jobagentctl run`: forwarded to the child's whole group, the job released."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.fixtures.waiting import wait_until

from .runs import Harness, gone

# The child and a background grandchild (same process group) each record the TERM they get.
FAMILY = (
    "(trap 'touch grandchild.term; exit 0' TERM; touch grandchild.ready; "
    "while :; do sleep 0.05; done) & "
    "trap 'touch child.term; wait; exit 143' TERM; "
    "while [ ! -e grandchild.ready ]; do sleep 0.05; done; touch ready; "
    "while :; do sleep 0.05; done"
)


def test_sigterm_reaches_the_whole_group_and_requeues_the_job_at_once(harness: Harness) -> None:
    job_id = harness.enqueue()
    # A 60 s lease: "queued" right after the exit can only be the release, not the reaper.
    run = harness.start(["--lease-seconds", "60"], ["sh", "-c", FAMILY])
    wait_until((run.workdir / "ready").exists, what="the child and grandchild to start")
    run.signal(signal.SIGTERM)
    assert run.wait() == 143, run.stderr()
    assert (run.workdir / "child.term").exists()
    assert (run.workdir / "grandchild.term").exists()
    assert harness.job(job_id)["status"] == "queued"
    [attempt] = harness.attempts(job_id)
    assert attempt["outcome"] == "released"
    [record] = run.report()
    assert (record["status"], record["reason"]) == ("queued", "interrupted")


def test_sigint_is_130_and_releases_too(harness: Harness) -> None:
    job_id = harness.enqueue()
    script = "trap 'exit 130' INT; touch ready; while :; do sleep 0.05; done"
    run = harness.start([], ["sh", "-c", script])
    wait_until((run.workdir / "ready").exists, what="the child to start")
    run.signal(signal.SIGINT)
    assert run.wait() == 130, run.stderr()
    assert harness.job(job_id)["status"] == "queued"


def test_sigint_stops_a_run_started_with_sigint_ignored(harness: Harness) -> None:
    """`./agent.sh &` from a script starts `run` with SIGINT ignored; unlike a bash trap, `run`
    still acts on it (README, "A bash agent")."""
    job_id = harness.enqueue()
    script = "trap 'exit 130' INT; touch ready; while :; do sleep 0.05; done"
    run = harness.start([], ["sh", "-c", script], sigint_ignored=True)
    wait_until((run.workdir / "ready").exists, what="the child to start")
    status = (Path(f"/proc/{run.pid}/status")).read_text()
    ignored = int(next(x for x in status.splitlines() if x.startswith("SigIgn:")).split()[1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1)), "run keeps SIGINT ignored"
    run.signal(signal.SIGINT)
    assert run.wait() == 130, run.stderr()
    assert harness.job(job_id)["status"] == "queued"


def test_first_sigterm_in_loop_mode_drains(harness: Harness) -> None:
    first, second = harness.enqueue(), harness.enqueue()
    script = (
        "trap 'touch got.term' TERM; touch ready; "
        "while [ ! -e go ]; do sleep 0.05; done; rm ready; exit 0"
    )
    run = harness.start(["--loop", "--lease-seconds", "10"], ["sh", "-c", script])
    wait_until((run.workdir / "ready").exists, what="the first job to start")
    run.signal(signal.SIGTERM)
    wait_until(lambda: "draining" in run.stderr(), what="jobagentctl to start draining")
    (run.workdir / "go").touch()
    assert run.wait() == 0, run.stderr()
    assert not (run.workdir / "got.term").exists()  # the running job was left alone
    assert harness.job(first)["status"] == "successful"
    assert harness.job(second)["status"] == "queued"  # no new claim after the drain
    assert [r["jobId"] for r in run.report()] == [first]


def test_loop_runs_queued_jobs_until_max_jobs(harness: Harness) -> None:
    jobs = [harness.enqueue() for _ in range(3)]
    run = harness.start(["--loop", "--max-jobs", "2"], ["sh", "-c", "exit 0"])
    assert run.wait() == 0, run.stderr()
    # Oldest first; the third stays queued.
    assert [r["jobId"] for r in run.report()] == jobs[:2]
    assert [harness.job(j)["status"] for j in jobs] == ["successful", "successful", "queued"]


def test_loop_with_idle_timeout_exits_0_when_no_work_comes(harness: Harness) -> None:
    run = harness.start(["--loop", "--idle-timeout", "1s"], ["true"])
    assert run.wait() == 0, run.stderr()
    assert run.report() == []


def _state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped); X when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return "X"
    return stat.rsplit(")", 1)[1].split()[0]


def test_ctrl_z_suspends_the_command_with_the_run_and_fg_resumes_both(harness: Harness) -> None:
    job_id = harness.enqueue()
    script = "echo $$ > pid; while [ ! -e go ]; do sleep 0.05; done; exit 0"
    run = harness.start(["--lease-seconds", "60"], ["sh", "-c", script])
    pid_file = run.workdir / "pid"
    child = int(wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), what="pid"))
    run.signal(signal.SIGTSTP)
    wait_until(lambda: _state(run.pid) == "T", what="the run to stop")
    wait_until(lambda: _state(child) == "T", what="the command to stop with it")
    assert "SIGTSTP: suspending the command and jobagentctl" in run.stderr()
    run.signal(signal.SIGCONT)
    wait_until(lambda: _state(child) not in ("T", "X"), what="the command to resume")
    (run.workdir / "go").touch()
    assert run.wait() == 0, run.stderr()
    assert harness.job(job_id)["status"] == "successful"
    assert "resumed: the command too" in run.stderr()


def test_a_command_that_ignores_sigint_is_waited_for_out_loud(harness: Harness) -> None:
    job_id = harness.enqueue()
    script = "trap '' INT; touch ready; while :; do sleep 0.05; done"
    run = harness.start(["--grace", "2s"], ["sh", "-c", script])
    wait_until((run.workdir / "ready").exists, what="the child to start")
    run.signal(signal.SIGINT)
    message = wait_until(
        lambda: "SIGINT: stopping the job" in run.stderr() and run.stderr(), what="the stop message"
    )
    assert "waiting up to 2s for it to exit, then SIGKILL; SIGINT again kills it now" in message
    assert run.wait() == 130, run.stderr()
    assert "after the stop signal: SIGKILL" in run.stderr()
    assert harness.job(job_id)["status"] == "queued"


def test_a_run_suspended_past_its_lease_has_its_command_stopped_and_exits_75(
    harness: Harness,
) -> None:
    job_id = harness.enqueue()
    script = "echo $$ > pid; while :; do sleep 0.05; done"
    run = harness.start(["--lease-seconds", "3", "--grace", "1s"], ["sh", "-c", script])
    pid_file = run.workdir / "pid"
    child = int(wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), what="pid"))
    run.signal(signal.SIGTSTP)
    wait_until(lambda: _state(run.pid) == "T", what="the run to stop")
    assert "resume within" in run.stderr()
    # run is suspended, heartbeats and all: the watchdog ends the command before the lease.
    wait_until(lambda: gone(child), what="the watchdog to stop the suspended command")
    run.signal(signal.SIGCONT)
    assert run.wait() == 75, run.stderr()
    [record] = run.report()
    assert (record["verdict"], record["reported"]) == ("lease_lost", False)
    wait_until(lambda: harness.job(job_id)["status"] == "queued", what="the reaper to requeue")
