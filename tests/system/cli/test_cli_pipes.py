"""`jobagentctl … | head` under `set -o pipefail`: real processes, real pipes.

A reader that stops early must not turn into an error: no traceback, no INTERNAL_ERROR line,
exit 0 (README: output). `| true` closes the pipe before the first write, so the closed pipe is
certain there; `| head` closes it while output is still being written when it exceeds the pipe's
buffer (the job count below makes sure it does).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.fixtures.cli import Ran, run_bash
from tests.fixtures.live_server import LiveServer
from tests.fixtures.server_cli import env_for

JOBS = 300  # an indented JSON job is ~400 bytes: well past a 64 KiB pipe buffer


@pytest.fixture
def sqlite_only(database_url: str) -> None:
    if not database_url.startswith("sqlite"):
        pytest.skip("pipes are the CLI's business: one database (SQLite) is enough")


@pytest.fixture
def crowded(sqlite_only: None, live_server: LiveServer) -> tuple[LiveServer, str]:
    agent = live_server.create_agent("crowd")
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: live_server.enqueue(agent), range(JOBS)))
    return live_server, agent


def pipeline(server: LiveServer, agent: str, script: str) -> Ran:
    return run_bash(
        f'set -o pipefail\njac() {{ jobagentctl "$@"; }}\n{script}',
        env=env_for(server, agent),
        timeout=120,
    )


# (pipeline, lines expected on stdout; None: the first character of a JSON document)
PIPELINES = [
    ("jac list --all-pages | head -1", 1),
    # -q: a page cut at its limit says so on stderr otherwise, even piped
    ("jac jobs list -q | head -1", 1),
    ("jac jobs list --all-pages -o json | head -c1", None),
    ("jac list --all-pages --json | head -c1", None),
    ("jac list --all-pages | true", 0),
    ("jac jobs list --all-pages -o json | true", 0),
    ("jac agents list --json | true", 0),
]


def test_a_reader_that_stops_early_is_no_error(crowded: tuple[LiveServer, str]) -> None:
    server, agent = crowded
    for script, lines in PIPELINES:
        ran = pipeline(server, agent, script)
        assert (script, ran.returncode, ran.stderr) == (script, 0, "")
        if lines is None:
            assert ran.stdout in ("[", "{"), script
        else:
            assert len(ran.stdout.splitlines()) == lines, script

    # A full read still gets everything.
    ran = pipeline(server, agent, "jac list --all-pages | wc -l")
    assert ran.returncode == 0, ran.stderr
    assert int(ran.stdout.strip()) == JOBS

    # An error keeps its exit code when the reader has left.
    missing = "00000000-0000-4000-8000-000000000000"
    ran = pipeline(server, agent, f"jac jobs get {missing} | true")
    assert ran.returncode == 5
    assert "error:" in ran.stderr
