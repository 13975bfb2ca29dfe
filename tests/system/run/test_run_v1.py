"""`run` on a V1-only server (issue 10 §2, run side), against the ctrlplane stand-in of
tests/fixtures/ctrlplane_standin.py (built from ctrlplane's handlers at 66e0888), and `--job` on
our own server.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli import cli_command
from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn
from tests.fixtures.waiting import wait_until

from .runs import DEADLINE, Harness


def start(
    server: CtrlplaneStandIn, agent: str, workdir: Path, args: list[str], command: list[str]
) -> subprocess.Popen[str]:
    env = {**server.base_env(), **server.env(), "JOBAGENTCTL_AGENT": agent}
    env.update({"TMPDIR": str(workdir), "JOBAGENTCTL_TIMEOUT": "60"})
    argv = cli_command("run", *args)
    argv += ["--report", str(workdir / "report.jsonl"), "--", *command]
    return subprocess.Popen(
        argv,
        env=env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def record(workdir: Path) -> dict[str, Any]:
    [line] = (workdir / "report.jsonl").read_text().splitlines()
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def test_a_v1_job_runs_unleased_and_says_so_once(
    ctrlplane: CtrlplaneStandIn, tmp_path: Path
) -> None:
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent)
    script = "env | grep ^JOBAGENTCTL_ | sort > env.txt; exit 0"
    proc = start(ctrlplane, agent, tmp_path, [], ["sh", "-c", script])
    _, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, err
    assert ctrlplane.job(job).status == "successful"
    assert err.count("no lease support") == 1
    assert err.count("output is not shipped") == 1
    env = (tmp_path / "env.txt").read_text()
    assert "JOBAGENTCTL_LEASE_SECONDS=0\n" in env
    assert "JOBAGENTCTL_CLAIM_ID" not in env
    rec = record(tmp_path)
    assert (rec["verdict"], rec["claimId"], rec["heartbeats"]) == ("completed", None, 0)
    assert not [p for _, p, _ in ctrlplane.requests() if p.endswith(("/heartbeat", "/logs"))]


def test_a_404_on_the_final_report_is_job_gone_not_lease_lost(
    ctrlplane: CtrlplaneStandIn, tmp_path: Path
) -> None:
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent)
    script = "touch ready; while [ ! -e go ]; do sleep 0.05; done; exit 3"
    proc = start(ctrlplane, agent, tmp_path, [], ["sh", "-c", script])
    wait_until((tmp_path / "ready").exists, what="the command to start")
    # The job goes away under the running command (ctrlplane answers 404 for it from now on).
    with ctrlplane.state.lock:
        del ctrlplane.state.jobs[job]
    (tmp_path / "go").touch()
    _, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 5, err
    assert "is gone" in err and "lease lost" not in err
    rec = record(tmp_path)
    assert (rec["verdict"], rec["exitCode"], rec["reported"]) == ("job_gone", 3, False)


def test_run_job_on_a_ctrlplane_job_that_is_not_queued_is_7(
    ctrlplane: CtrlplaneStandIn, tmp_path: Path
) -> None:
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent, "in_progress")  # ctrlplane answers 409 without a code
    proc = start(ctrlplane, agent, tmp_path, ["--job", job], ["true"])
    _, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 7, err
    assert record(tmp_path)["verdict"] == "no_job"
    assert ctrlplane.job(job).status == "in_progress"


@pytest.mark.parametrize("status", ["successful", "inProgress"])
def test_run_job_on_our_server_on_a_job_that_is_not_queued_is_7(
    harness: Harness, status: str
) -> None:
    job_id = harness.enqueue()
    if status == "inProgress":
        first = harness.start(["--job", job_id], ["sh", "-c", "touch ready; sleep 60"], name="a")
        wait_until((first.workdir / "ready").exists, what="the first claim")
    else:
        assert harness.start(["--job", job_id], ["true"], name="a").wait() == 0
    assert harness.job(job_id)["status"] == status
    second = harness.start(["--job", job_id], ["true"], name="b")
    assert second.wait() == 7, second.stderr()
    [rec] = second.report()
    assert (rec["verdict"], rec["jobId"]) == ("no_job", None)
