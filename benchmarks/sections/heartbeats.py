"""Section `heartbeats` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

from benchmarks import direct
from benchmarks.figures import Row, verdict
from benchmarks.sections import fmt, pick


def rows(mode: str) -> list[Row]:
    count = pick(mode, full=20000, quick=2000, smoke=80)
    api = direct.heartbeats_http("postgres", 8, count)
    raw = direct.heartbeats_direct("postgres", 8, count)
    return [
        Row(
            "heartbeats/s, PostgreSQL, 8 agents",
            fmt(api.rate),
            f"direct SQL {fmt(raw.rate)}",
            f"{api.rate / raw.rate:.2f}×",
            "",
            "—",
        ),
        Row(
            "HOT share of job_claim updates during the heartbeat run",
            f"{100 * api.hot_share:.1f} %",
            f"direct {100 * raw.hot_share:.1f} %",
            "",
            "≥ 95 %",
            verdict(api.hot_share >= 0.95),
        ),
    ]
