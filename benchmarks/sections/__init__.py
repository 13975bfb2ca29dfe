"""The sections of `make bench`, one module each; `benchmarks/run.py` holds their table.

Each module's ``rows(mode)`` measures its figures at the sizes of ``mode`` (full, quick, smoke)
and returns them as rows of the table. Shared here: sizes by mode, number format, and the
medians of the runs a load gate passed.
"""

from __future__ import annotations

import statistics
from typing import TypeVar

from benchmarks.ceilings import Figure

__all__ = ["fmt", "median", "pick", "pick_runs"]

T = TypeVar("T")


def pick(mode: str, *, full: T, quick: T, smoke: T) -> T:
    return {"full": full, "quick": quick, "smoke": smoke}[mode]


def fmt(x: float, unit: str = "") -> str:
    if x >= 100:
        return f"{x:,.0f}{unit}"
    if x >= 10:
        return f"{x:.1f}{unit}"
    return f"{x:.2f}{unit}"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pick_runs(figs: list[Figure]) -> tuple[list[Figure], str]:
    """The quiet runs if any (else all, marked BUSY) and the gate cell."""
    quiet = [f for f in figs if f.gate.passed]
    if quiet:
        return quiet, f"quiet {len(quiet)}/{len(figs)}"
    worst = max(f.gate.foreign_during for f in figs)
    return figs, f"**BUSY** 0/{len(figs)} (others up to {worst:.2f} cores)"
