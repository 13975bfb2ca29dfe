"""Section `shipping` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

from benchmarks.figures import Row, verdict
from benchmarks.sections import pick


def rows(mode: str) -> list[Row]:
    """`run` shipping a fast printer's output to the job's log vs ``--no-ship-output``."""
    from benchmarks.shipping import output_cost

    mib = pick(mode, full=50, quick=20, smoke=1)
    got = output_cost(mib * 1024 * 1024, pick(mode, full=3, quick=2, smoke=1))
    ratio = got.on_seconds / got.off_seconds if got.off_seconds else float("nan")
    cap = 10 * 1024 * 1024
    shape = f"{len(got.markers)} marker(s)" if got.markers else "no marker"
    return [
        Row(
            f"`run` printing {mib} MB as fast as it can: wall, shipping on (CPU of run and "
            f"the command: {got.on_cpu:.2f} s vs {got.off_cpu:.2f} s)",
            f"{got.on_seconds:.2f} s",
            f"`--no-ship-output`: {got.off_seconds:.2f} s",
            f"{ratio:.2f}×",
            "≤ 1.2×",
            verdict(ratio <= 1.2),
        ),
        Row(
            f"… server peak RSS / log stored for the job ({got.chunks} chunks, {shape})",
            f"{got.server_rss_mb:.0f} MB / {got.stored_bytes / 1024 / 1024:.2f} MiB",
            f"printed / cap: {got.printed / 1024 / 1024:.0f} MiB / {cap // 1024 // 1024} MiB",
            f"{got.stored_bytes / cap:.2f}× of the cap",
            "≤ cap (head + marker + newest)",
            verdict(got.stored_bytes <= cap and (got.printed <= cap or bool(got.markers))),
        ),
    ]
