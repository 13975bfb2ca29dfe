"""Section `cli` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

from benchmarks import ceilings
from benchmarks.ceilings import Figure
from benchmarks.figures import Row, verdict
from benchmarks.gate import Measured
from benchmarks.sections import fmt, pick, pick_runs


def rows(mode: str) -> list[Row]:
    """Issue 15 §3, through benchmarks/cli_startup.py (the cli engineer's): whole processes,
    every process once per round, medians; the floor is the stack's own import."""
    from benchmarks import cli_startup

    runs = pick(mode, full=15, quick=5, smoke=1)
    gate = ceilings.quiet_gate(mode == "smoke")
    with Measured(gate, dict):
        f = cli_startup.measure(runs)
    _, cell = pick_runs([Figure("cli", 1, 1.0, 0.0, 0.0, gate=gate)])
    floor = f[cli_startup.FLOOR]
    base = f["python -c pass"]
    rows = [
        Row(
            "CLI start-up: `jobagentctl --version`",
            fmt(1000 * f["--version"], " ms"),
            f"`python -c pass` {fmt(1000 * base, ' ms')}",
            f"{f['--version'] / base:.1f}×",
            "≤ 4×",
            verdict(f["--version"] <= 4 * base),
            cell,
        )
    ]
    for name, limit in cli_startup.TARGETS.items():
        rows.append(
            Row(
                f"CLI round trip, whole process: `jobagentctl {name}` (median of {runs})",
                fmt(1000 * f[name], " ms"),
                f"floor `import typer, httpx, pydantic_settings` {fmt(1000 * floor, ' ms')}",
                f"{f[name] / floor:.2f}×",
                f"≤ {limit:.1f}×",
                verdict(f[name] <= limit * floor),
                cell,
            )
        )
    for https, plain in ((cli_startup.HTTPS_HEARTBEAT, "heartbeat -q"),):
        rows.append(
            Row(
                f"CLI round trip over HTTPS (private CA): `jobagentctl {https}` (median of {runs})",
                fmt(1000 * f[https], " ms"),
                f"the same over http:// {fmt(1000 * f[plain], ' ms')}",
                f"{f[https] / f[plain]:.2f}×",
                "stated (TLS's cost)",
                "—",
                cell,
            )
        )
    tab = f["Tab completion (bash)"]
    rows.append(
        Row(
            "one Tab completion (bash), whole process",
            fmt(1000 * tab, " ms"),
            f"floor {fmt(1000 * floor, ' ms')}",
            f"{tab / floor:.2f}×",
            "≤ 0.10 s",
            verdict(tab <= 0.10),
            cell,
        )
    )
    return rows
