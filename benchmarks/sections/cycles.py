"""Section `cycles` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

from benchmarks import direct
from benchmarks.figures import Row, http_cycles
from benchmarks.sections import fmt, pick


def rows(mode: str) -> list[Row]:
    """SQLite, and PostgreSQL at 1 and 32 agents: the API against the store's calls issued
    in-process by ONE Python process (which may itself be the bottleneck: its CPU is shown).
    PostgreSQL at 8 agents, against honest ceilings, is section ``ceilings``."""
    rows: list[Row] = []
    jobs = pick(
        mode,
        full={1: 1500, 8: 5000, 32: 5000},
        quick={1: 150, 8: 400, 32: 400},
        smoke={1: 10, 8: 24, 32: 40},
    )
    for kind, concs in (("sqlite", (1, 8, 32)), ("postgres", (1, 32))):
        for conc in concs:
            http = http_cycles(kind, conc, jobs[conc])
            raw = direct.cycles(kind, conc, jobs[conc])
            ratio = http.rate / raw.rate if raw.rate else 0.0
            share = raw.client_cpu / raw.seconds if raw.seconds else 0.0
            bound = " **client-bound**" if share >= 0.8 else ""
            rows.append(
                Row(
                    f"claim+complete cycles/s, {kind}, {conc} agents (load-gen CPU "
                    f"{100 * http.loadgen_cpu / http.seconds:.0f} % of a core)",
                    fmt(http.rate),
                    f"direct SQL, 1 process at {100 * share:.0f} % of a core{bound}: "
                    f"{fmt(raw.rate)}",
                    f"{ratio:.2f}×",
                    "",
                    "—",
                )
            )
    return rows
