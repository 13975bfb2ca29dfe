"""Section `recovery` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

from benchmarks.figures import Row, recovery, verdict
from benchmarks.sections import fmt, pick


def rows(mode: str) -> list[Row]:
    lease, reap = (2, 0.5)
    rows = []
    for kind in ("sqlite", "postgres"):
        times = recovery(kind, pick(mode, full=8, quick=2, smoke=1), lease, reap)
        bound = lease + reap
        worst = max(times)
        rows.append(
            Row(
                f"recovery after SIGKILL, {kind} (lease {lease} s, reap {reap} s; "
                f"{len(times)} trials, worst / median)",
                f"{fmt(worst, ' s')} / {fmt(sorted(times)[len(times) // 2], ' s')}",
                f"lease + reap interval {fmt(bound, ' s')}",
                f"{worst / bound:.2f}×",
                "≤ 1.0× every time",
                verdict(worst <= bound),
            )
        )
    return rows
