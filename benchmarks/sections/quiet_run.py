"""Section `quiet_run` of `make bench` (`benchmarks.run`): its rows of the table
(measured by `benchmarks/quiet_run.py`)."""

from __future__ import annotations

from benchmarks import quiet_run as measured
from benchmarks.figures import Row


def rows(mode: str) -> list[Row]:
    return measured.section(mode)
