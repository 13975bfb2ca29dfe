"""The benchmarks' CI smoke run: every section runs end to end at tiny sizes, so they never rot.

It asserts that every row is filled, never anything about speed (the machine is shared). The
sections run in groups, one test each, so each stays well inside the suite's per-test timeout
and the groups spread over the xdist workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.databases import skip_or_fail_without_postgres

ROOT = Path(__file__).resolve().parents[2]

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
    "cli": 6,  # --version, heartbeat, complete, claim -o env, list, Tab completion
    "supervision": 1,
}
GROUPS = [
    ("ceilings",),
    ("scaleout", "growth"),
    ("cycles", "heartbeats", "reaper"),
    ("pickup", "recovery", "supervision"),
    ("cli",),
]


def test_groups_cover_every_section() -> None:
    from benchmarks.run import SECTIONS

    assert sorted(s for g in GROUPS for s in g) == sorted(SECTIONS) == sorted(ROWS)


@pytest.mark.slow
@pytest.mark.timeout(300)  # each group takes ≈ 20-40 s on a quiet machine, 2-4× that when loaded
@pytest.mark.parametrize("group", GROUPS, ids="+".join)
def test_benchmarks_smoke_run_fills_every_row(group: tuple[str, ...]) -> None:
    skip_or_fail_without_postgres()
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--mode", "smoke", "--only", *group],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "BENCH_GATE_WAIT": "0",
        },
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    figures = rows[1:]  # rows[0] is the header
    assert len(figures) == sum(ROWS[s] for s in group), out.stdout
    for row in figures:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] and cells[2], f"empty figure in {row!r}"
        assert "nan" not in row, row
        assert cells[-1], f"no load-gate cell in {row!r}"
