"""Section `growth` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

import sys

from benchmarks import ceilings, growth
from benchmarks.ceilings import Figure
from benchmarks.figures import Row, verdict
from benchmarks.sections import fmt, pick, pick_runs


def rows(mode: str) -> list[Row]:
    """The same figures over 10k and 100k finished jobs (1M: python -m
    benchmarks.growth --rows 1000000, not part of make bench)."""
    sizes = pick(mode, full=(10_000, 100_000), quick=(10_000,), smoke=(1_000,))
    jobs = pick(mode, full=4000, quick=800, smoke=48)
    project = ceilings.project_script()
    results = []
    for rows in sizes:
        print(f"  {rows:,} rows", file=sys.stderr, flush=True)
        results.append(growth.measure(rows, jobs, project, smoke=mode == "smoke"))
    first = results[0]
    out = []
    for g in results:
        _, gate = pick_runs([g.api])
        _, pgate = pick_runs([g.pgbench])
        out.append(
            Row(
                f"flat as it grows: {g.rows:,} finished jobs in job / job_attempt, autovacuum on "
                f"— API cycles/s, 8 agents (pgbench project SQL {fmt(g.pgbench.rate)}/s, "
                f"{g.pgbench.cpu_ms_per_job:.3f} ms PG CPU/cycle)",
                fmt(g.api.rate),
                f"at {first.rows:,} rows: API {fmt(first.api.rate)}, pgbench "
                f"{fmt(first.pgbench.rate)}/s ({first.pgbench.cpu_ms_per_job:.3f} ms)",
                f"{g.api.rate / first.api.rate:.2f}× / "
                f"{g.pgbench.cpu_ms_per_job / first.pgbench.cpu_ms_per_job:.2f}× CPU",
                "",
                "—",
                f"api {gate}; pgbench {pgate}",
            )
        )
        _, rgate = pick_runs([Figure("reap", 1, 1.0, 0.0, 0.0, gate=g.reap_gate)])
        out.append(
            Row(
                f"reaper pass, {g.claims:,} claims with {g.expired:,} expired, over {g.rows:,} "
                "finished jobs",
                fmt(1000 * g.reap_busy, " ms"),
                f"empty pass {fmt(1000 * g.reap_empty, ' ms')}",
                "",
                "≤ 20 ms",
                verdict(g.reap_busy <= 0.020),
                rgate,
            )
        )
    return out
