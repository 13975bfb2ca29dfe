"""Regression tests for defects the chaos harness found, one per defect, named after it.

Each reproduces the defect directly (a real server, a real ``jobagentctl run``) without the
harness's randomness: strict xfail while the defect is open, a plain test once it is fixed.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.cli import cli_command
from tests.fixtures.live_server import LiveServer

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

_LEASE = 2


def _long_polls_waiting(server: LiveServer) -> float:
    status, text = server.request("GET", "/metrics", api_key=None, timeout=10)
    assert status == 200 and isinstance(text, str)
    for line in text.splitlines():
        if line.startswith("jobagentctl_long_polls_waiting "):
            return float(line.split()[1])
    return 0.0


def test_regression_long_poll_claim_loses_lease(live_server: LiveServer, tmp_path: Path) -> None:
    """Fixed in 7d14782 (owner: run). Before it, ``run --loop`` counted the local lease deadline
    from when its long-poll claim was sent, so a job arriving after the agent had waited longer
    than its lease was declared lost at once (the child stopped, nothing reported), and with
    an idle fleet the job livelocked."""
    agent = live_server.create_agent("long-poller")
    report = tmp_path / "report.jsonl"
    env = {**live_server.base_env(), **live_server.env(), "JOBAGENTCTL_AGENT": agent}
    proc = subprocess.Popen(
        cli_command(
            "run",
            "--loop",
            "--max-jobs",
            "1",
            "--lease-seconds",
            str(_LEASE),
            "--report",
            str(report),
            "--",
            "sh",
            "-c",
            "sleep 0.2",
        ),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while _long_polls_waiting(live_server) < 1:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the agent never started its long-poll"
            time.sleep(0.05)
        # The scenario itself is a wait: the agent must have been waiting for work for longer
        # than its lease when the job arrives (before the fix, in one long-poll request).
        time.sleep(_LEASE + 1.5)
        live_server.enqueue(agent)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    record = json.loads(report.read_text(encoding="utf-8").splitlines()[0])
    assert record["status"] == "successful", (record, stderr.decode(errors="replace"))
    assert proc.returncode == 0
