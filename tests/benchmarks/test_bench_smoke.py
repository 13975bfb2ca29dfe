"""The benchmarks' CI smoke run: every section runs end to end at tiny sizes, so they never rot.

It asserts that every row is filled, never anything about speed (the machine is shared).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.databases import skip_or_fail_without_postgres

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_benchmarks_smoke_run_fills_every_row() -> None:
    skip_or_fail_without_postgres()
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--mode", "smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    figures = rows[1:]  # rows[0] is the header
    # ceilings 6; scale-out 2 (1 and 2 servers); growth 2 (1k rows); cycles 5 (sqlite × 3,
    # postgres × 2); heartbeats 2; reaper 1; pickup 2; recovery 2; cli 2; supervision 1.
    assert len(figures) == 25, out.stdout
    for row in figures:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] and cells[2], f"empty figure in {row!r}"
        assert "nan" not in row, row
