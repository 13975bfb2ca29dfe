"""``inspect-claims --watch`` in a real terminal: tmux panes of 80×24 and 200×50, thousands of
claims, and a server restart under the watch (``tmux capture-pane`` reads the screen)."""

from __future__ import annotations

import re
import shlex
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobagentctl.server.store import sqlite_path
from tests.fixtures.cli import cli_command
from tests.fixtures.live_server import LiveServer, LiveServerFactory
from tests.fixtures.waiting import wait_until
from tests.system.docs.recipes import block

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

CLAIMS = 3000
EXPIRED = 12
UNLEASED = 3
AGENTS = 30


def seed_claims(server: LiveServer, agents: list[str]) -> None:
    """``CLAIMS`` inProgress jobs spread over ``agents``: ``EXPIRED`` of them past their lease
    (the reaper is off), ``UNLEASED`` without a lease, the rest with leases ending from 1 to 50
    minutes from now. Written straight into SQLite: through the API it would take minutes."""
    now = time.time()
    jobs: list[tuple[str, str, str, float]] = []
    claims: list[tuple[str, str, float, float, str, int]] = []
    attempts: list[tuple[str, str | None, str, float]] = []
    for n in range(CLAIMS):
        job, claim, agent = str(uuid.uuid4()), str(uuid.uuid4()), agents[n % len(agents)]
        claimed = now - 3600 + n
        jobs.append((job, server.workspace_id, agent, claimed))
        if n < UNLEASED:
            attempts.append((job, None, agent, claimed))
            continue
        expires = now - 60 - n if n < UNLEASED + EXPIRED else now + 60 + n
        lease = 600 if n % 2 else 3600
        claims.append((job, agent, claimed, expires, claim, lease))
        attempts.append((job, claim, agent, claimed))
    conn = sqlite3.connect(sqlite_path(server.database_url), timeout=30)
    with conn:
        conn.executemany(
            "INSERT INTO job (id, workspace_id, job_agent_id, status, created_at, updated_at,"
            " started_at) VALUES (?, ?, ?, 'inProgress', ?4, ?4, ?4)",
            jobs,
        )
        conn.executemany(
            "INSERT INTO job_claim (job_id, job_agent_id, claimed_at, claim_expires_at,"
            " claim_id, lease_seconds, attempt) VALUES (?, ?, ?, ?, ?, ?, 1)",
            claims,
        )
        conn.executemany(
            "INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at)"
            " VALUES (?, 1, ?, ?, ?)",
            attempts,
        )
    conn.close()


@pytest.fixture
def crowded(tmp_path: Path) -> Iterator[LiveServer]:
    """A SQLite server (reaper off: expired claims stay) holding ``CLAIMS`` claims."""
    with LiveServerFactory(f"sqlite:///{tmp_path / 'jobagent.db'}", tmp_path) as factory:
        server = factory(reap_interval=3600)
        agents = [server.create_agent(f"builder-{n:02d}") for n in range(AGENTS)]
        seed_claims(server, agents)
        yield server


class Pane:
    """A detached tmux session of one size running one command; ``screen()`` is what it shows."""

    def __init__(
        self, workdir: Path, size: tuple[int, int], command: list[str], env: dict[str, str]
    ):
        self.size = size
        name = f"tmux-{size[0]}x{size[1]}"
        config = workdir / f"{name}.conf"
        # No status line; a window without a client is of the default size: this one.
        config.write_text(f"set -g status off\nset -g default-size {size[0]}x{size[1]}\n")
        self.tmux = ["tmux", "-S", str(workdir / name), "-f", str(config)]
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        script = f"env {exports} {shlex.join(command)}; echo EXITED $?; sleep 600"
        width, height = (str(n) for n in size)
        new = ["new-session", "-d", "-x", width, "-y", height, "-s", "watch", "bash", "-c", script]
        subprocess.run([*self.tmux, *new], check=True)

    def screen(self) -> list[str]:
        """The pane's lines, as a person sees them (trailing blanks cut)."""
        capture = [*self.tmux, "capture-pane", "-p", "-t", "watch"]
        shown = subprocess.run(capture, check=True, capture_output=True, text=True).stdout
        return shown.rstrip("\n").split("\n")

    def keys(self, *keys: str) -> None:
        """Type ``keys`` into the pane (tmux key names: ``C-c``)."""
        subprocess.run([*self.tmux, "send-keys", "-t", "watch", *keys], check=True)

    def close(self) -> None:
        """End the session and its tmux server (ours alone: its own socket)."""
        subprocess.run([*self.tmux, "kill-server"], check=False, capture_output=True)


def watching(server: LiveServer, tmp_path: Path, size: tuple[int, int]) -> Pane:
    """``inspect-claims --watch`` in a pane of ``size``, against ``server``."""
    env = {**server.base_env(), **server.env(), "TERM": "xterm-256color"}
    env = {k: v for k, v in env.items() if k.startswith(("JOBAGENTCTL_", "XDG_", "TERM", "PATH"))}
    command = cli_command("inspect-claims", "--watch", "--interval", "0.5")
    return Pane(tmp_path, size, command, env)


def frame_of(pane: Pane, *, first: str) -> list[str]:
    """The pane's screen once its first line starts with ``first`` and it is full (a frame
    drawn before tmux gave the pane its size is narrower; the next one fits)."""

    def full() -> list[str] | None:
        lines = pane.screen()
        return lines if lines[0].startswith(first) and len(lines) == pane.size[1] else None

    return wait_until(full, what=f"a full frame starting {first!r}", timeout=60)


def table_of(lines: list[str]) -> list[dict[str, str]]:
    """The claim rows of a frame (after the summary and the header), by column: a column starts
    where its header does (cells such as ``in 45s`` hold spaces)."""
    at = next(i for i, line in enumerate(lines) if line.startswith("STATE"))
    header = lines[at]
    names = header.split()
    starts = [
        header.index(f"{name} ") if name != names[-1] else header.rindex(name) for name in names
    ]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [
        {name: line[a:b].strip() for name, (a, b) in zip(names, bounds, strict=True)}
        for line in lines[at + 1 :]
        if line.strip()
    ]


def check_frame(lines: list[str], size: tuple[int, int]) -> None:
    """What a frame of ``size`` over the seeded claims must show."""
    width, height = size
    shown = height - 2
    assert all(len(line) <= width for line in lines)
    assert f"{CLAIMS - shown:,} not shown" in lines[0]
    rows = table_of(lines)
    assert len(rows) == shown
    # Most urgent first: expired, then unleased, then the nearest expiry.
    stuck = ["expired"] * EXPIRED + ["unleased"] * UNLEASED
    assert [row["STATE"] for row in rows] == stuck + ["active"] * (shown - len(stuck))
    expiries = [row["EXPIRES"] for row in rows[len(stuck) :]]
    assert all(e.startswith("in ") for e in expiries), expiries
    # Short ids, unambiguous within the frame; agents by name.
    jobs = [row["JOB"] for row in rows]
    assert len(set(jobs)) == len(jobs) and all(7 <= len(job) < 32 for job in jobs)
    assert all(row["AGENT"].startswith("builder-") for row in rows)
    header = list(rows[0])
    if size == DOCUMENTED:
        same_as_the_docs(lines)
    if width == 80:
        # Columns gave way, in their order; the state and the id never.
        assert header[:4] == ["STATE", "JOB", "EXPIRES", "AGENT"]
        assert "CLAIM" not in header
    else:
        assert header[-1] == "CLAIM"


# The pane of the frame docs/operators.md shows, and the columns that do not depend on time.
DOCUMENTED = (80, 24)
TIMELESS = ("STATE", "AGENT", "ATT", "LEASE")


def same_as_the_docs(lines: list[str]) -> None:
    """The frame docs/operators.md shows ("Watching claims", drawn from the same claims) is
    this one, but for ids and times."""
    documented = block("docs/operators.md › Watching claims").text.rstrip("\n").split("\n")
    assert len(documented) == len(lines) == DOCUMENTED[1]
    assert max(len(line) for line in documented) <= DOCUMENTED[0]
    clock = re.compile(r"\s+\d\d:\d\d:\d\d$")
    assert clock.sub("", documented[0]) == clock.sub("", lines[0])
    assert documented[1] == lines[1]
    timeless = [[row[name] for name in TIMELESS] for row in table_of(lines)]
    assert [[row[name] for name in TIMELESS] for row in table_of(documented)] == timeless


def test_the_watch_at_80x24_and_200x50_through_a_restart(
    crowded: LiveServer, tmp_path: Path
) -> None:
    narrow, wide = (80, 24), (200, 50)
    panes = {size: watching(crowded, tmp_path, size) for size in (narrow, wide)}
    try:
        summary = f"{CLAIMS:,} claims: {EXPIRED} expired, {UNLEASED} unleased"
        for size, pane in panes.items():
            check_frame(frame_of(pane, first=summary), size)
        pane = panes[narrow]
        crowded.stop()
        outage = wait_until(
            lambda: next((ln for ln in pane.screen() if "server unreachable since" in ln), None),
            what="the outage line",
            timeout=60,
        )
        assert "next try in" in outage
        # The last claims read stay on screen meanwhile.
        assert pane.screen()[0].startswith(summary)
        crowded.start()
        # The restarted server's reaper swept the expired claims at once: the watch reads on.
        frame_of(pane, first=f"{CLAIMS - EXPIRED:,} claims: {UNLEASED} unleased")
        assert not any("unreachable" in line for line in pane.screen())
        pane.keys("C-c")
        wait_until(lambda: "EXITED 130" in pane.screen(), what="exit 130 on Ctrl-C", timeout=30)
    finally:
        for pane in panes.values():
            pane.close()
