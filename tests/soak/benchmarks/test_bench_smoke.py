"""The benchmarks' CI smoke run: every section runs end to end at tiny sizes, so they never rot.

It asserts that every row is filled, never anything about speed (the machine is shared). The
sections of ``benchmarks.run`` run in groups, one test each, so each stays well inside the
suite's per-test timeout and the groups spread over the xdist workers. Every other benchmark
command the docs cite (the long-poll herd, the reaper's plan, the pgbench designs, the HTTP
core A/B, the CLI's startup, growth and the fleet) runs on its own, at tiny sizes too: a
command that is neither here nor retired (docs/benchmarks.md) would rot unseen.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.databases import skip_or_fail_without_postgres

ROOT = Path(__file__).resolve().parents[3]

# Rows each section prints in smoke mode.
ROWS = {
    "ceilings": 8,  # API vs seed/project/direct, batched, no fast path, PG CPU, per job, peer
    "scaleout": 2,  # 1 and 2 server processes
    "growth": 2,  # throughput and reaper pass over 1k finished jobs
    "cycles": 5,  # sqlite × 3 concurrencies, postgres × 2
    "heartbeats": 2,
    "reaper": 1,
    "pickup": 2,
    "recovery": 2,
    "cli": 7,  # --version, heartbeat, complete, claim -o env, list, heartbeat over https, Tab
    "supervision": 1,
    "shipping": 2,  # wall with/without shipping; server RSS and the stored log
    "logs": 4,  # heartbeat p99, pickup, server CPU per chunk, database bytes per chunk
    "fleet": 2,  # postgres and sqlite, 20 agents
    "quiet_run": 1,  # run around a quiet command
    # ctrlplane's own server is not run by the suite (it needs node and the npm registry): the
    # smoke run points the section at no state, so it prints ctrlplane's "skipped" row with why,
    # ours on the V1 and V2 paths, and the V1 path's cost over the V2 path's
    "peer_ctrlplane": 4,
}
GROUPS = [
    ("ceilings",),
    ("scaleout", "growth"),
    ("cycles", "heartbeats", "reaper"),
    ("pickup", "recovery", "supervision"),
    ("shipping",),
    ("cli", "logs"),
    ("fleet",),
    ("quiet_run", "peer_ctrlplane"),
]


def test_groups_cover_every_section() -> None:
    from benchmarks.run import SECTIONS

    assert sorted(s for g in GROUPS for s in g) == sorted(SECTIONS) == sorted(ROWS)


def _smoke(*argv: str) -> str:
    """``python -m ARGV`` from the repository root without a load gate; its stdout."""
    skip_or_fail_without_postgres()
    out = subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "BENCH_GATE_WAIT": "0",
            "BENCH_CTRLPLANE_STATE": "/nonexistent/ctrlplane/state.json",
        },
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _table_rows(stdout: str) -> list[list[str]]:
    """The cells of each figure row of the markdown tables in ``stdout`` (headers left out)."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    separator = [set(line) <= set("|-") for line in lines]
    # A header is the line just above a separator.
    figures = [
        line
        for i, line in enumerate(lines)
        if not separator[i] and not (i + 1 < len(lines) and separator[i + 1])
    ]
    for row in figures:
        assert "nan" not in row, row
    return [[c.strip() for c in row.strip("|").split("|")] for row in figures]


@pytest.mark.slow
@pytest.mark.timeout(300)  # each group takes ≈ 20-40 s on a quiet machine, 2-4× that when loaded
@pytest.mark.parametrize("group", GROUPS, ids="+".join)
def test_benchmarks_smoke_run_fills_every_row(group: tuple[str, ...]) -> None:
    stdout = _smoke("benchmarks.run", "--mode", "smoke", "--only", *group)
    figures = _table_rows(stdout)
    assert len(figures) == sum(ROWS[s] for s in group), stdout
    for cells in figures:
        assert cells[1] and cells[2], f"empty figure in {cells!r}"
        assert cells[-1], f"no load-gate cell in {cells!r}"


# (command, figure rows it prints, the columns that must be filled in each)
STANDALONE = {
    # 2 databases × (no waiters, 10 waiters started at once)
    "herd": (
        ("benchmarks.herd", "--waiters", "10", "--seconds", "1", "--idle", "0.5", "--together"),
        4,
        range(10),
    ),
    # 4 designs: project, reduced, reduced+schema, seed
    "pgbench": (("benchmarks.pgbench", "--jobs", "40", "--rounds", "1"), 4, range(6)),
    # the HTTP core A/B's harness: this tree's server against HEAD's source (granian and msgspec
    # are not installed here; their variants are measured by hand, docs/benchmarks.md)
    "hotpath_ab": (
        (
            "benchmarks.hotpath_ab",
            "--rounds",
            "1",
            "--jobs",
            "40",
            "--variants",
            "uvicorn,git:HEAD",
        ),
        2,
        range(4),
    ),
    # every process of the CLI's startup table once: 3 floors, 5 commands, 2 over https
    "cli_startup": (("benchmarks.cli_startup", "--runs", "1"), 10, range(5)),
    # one size over finished jobs, as the `growth` section, through its own command
    "growth": (("benchmarks.growth", "--rows", "1000", "--jobs", "48"), 1, range(6)),
    # ctrlplane skipped (the suite never runs it: node and the npm registry), with why; ours on
    # the V1 and V2 paths (the gateway row needs ctrlplane too)
    "peer_ctrlplane": (("benchmarks.peer_ctrlplane", "--cycles", "5"), 3, range(2)),
    # 20 agents on SQLite, as the `fleet` section at smoke size, through its own command
    "fleet": (
        (
            "benchmarks.fleet",
            *("--db", "sqlite", "--agents", "20", "--seconds", "2", "--wait", "2"),
            *("--every", "0.5", "--rate", "5", "--per-generator", "10", "--settle", "1"),
        ),
        1,
        range(11),
    ),
}


# Commands the smoke run reaches otherwise: the runner itself, the two with tests of their
# own below, and the `ceilings` section's load generators and peer (run as `python -m`).
ELSEWHERE = {
    "run",
    "explain_reaper",
    "reaper_ab",
    "workers",
    "peer_procrastinate",
    # the `quiet_run` section runs the command's own measurement (quiet_run.quiet_run)
    "quiet_run",
}


# Commands that print one line of figures rather than a table: (argv, a pattern of that line).
PLAIN = {
    # 1 MB printed once with shipping on and once off, against a 16 MiB cap
    "shipping": (("benchmarks.shipping", "1", "1"), r"stored/printed 1\.000 "),
    # tiny chunks and 64 KiB chunks under a 64 KiB cap, on SQLite at a fiftieth of the requests
    "logcap": (("benchmarks.logcap", "--sqlite", "--scale", "0.02"), r"cap 65536 bytes"),
    # the store statements of one V1 and one V2 cycle, both databases (the last line: SQLite's V2)
    "peer_statements": (
        ("benchmarks.peer_ctrlplane", "--statements"),
        r"sqlite, ours, V2 path \(claim-next \+ status\): \d+ — claim_next",
    ),
    # four `redact add`s of 1 KiB to a real run
    "redact_adds": (("benchmarks.redact_adds", "--count", "4", "--size", "1024"), r"\{"),
}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", PLAIN)
def test_plain_benchmark_prints_its_figures(name: str) -> None:
    argv, pattern = PLAIN[name]
    stdout = _smoke(*argv)
    assert re.search(pattern, stdout), stdout


def test_every_benchmark_command_is_smoked() -> None:
    """A ``python -m benchmarks.X`` command is smoked here or retired (docs/benchmarks.md)."""
    bench = ROOT / "benchmarks"
    commands = {
        p.stem for p in bench.glob("*.py") if 'if __name__ == "__main__":' in p.read_text()
    } | {p.parent.name for p in bench.glob("*/__main__.py")}
    smoked = {argv[0].removeprefix("benchmarks.") for argv, _, _ in STANDALONE.values()}
    smoked |= {argv[0].removeprefix("benchmarks.") for argv, _ in PLAIN.values()}
    assert commands - smoked - ELSEWHERE == set()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", STANDALONE)
def test_standalone_benchmark_fills_every_row(name: str) -> None:
    argv, rows, filled = STANDALONE[name]
    stdout = _smoke(*argv)
    figures = _table_rows(stdout)
    assert len(figures) == rows, stdout
    for cells in figures:
        assert all(cells[i] for i in filled), f"empty cell in {cells!r}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_explain_reaper_prints_both_plans() -> None:
    """One reaper batch over 100 finished jobs, with the default plan and without hash joins:
    each line ends with PostgreSQL's execution time."""
    lines = _smoke("benchmarks.explain_reaper", "--rows", "100").splitlines()
    timed = [line for line in lines if re.search(r"Execution Time: [0-9.]+ ms$", line)]
    assert len(timed) == 2, lines


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_reaper_ab_times_each_variant() -> None:
    """One interleaved round of two reaper variants over 100 finished jobs: a line each, with
    its wall and on-CPU medians; then one SQLite pass."""
    argv = ("benchmarks.reaper_ab", "--rows", "100", "--rounds", "1")
    lines = _smoke(*argv, "--variants", "store reap(1000);no job lock(1000)").splitlines()
    timed = [line for line in lines if re.search(r"on-CPU median +[0-9.]+ ms$", line)]
    assert len(timed) == 2, lines
    sqlite = _smoke("benchmarks.reaper_ab", "--sqlite", "1000", "--rounds", "1").splitlines()
    assert re.search(r"store reap\(1000\) +wall median +[0-9.]+ ms", sqlite[-1]), sqlite
