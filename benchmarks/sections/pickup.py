"""Section `pickup` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

from benchmarks.common import percentile
from benchmarks.figures import Row, pickup_latency, verdict
from benchmarks.sections import fmt, pick


def rows(mode: str) -> list[Row]:
    rows = []
    for kind in ("sqlite", "postgres"):
        lp, poll = pickup_latency(kind, pick(mode, full=60, quick=12, smoke=2))
        rows.append(
            Row(
                f"pickup latency, long-poll agent, {kind} (p50 / p99)",
                f"{fmt(1000 * percentile(lp, 50), ' ms')} / "
                f"{fmt(1000 * percentile(lp, 99), ' ms')}",
                f"1 s polling: {fmt(1000 * percentile(poll, 50), ' ms')} / "
                f"{fmt(1000 * percentile(poll, 99), ' ms')}",
                f"{percentile(lp, 50) / percentile(poll, 50):.3f}×",
                "p50 ≤ 20 ms",
                verdict(percentile(lp, 50) <= 0.020),
            )
        )
    return rows
