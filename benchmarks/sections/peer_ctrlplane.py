"""Section `peer_ctrlplane` of `make bench` (`benchmarks.run`): its rows of the table
(measured by `benchmarks/peer_ctrlplane.py`)."""

from __future__ import annotations

from benchmarks import peer_ctrlplane as measured
from benchmarks.figures import Row


def rows(mode: str) -> list[Row]:
    return measured.section(mode)
