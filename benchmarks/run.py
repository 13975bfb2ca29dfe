"""`make bench` / `make bench-quick`: every figure of docs/benchmarks.md, side by side, in one run.

The table of sections and the runner: each section measures in its own module,
``benchmarks/sections/NAME.py``; this one gates, collects and prints the rows.

Usage: python -m benchmarks.run [--mode full|quick|smoke] [--only NAME ...] [--out FILE]
Prints a markdown table; ratios are computed from figures measured in this same run.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable

from benchmarks.ceilings import Figure, quiet_gate
from benchmarks.common import PG_URL, psql
from benchmarks.figures import Row
from benchmarks.gate import Measured
from benchmarks.sections import (
    ceilings,
    cli,
    cycles,
    fleet,
    growth,
    heartbeats,
    logs,
    peer_ctrlplane,
    pick_runs,
    pickup,
    quiet_run,
    reaper,
    recovery,
    scaleout,
    shipping,
    supervision,
)

# The sections in the order they run, each its own module (benchmarks/sections/): its rows.
SECTIONS: dict[str, Callable[[str], list[Row]]] = {
    "ceilings": ceilings.rows,
    "scaleout": scaleout.rows,
    "growth": growth.rows,
    "cycles": cycles.rows,
    "heartbeats": heartbeats.rows,
    "reaper": reaper.rows,
    "pickup": pickup.rows,
    "recovery": recovery.rows,
    "cli": cli.rows,
    "supervision": supervision.rows,
    "shipping": shipping.rows,
    "logs": logs.rows,
    "fleet": fleet.rows,
    "quiet_run": quiet_run.rows,
    "peer_ctrlplane": peer_ctrlplane.rows,
}


def _commit() -> str:
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", root, *args], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}{' (with uncommitted changes)' if dirty else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--mode",
        choices=["full", "quick", "smoke"],
        default="full",
        help="sizes: full (make bench), quick (make bench-quick), smoke (CI: seconds)",
    )
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS), default=None)
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()
    psql(PG_URL, "SELECT 1")
    started = time.perf_counter()
    rows: list[Row] = []
    for name, section in SECTIONS.items():
        if args.only and name not in args.only:
            continue
        print(f"… {name}", file=sys.stderr, flush=True)
        # Sections without a gate per run get one for the whole section.
        gate = quiet_gate(args.mode == "smoke")
        with Measured(gate, dict):
            got = section(args.mode)
        _, cell = pick_runs([Figure(name, 1, 1.0, 0.0, 0.0, gate=gate)])
        for row in got:
            if row.gate == "not gated":
                row.gate = f"section: {cell}"
        rows.extend(got)
    # "quiet 3/3; quiet 1/1" or "section: quiet 1/1"; a BUSY anywhere in the cell is not quiet.
    quiet = sum("quiet" in r.gate and "BUSY" not in r.gate for r in rows)
    lines = [
        f"Commit {_commit()}; {quiet} of {len(rows)} rows measured with the machine quiet "
        "(load gate: see docs/benchmarks.md).",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, PostgreSQL {psql(PG_URL, 'SHOW server_version')}; "
        f"mode {args.mode}; {time.perf_counter() - started:.0f} s.",
        "",
        "| figure | ours | comparison (same run) | ratio | target | met | load gate |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.figure} | {r.ours} | {r.comparison} | {r.ratio} | {r.target} | {r.met} | {r.gate} |"
        for r in rows
    ]
    table = "\n".join(lines)
    print(table)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
