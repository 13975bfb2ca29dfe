"""Section `logs` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

from benchmarks.common import percentile
from benchmarks.figures import Row, verdict
from benchmarks.sections import fmt, pick


def rows(mode: str) -> list[Row]:
    """Live output: N running jobs, each appending a line a second, against the same jobs
    without logs (one server process, PostgreSQL)."""
    from benchmarks.logload import LINE, log_load

    running, seconds = pick(mode, full=(1000, 30.0), quick=(200, 10.0), smoke=(10, 4.0))
    quiet, loud = log_load(running, seconds)
    hb_loud, hb_quiet = percentile(loud.heartbeats, 99), percentile(quiet.heartbeats, 99)
    pk_loud, pk_quiet = percentile(loud.pickups, 50), percentile(quiet.pickups, 50)
    chunks = max(loud.chunks, 1)
    cpu_per_chunk = max(0.0, loud.server_cpu - quiet.server_cpu) / chunks
    return [
        Row(
            f"heartbeat p99, {running} running jobs each appending a line/s, PostgreSQL",
            fmt(1000 * hb_loud, " ms"),
            f"without logs {fmt(1000 * hb_quiet, ' ms')}",
            f"{hb_loud / hb_quiet:.2f}×",
            "≤ 50 ms",
            verdict(hb_loud <= 0.050),
        ),
        Row(
            f"claim pickup p50 (long-poll) under the same {running} jobs",
            fmt(1000 * pk_loud, " ms"),
            f"without logs {fmt(1000 * pk_quiet, ' ms')}",
            f"{pk_loud / pk_quiet:.2f}×",
            "≤ 1.10×",
            verdict(pk_loud <= 1.10 * pk_quiet),
        ),
        Row(
            "server CPU per log chunk (one line, own request)",
            fmt(1e6 * cpu_per_chunk, " µs"),
            f"{loud.chunks:,} chunks: server CPU {fmt(loud.server_cpu, ' s')} vs "
            f"{fmt(quiet.server_cpu, ' s')} without",
            "",
            "",
            "—",
        ),
        Row(
            f"database bytes per log chunk ({len(LINE)}-byte line), PostgreSQL",
            fmt(loud.db_bytes / chunks, " B"),
            f"{len(LINE)} B of output",
            f"{loud.db_bytes / chunks / len(LINE):.2f}×",
            "",
            "—",
        ),
    ]
