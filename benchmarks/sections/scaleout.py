"""Section `scaleout` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

import sys

from benchmarks import ceilings
from benchmarks.ceilings import Figure
from benchmarks.figures import Row
from benchmarks.sections import fmt, median, pick, pick_runs


def rows(mode: str) -> list[Row]:
    """N server processes (separate ports) on one PostgreSQL, 8 agents spread
    round-robin over them by a 2-process load generator; interleaved rounds, medians."""
    jobs = pick(mode, full=4000, quick=800, smoke=48)
    rounds = pick(mode, full=2, quick=1, smoke=1)
    counts = pick(mode, full=(1, 2, 3, 4), quick=(1, 2), smoke=(1, 2))
    smoke = mode == "smoke"
    runs: dict[int, list[Figure]] = {}
    for r in range(rounds):
        order = counts if r % 2 == 0 else tuple(reversed(counts))
        for n in order:
            print(f"  round {r + 1}: {n} server(s)", file=sys.stderr, flush=True)
            runs.setdefault(n, []).append(ceilings.api(jobs, servers=n, smoke=smoke))
    base, base_gate = pick_runs(runs[counts[0]])
    base_rate = median([f.rate for f in base])
    rows = []
    for n in counts:
        figs, gate = pick_runs(runs[n])
        rate = median([f.rate for f in figs])
        server_ms = median([1000 * (f.cpu - f.backend_cpu) / f.cycles for f in figs])
        db_ms = median([1000 * f.backend_cpu / f.cycles for f in figs])
        client = median([f.client_cores for f in figs])
        busiest = max(f.busiest_client for f in runs[n])
        rows.append(
            Row(
                f"scale-out: {n} server process{'es' if n > 1 else ''} on one PostgreSQL, 8 "
                f"agents round-robin (CPU per job: servers {server_ms:.2f} ms + their backends "
                f"{db_ms:.2f} ms; load generator {client:.2f} cores, busiest "
                f"{100 * busiest:.0f} %{' **client-bound**' if busiest >= 0.8 else ''})",
                fmt(rate),
                f"1 server {fmt(base_rate)}",
                f"{rate / base_rate:.2f}×",
                "",
                "—",
                gate if n == counts[0] else f"{gate}; 1 server {base_gate}",
            )
        )
    return rows
