"""Regression tests for defects the chaos harness found, one per defect, named after it.

Each reproduces the defect directly (a real server, a real ``jobagentctl run``) without the
harness's randomness, so it fails the same way every time until the owner fixes the code.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


@pytest.mark.xfail(
    strict=True,
    reason=(
        "run --loop counts the local lease deadline from when the long-poll claim was sent, so "
        "a job that arrives after the agent has waited longer than its lease is declared lost "
        "at once (exit 75, the child stopped, nothing reported); with an idle fleet the job "
        "livelocks (re-claimed and dropped every lease + reap interval); owner: run"
    ),
)
def test_regression_long_poll_claim_loses_lease(live_server: LiveServer, tmp_path: Path) -> None:
    agent = live_server.create_agent("long-poller")
    report = tmp_path / "report.jsonl"
    env = {**live_server.base_env(), **live_server.env(), "JOBAGENTCTL_AGENT": agent}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobagentctl",
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
        ],
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
        # The scenario itself is a wait: the agent's long-poll must grow older than its lease
        # (the server's long-poll lasts up to 30 s, so the request is still the same one).
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
