"""`make bench` / `make bench-quick`: every figure of docs/benchmarks.md, side by side, in one run.

Usage: python -m benchmarks.run [--mode full|quick|smoke] [--only NAME ...] [--out FILE]
Prints a markdown table; ratios are computed from figures measured in this same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from benchmarks import direct
from benchmarks.common import PG_URL, PostgresCpu, percentile, postgres_database, psql
from benchmarks.figures import (
    Row,
    _verdict,
    cli_startup,
    http_cycles,
    pickup_latency,
    recovery,
    supervision,
)

T = TypeVar("T")


def pick(mode: str, *, full: T, quick: T, smoke: T) -> T:
    return {"full": full, "quick": quick, "smoke": smoke}[mode]


def _fmt(x: float, unit: str = "") -> str:
    if x >= 100:
        return f"{x:,.0f}{unit}"
    if x >= 10:
        return f"{x:.1f}{unit}"
    return f"{x:.2f}{unit}"


def section_cycles(mode: str) -> list[Row]:
    rows: list[Row] = []
    jobs = pick(
        mode,
        full={1: 1500, 8: 5000, 32: 5000},
        quick={1: 150, 8: 400, 32: 400},
        smoke={1: 10, 8: 24, 32: 40},
    )
    kinds = ["sqlite", "postgres"]
    for kind in kinds:
        for conc in (1, 8, 32):
            http = http_cycles(kind, conc, jobs[conc])
            raw = direct.cycles(kind, conc, jobs[conc])
            ratio = http.rate / raw.rate if raw.rate else 0.0
            target = "≥ 0.5×" if (kind == "postgres" and conc == 8) else ""
            met = _verdict(ratio >= 0.5) if target else "—"
            rows.append(
                Row(
                    f"claim+complete cycles/s, {kind}, {conc} agents (load-gen CPU "
                    f"{100 * http.loadgen_cpu / http.seconds:.0f} % of a core)",
                    _fmt(http.rate),
                    f"direct SQL {_fmt(raw.rate)}",
                    f"{ratio:.2f}×",
                    target,
                    met,
                )
            )
            if kind == "postgres" and conc == 8:
                ours_cpu = 1000 * (http.server_cpu + http.db_cpu) / max(1, http.cycles)
                raw_cpu = 1000 * (raw.client_cpu + raw.db_cpu) / max(1, raw.cycles)
                peer = procrastinate_figures(jobs[conc], conc)
                rows.append(
                    Row(
                        "CPU s per 1,000 jobs (server + PostgreSQL), 8 agents",
                        _fmt(ours_cpu, " s"),
                        f"direct {_fmt(raw_cpu, ' s')}; procrastinate "
                        f"{_fmt(peer['cpuPer1000'], ' s')}",
                        f"{ours_cpu / peer['cpuPer1000']:.2f}× peer",
                        "≤ 0.5× peer",
                        _verdict(ours_cpu <= 0.5 * peer["cpuPer1000"]),
                    )
                )
                rows.append(
                    Row(
                        "jobs/s vs procrastinate (no-op jobs, concurrency 8, same PostgreSQL)",
                        _fmt(http.rate),
                        f"procrastinate {_fmt(peer['rate'])}",
                        f"{http.rate / peer['rate']:.2f}×",
                        "≥ 2×",
                        _verdict(http.rate >= 2 * peer["rate"]),
                    )
                )
    return rows


def procrastinate_figures(jobs: int, concurrency: int) -> dict[str, float]:
    """Run the peer in its own process; count PostgreSQL CPU during its worker phase only."""
    with postgres_database("jabpeer") as url:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.peer_procrastinate",
                url,
                str(jobs),
                str(concurrency),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdin and proc.stdout
        if proc.stdout.readline().strip() != "deferred":
            raise RuntimeError("procrastinate peer failed before its run")
        pg = PostgresCpu()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        result = json.loads(proc.stdout.readline())
        db_cpu = pg.seconds()
        proc.wait()
    return {
        "rate": result["jobs"] / result["seconds"],
        "cpuPer1000": 1000 * (result["workerCpu"] + db_cpu) / result["jobs"],
    }


def section_heartbeats(mode: str) -> list[Row]:
    count = pick(mode, full=20000, quick=2000, smoke=80)
    api = direct.heartbeats_http("postgres", 8, count)
    raw = direct.heartbeats_direct("postgres", 8, count)
    return [
        Row(
            "heartbeats/s, PostgreSQL, 8 agents",
            _fmt(api.rate),
            f"direct SQL {_fmt(raw.rate)}",
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
            _verdict(api.hot_share >= 0.95),
        ),
    ]


def section_reaper(mode: str) -> list[Row]:
    claims, expired = pick(mode, full=(10000, 1000), quick=(2000, 200), smoke=(200, 20))
    busy, empty = direct.reaper_pass("postgres", claims, expired)
    return [
        Row(
            f"reaper pass, {claims:,} claims with {expired:,} expired, PostgreSQL",
            _fmt(busy * 1000, " ms"),
            f"empty pass {_fmt(empty * 1000, ' ms')}",
            "",
            "≤ 20 ms / ≤ 5 ms",
            _verdict(busy <= 0.020 and empty <= 0.005),
        )
    ]


def section_pickup(mode: str) -> list[Row]:
    rows = []
    for kind in ("sqlite", "postgres"):
        lp, poll = pickup_latency(kind, pick(mode, full=60, quick=12, smoke=2))
        rows.append(
            Row(
                f"pickup latency, long-poll agent, {kind} (p50 / p99)",
                f"{_fmt(1000 * percentile(lp, 50), ' ms')} / "
                f"{_fmt(1000 * percentile(lp, 99), ' ms')}",
                f"1 s polling: {_fmt(1000 * percentile(poll, 50), ' ms')} / "
                f"{_fmt(1000 * percentile(poll, 99), ' ms')}",
                f"{percentile(lp, 50) / percentile(poll, 50):.3f}×",
                "p50 ≤ 20 ms",
                _verdict(percentile(lp, 50) <= 0.020),
            )
        )
    return rows


def section_recovery(mode: str) -> list[Row]:
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
                f"{_fmt(worst, ' s')} / {_fmt(sorted(times)[len(times) // 2], ' s')}",
                f"lease + reap interval {_fmt(bound, ' s')}",
                f"{worst / bound:.2f}×",
                "≤ 1.0× every time",
                _verdict(worst <= bound),
            )
        )
    return rows


def section_cli(mode: str) -> list[Row]:
    f = cli_startup(pick(mode, full=20, quick=5, smoke=1))
    base = f["python -c pass"]
    bare = f["bare import"] + f["one request"] - base
    return [
        Row(
            "CLI start-up: `jobagentctl --version`",
            _fmt(1000 * f["--version"], " ms"),
            f"`python -c pass` {_fmt(1000 * base, ' ms')}",
            f"{f['--version'] / base:.1f}×",
            "≤ 4×",
            _verdict(f["--version"] <= 4 * base),
        ),
        Row(
            "CLI round trip: `jobagentctl heartbeat` (whole process)",
            _fmt(1000 * f["heartbeat"], " ms"),
            f"bare `import typer, httpx, pydantic_settings` + one request "
            f"{_fmt(1000 * bare, ' ms')}",
            f"{f['heartbeat'] / bare:.2f}×",
            "≤ 1.0×",
            _verdict(f["heartbeat"] <= bare),
        ),
    ]


def section_supervision(mode: str) -> list[Row]:
    share, rss, wall = supervision(pick(mode, full=60, quick=5, smoke=2))
    return [
        Row(
            f"`run` supervising `sleep` for {wall:.0f} s: CPU share / peak RSS",
            f"{100 * share:.2f} % / {rss:.0f} MB",
            "one core / 80 MB",
            f"{share:.4f}× / {rss / 80:.2f}×",
            "≤ 1 % / ≤ 80 MB",
            _verdict(share <= 0.01 and rss <= 80),
        )
    ]


SECTIONS: dict[str, Callable[[bool], list[Row]]] = {
    "cycles": section_cycles,
    "heartbeats": section_heartbeats,
    "reaper": section_reaper,
    "pickup": section_pickup,
    "recovery": section_recovery,
    "cli": section_cli,
    "supervision": section_supervision,
}


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
        rows.extend(section(args.mode))
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, PostgreSQL {psql(PG_URL, 'SHOW server_version')}; "
        f"mode {args.mode}; {time.perf_counter() - started:.0f} s.",
        "",
        "| figure | ours | comparison (same run) | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.figure} | {r.ours} | {r.comparison} | {r.ratio} | {r.target} | {r.met} |"
        for r in rows
    ]
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
