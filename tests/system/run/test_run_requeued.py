"""An operator's requeue of a job `run` is working on reads as what it was: `run` stops the
command, says "requeued by an operator" (not "lease lost"), tells the command and --report
the reason `requeued`, and exits 75 as for a lost lease."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.fixtures.cli import cli_command
from tests.fixtures.live_server import LiveServer
from tests.fixtures.server_cli import env_for, jac
from tests.fixtures.waiting import wait_until

# The command says it started, and on SIGTERM copies the stop reason it was given.
SCRIPT = (
    "trap 'cat \"$JOBAGENTCTL_STOP_REASON_FILE\" > reason; exit 143' TERM; "
    "touch started; while :; do sleep 0.05; done"
)


def test_an_operators_requeue_stops_run_as_requeued(
    shared_server: LiveServer, tmp_path: Path
) -> None:
    agent = shared_server.create_agent("requeued-run")
    job = shared_server.enqueue(agent)
    report = tmp_path / "report.jsonl"
    run = subprocess.Popen(
        [
            *cli_command(),
            "run",
            "--lease-seconds",
            "300",
            "--report",
            str(report),
            "--",
            "sh",
            "-c",
            SCRIPT,
        ],
        env=env_for(shared_server, agent),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until((tmp_path / "started").exists, what="the command to start")
        requeued = jac(shared_server, "requeue", job["id"])
        assert requeued.returncode == 0, requeued.stderr
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
    assert run.returncode == 75, stderr
    assert f"job {job['id']} was requeued by an operator: the result is not reported" in stderr
    assert "lease lost" not in stderr
    assert (tmp_path / "reason").read_text().strip() == "requeued"
    [record] = [json.loads(line) for line in report.read_text().splitlines()]
    assert record["reason"] == "requeued", record
