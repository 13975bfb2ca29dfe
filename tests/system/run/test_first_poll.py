"""Agents started together spread their first long-poll: ``run --loop`` waits a random part of
its first poll (then whole polls), so a fleet that (re)connected at once does not re-poll in
the same second every 30 s. Read from the request bodies ``--debug`` prints, against a real
server with nothing queued; the server still answers each only after its ``waitSeconds``."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobagentctl.supervisor.claiming import FIRST_POLL_FRACTION, MAX_POLL_SECONDS
from tests.fixtures.cli import cli_command
from tests.fixtures.live_server import LiveServer, LiveServerFactory

AGENTS = 4


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServerFactory(f"sqlite:///{tmp_path / 'poll.db'}", tmp_path) as factory:
        yield factory()


def _first_waits(proc: subprocess.Popen[str], polls: int) -> list[float]:
    """The ``waitSeconds`` of the first ``polls`` claim-next bodies ``proc`` sends."""
    waits: list[float] = []
    assert proc.stderr is not None
    for line in proc.stderr:  # ends when the process does: the test then fails below
        body = re.search(r"> (\{.*\})$", line.strip())
        if body is not None and "waitSeconds" in body.group(1):
            waits.append(float(json.loads(body.group(1))["waitSeconds"]))
            if len(waits) == polls:
                break
    return waits


def test_agents_started_together_spread_their_first_long_poll(server: LiveServer) -> None:
    agent = server.create_agent("pollers")
    env = {**server.base_env(), **server.env()}
    # A 90 s lease: polls are capped at 30 s, not at a third of the lease.
    args = ["--debug", "--agent", agent, "run", "--loop", "--lease-seconds", "90", "--", "true"]
    procs = [
        subprocess.Popen(cli_command(*args), env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(AGENTS)
    ]
    try:
        firsts = [_first_waits(proc, 1) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(30)
    waits = [w[0] for w in firsts if w]
    assert len(waits) == AGENTS, firsts
    assert all(FIRST_POLL_FRACTION * MAX_POLL_SECONDS <= w < MAX_POLL_SECONDS for w in waits)
    assert len(set(waits)) == AGENTS, waits  # each its own
