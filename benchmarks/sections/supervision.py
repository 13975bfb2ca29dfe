"""Section `supervision` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

from benchmarks.figures import Row, supervision, verdict
from benchmarks.sections import pick


def rows(mode: str) -> list[Row]:
    share, rss, wall = supervision(pick(mode, full=60, quick=5, smoke=2))
    return [
        Row(
            f"`run` supervising `sleep` for {wall:.0f} s: CPU share / peak RSS",
            f"{100 * share:.2f} % / {rss:.0f} MB",
            "one core / 80 MB",
            f"{share:.4f}× / {rss / 80:.2f}×",
            "≤ 1 % / ≤ 80 MB",
            verdict(share <= 0.01 and rss <= 80),
        )
    ]
