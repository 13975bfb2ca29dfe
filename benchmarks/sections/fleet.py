"""Section `fleet` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

from benchmarks.figures import Row, verdict
from benchmarks.sections import pick


def rows(mode: str) -> list[Row]:
    """Agents one server process holds: half idle in a claim long-poll, half heartbeating
    (``benchmarks.fleet``), at several fleet sizes on both databases."""
    from benchmarks import fleet

    sizes = pick(mode, full="1000 5000 10000 20000", quick="1000", smoke="20")
    rest = pick(
        mode,
        full=[],
        quick=["--seconds", "30"],
        smoke=[
            "--seconds",
            "2",
            "--wait",
            "2",
            "--every",
            "0.5",
            "--rate",
            "5",
            "--per-generator",
            "10",
            "--settle",
            "1",
        ],
    )
    args = fleet.parser().parse_args(["--agents", *sizes.split(), *rest])
    fleet.raise_fd_limit()
    rows: list[Row] = []
    for db in ("postgres", "sqlite"):
        for agents in args.agents:
            try:
                f = fleet.measure(db, agents, args)
            except Exception as exc:  # a fleet too big for this machine is a result too
                rows.append(Row(f"fleet, {db}, {agents:,} agents", "failed", str(exc), "", "", "—"))
                continue
            gated = db == "postgres" and agents == 10_000
            ok = f.heartbeat_p99_ms <= 50 and f.pickup_p99_ms <= 100 and f.rss_mib <= 1024
            rows.append(
                Row(
                    f"fleet, {db}, {agents:,} agents (half idle in a 30 s long-poll, half "
                    f"heartbeating every 20 s): heartbeat p99 / pickup p99 / RSS / CPU",
                    f"{f.heartbeat_p99_ms:.1f} ms / {f.pickup_p99_ms:.1f} ms / "
                    f"{f.rss_mib:.0f} MiB / {f.cpu_percent:.0f} %",
                    f"errors {f.errors}; busiest generator "
                    f"{f.generator_cpu_percent:.0f} % of a core",
                    "",
                    "≤ 50 ms / ≤ 100 ms / ≤ 1 GiB" if gated else "",
                    verdict(ok) if gated else "—",
                )
            )
    return rows
