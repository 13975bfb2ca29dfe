"""Section `reaper` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

from benchmarks import direct
from benchmarks.figures import Row, verdict
from benchmarks.sections import fmt, pick


def rows(mode: str) -> list[Row]:
    claims, expired = pick(mode, full=(10000, 1000), quick=(2000, 200), smoke=(200, 20))
    busy, empty = direct.reaper_pass("postgres", claims, expired)
    return [
        Row(
            f"reaper pass, {claims:,} claims with {expired:,} expired, PostgreSQL",
            fmt(busy * 1000, " ms"),
            f"empty pass {fmt(empty * 1000, ' ms')}",
            "",
            "≤ 20 ms / ≤ 5 ms",
            verdict(busy <= 0.020 and empty <= 0.005),
        )
    ]
