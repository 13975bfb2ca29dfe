"""`make bench` / `make bench-quick`: every figure of docs/benchmarks.md, side by side, in one run.

Usage: python -m benchmarks.run [--mode full|quick|smoke] [--only NAME ...] [--out FILE]
Prints a markdown table; ratios are computed from figures measured in this same run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from benchmarks import ceilings, direct, driver_ab, growth
from benchmarks.ceilings import Figure
from benchmarks.common import PG_URL, percentile, psql
from benchmarks.figures import (
    Row,
    http_cycles,
    pickup_latency,
    recovery,
    supervision,
    verdict,
)
from benchmarks.gate import Measured

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
    """SQLite, and PostgreSQL at 1 and 32 agents: the API against the store's calls issued
    in-process by ONE Python process (which may itself be the bottleneck: its CPU is shown).
    PostgreSQL at 8 agents, against honest ceilings, is section ``ceilings``."""
    rows: list[Row] = []
    jobs = pick(
        mode,
        full={1: 1500, 8: 5000, 32: 5000},
        quick={1: 150, 8: 400, 32: 400},
        smoke={1: 10, 8: 24, 32: 40},
    )
    for kind, concs in (("sqlite", (1, 8, 32)), ("postgres", (1, 32))):
        for conc in concs:
            http = http_cycles(kind, conc, jobs[conc])
            raw = direct.cycles(kind, conc, jobs[conc])
            ratio = http.rate / raw.rate if raw.rate else 0.0
            share = raw.client_cpu / raw.seconds if raw.seconds else 0.0
            bound = " **client-bound**" if share >= 0.8 else ""
            rows.append(
                Row(
                    f"claim+complete cycles/s, {kind}, {conc} agents (load-gen CPU "
                    f"{100 * http.loadgen_cpu / http.seconds:.0f} % of a core)",
                    _fmt(http.rate),
                    f"direct SQL, 1 process at {100 * share:.0f} % of a core{bound}: "
                    f"{_fmt(raw.rate)}",
                    f"{ratio:.2f}×",
                    "",
                    "—",
                )
            )
    return rows


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _pick_runs(figs: list[Figure]) -> tuple[list[Figure], str]:
    """The quiet runs if any (else all, marked BUSY) and the gate cell."""
    quiet = [f for f in figs if f.gate.passed]
    if quiet:
        return quiet, f"quiet {len(quiet)}/{len(figs)}"
    worst = max(f.gate.foreign_during for f in figs)
    return figs, f"**BUSY** 0/{len(figs)} (others up to {worst:.2f} cores)"


# Claim-next's batch in the batched API figure (issue 14 §3's target is stated at 8).
BATCH = 8


def section_ceilings(mode: str) -> list[Row]:
    """PostgreSQL, 8 agents, interleaved rounds, medians of the quiet runs."""
    jobs = pick(mode, full=5000, quick=1000, smoke=64)
    rounds = pick(mode, full=3, quick=2, smoke=1)
    peer_jobs = pick(mode, full=40000, quick=4000, smoke=80)
    smoke = mode == "smoke"
    project = ceilings.project_script()
    runs: dict[str, list[Figure]] = {}
    order: list[tuple[str, Callable[[], Figure]]] = [
        ("api", lambda: ceilings.api(jobs, smoke=smoke)),
        ("api batch", lambda: ceilings.api(jobs, smoke=smoke, batch=BATCH)),
        (
            "api no fast path",
            lambda: ceilings.api(jobs, smoke=smoke, settings={"fast_path": "false"}),
        ),
        ("pgbench project", lambda: ceilings.pgbench_design("project", jobs, project, smoke=smoke)),
        ("pgbench seed", lambda: ceilings.pgbench_design("seed", jobs, project, smoke=smoke)),
        ("direct", lambda: ceilings.direct(jobs, processes=4, smoke=smoke)),
    ]
    for r in range(rounds):
        rotated = order[r % len(order) :] + order[: r % len(order)]
        for name, fn in rotated:
            print(f"  round {r + 1}: {name}", file=sys.stderr, flush=True)
            runs.setdefault(name, []).append(fn())
        if r == 0:
            print("  procrastinate", file=sys.stderr, flush=True)
            runs["peer"] = [ceilings.procrastinate_script(peer_jobs, smoke=smoke)]
            runs["peer cli"] = [ceilings.procrastinate_cli(peer_jobs, smoke=smoke)]

    def med(name: str, attr: str) -> tuple[float, str]:
        figs, gate = _pick_runs(runs[name])
        return _median([getattr(f, attr) for f in figs]), gate

    api_rate, api_gate = med("api", "rate")
    api_cpu, _ = med("api", "cpu_ms_per_job")
    api_client, _ = med("api", "client_cores")
    api_busiest = max(f.busiest_client for f in runs["api"])
    batch_rate, batch_gate = med("api batch", "rate")
    batch_cpu, _ = med("api batch", "cpu_ms_per_job")
    batch_busiest = max(f.busiest_client for f in runs["api batch"])
    slow_rate, slow_gate = med("api no fast path", "rate")
    slow_cpu, _ = med("api no fast path", "cpu_ms_per_job")
    proj_rate, proj_gate = med("pgbench project", "rate")
    proj_cpu, _ = med("pgbench project", "cpu_ms_per_job")
    seed_rate, seed_gate = med("pgbench seed", "rate")
    seed_cpu, _ = med("pgbench seed", "cpu_ms_per_job")
    dir_rate, dir_gate = med("direct", "rate")
    dir_cpu, _ = med("direct", "cpu_ms_per_job")
    dir_client, _ = med("direct", "client_cores")
    dir_busiest = max(f.busiest_client for f in runs["direct"])
    peer, peer_cli = runs["peer"][0], runs["peer cli"][0]
    _, peer_gate = _pick_runs([peer])
    _, peer_cli_gate = _pick_runs([peer_cli])

    def gates(*cells: str) -> str:
        return "; ".join(cells)

    api_label = (
        f"API claim+complete cycles/s, PostgreSQL, 8 agents, 1 server (load generator: 2 "
        f"processes, {api_client:.2f} cores, busiest {100 * api_busiest:.0f} % of a core"
        f"{' **client-bound**' if api_busiest >= 0.8 else ''}; {jobs:,} jobs, median of "
        f"{rounds})"
    )
    return [
        Row(
            api_label,
            _fmt(api_rate),
            f"pgbench, seed's minimal design {_fmt(seed_rate)}",
            f"{api_rate / seed_rate:.2f}×",
            "≥ 0.5×",
            verdict(api_rate >= 0.5 * seed_rate),
            gates(api_gate, seed_gate),
        ),
        Row(
            f"API with batching: claim-next `limit` {BATCH}, each batch's last completion "
            f"claims the next batch (`claimNext`), same 8 agents (busiest load-generator "
            f"process {100 * batch_busiest:.0f} % of a core"
            f"{' **client-bound**' if batch_busiest >= 0.8 else ''}; CPU per job "
            f"{batch_cpu:.2f} ms)",
            _fmt(batch_rate),
            f"pgbench, seed's minimal design (unbatched) {_fmt(seed_rate)}",
            f"{batch_rate / seed_rate:.2f}×",
            "≥ 1.0×",
            verdict(batch_rate >= seed_rate),
            gates(batch_gate, seed_gate),
        ),
        Row(
            "The fast path (issue 9 §2): the API figure with the hot endpoints served "
            f"without framework routing vs `fast_path = false` (CPU per job {api_cpu:.2f} ms "
            f"vs {slow_cpu:.2f} ms)",
            _fmt(api_rate),
            f"framework routes only {_fmt(slow_rate)}",
            f"{api_rate / slow_rate:.2f}×",
            "",
            "—",
            gates(api_gate, slow_gate),
        ),
        Row(
            "… the same API figure against the project's own SQL in pgbench (traced from the "
            "store)",
            _fmt(api_rate),
            f"pgbench, project SQL {_fmt(proj_rate)}",
            f"{api_rate / proj_rate:.2f}×",
            "",
            "—",
            gates(api_gate, proj_gate),
        ),
        Row(
            "… and against the store's calls in-process (direct.py, 4 processes × 2 agents, "
            f"clients {dir_client:.2f} cores, busiest {100 * dir_busiest:.0f} % of a core"
            f"{' **client-bound**' if dir_busiest >= 0.8 else ', not client-bound'})",
            _fmt(api_rate),
            f"direct {_fmt(dir_rate)}",
            f"{api_rate / dir_rate:.2f}×",
            "",
            "—",
            gates(api_gate, dir_gate),
        ),
        Row(
            "PostgreSQL CPU per cycle, pgbench (its connections' backends only), 8 clients",
            f"project SQL {proj_cpu:.3f} ms ({_fmt(proj_rate)}/s)",
            f"seed design {seed_cpu:.3f} ms ({_fmt(seed_rate)}/s)",
            f"{proj_cpu / seed_cpu:.2f}×",
            "≤ 1.3×",
            verdict(proj_cpu <= 1.3 * seed_cpu),
            gates(proj_gate, seed_gate),
        ),
        Row(
            "CPU per job: our server process + its own PostgreSQL backends (by PID), 8 agents",
            f"{api_cpu:.2f} ms",
            f"procrastinate ({peer.cycles:,} jobs, worker + its backends) "
            f"{peer.cpu_ms_per_job:.2f} ms; direct {dir_cpu:.2f} ms",
            f"{api_cpu / peer.cpu_ms_per_job:.2f}× peer",
            "≤ 0.5× peer",
            verdict(api_cpu <= 0.5 * peer.cpu_ms_per_job),
            gates(api_gate, peer_gate),
        ),
        Row(
            f"jobs/s vs procrastinate (no-op jobs, concurrency 8, {peer.cycles:,} jobs, "
            "statistics gathered)",
            _fmt(api_rate),
            f"procrastinate script {_fmt(peer.rate)}; its CLI worker {_fmt(peer_cli.rate)} "
            f"({peer_cli.cpu_ms_per_job:.2f} ms CPU/job)",
            f"{api_rate / peer.rate:.2f}× / {api_rate / peer_cli.rate:.2f}×",
            "",
            "—",
            gates(api_gate, peer_gate, peer_cli_gate),
        ),
    ]


def section_scaleout(mode: str) -> list[Row]:
    """N server processes (separate ports) on one PostgreSQL, 8 agents spread
    round-robin over them by a 2-process load generator; interleaved rounds, medians."""
    jobs = pick(mode, full=4000, quick=800, smoke=48)
    rounds = pick(mode, full=2, quick=1, smoke=1)
    counts = pick(mode, full=(1, 2, 3, 4), quick=(1, 2), smoke=(1, 2))
    smoke = mode == "smoke"
    runs: dict[int, list[Figure]] = {}
    for r in range(rounds):
        order = counts if r % 2 == 0 else tuple(reversed(counts))
        for n in order:
            print(f"  round {r + 1}: {n} server(s)", file=sys.stderr, flush=True)
            runs.setdefault(n, []).append(ceilings.api(jobs, servers=n, smoke=smoke))
    base, base_gate = _pick_runs(runs[counts[0]])
    base_rate = _median([f.rate for f in base])
    rows = []
    for n in counts:
        figs, gate = _pick_runs(runs[n])
        rate = _median([f.rate for f in figs])
        server_ms = _median([1000 * (f.cpu - f.backend_cpu) / f.cycles for f in figs])
        db_ms = _median([1000 * f.backend_cpu / f.cycles for f in figs])
        client = _median([f.client_cores for f in figs])
        busiest = max(f.busiest_client for f in runs[n])
        rows.append(
            Row(
                f"scale-out: {n} server process{'es' if n > 1 else ''} on one PostgreSQL, 8 "
                f"agents round-robin (CPU per job: servers {server_ms:.2f} ms + their backends "
                f"{db_ms:.2f} ms; load generator {client:.2f} cores, busiest "
                f"{100 * busiest:.0f} %{' **client-bound**' if busiest >= 0.8 else ''})",
                _fmt(rate),
                f"1 server {_fmt(base_rate)}",
                f"{rate / base_rate:.2f}×",
                "",
                "—",
                gate if n == counts[0] else f"{gate}; 1 server {base_gate}",
            )
        )
    return rows


def section_growth(mode: str) -> list[Row]:
    """The same figures over 10k and 100k finished jobs (1M: python -m
    benchmarks.growth --rows 1000000, not part of make bench)."""
    sizes = pick(mode, full=(10_000, 100_000), quick=(10_000,), smoke=(1_000,))
    jobs = pick(mode, full=4000, quick=800, smoke=48)
    project = ceilings.project_script()
    results = []
    for rows in sizes:
        print(f"  {rows:,} rows", file=sys.stderr, flush=True)
        results.append(growth.measure(rows, jobs, project, smoke=mode == "smoke"))
    first = results[0]
    out = []
    for g in results:
        _, gate = _pick_runs([g.api])
        _, pgate = _pick_runs([g.pgbench])
        out.append(
            Row(
                f"flat as it grows: {g.rows:,} finished jobs in job / job_attempt, autovacuum on "
                f"— API cycles/s, 8 agents (pgbench project SQL {_fmt(g.pgbench.rate)}/s, "
                f"{g.pgbench.cpu_ms_per_job:.3f} ms PG CPU/cycle)",
                _fmt(g.api.rate),
                f"at {first.rows:,} rows: API {_fmt(first.api.rate)}, pgbench "
                f"{_fmt(first.pgbench.rate)}/s ({first.pgbench.cpu_ms_per_job:.3f} ms)",
                f"{g.api.rate / first.api.rate:.2f}× / "
                f"{g.pgbench.cpu_ms_per_job / first.pgbench.cpu_ms_per_job:.2f}× CPU",
                "",
                "—",
                f"api {gate}; pgbench {pgate}",
            )
        )
        _, rgate = _pick_runs([Figure("reap", 1, 1.0, 0.0, 0.0, gate=g.reap_gate)])
        out.append(
            Row(
                f"reaper pass, {g.claims:,} claims with {g.expired:,} expired, over {g.rows:,} "
                "finished jobs",
                _fmt(1000 * g.reap_busy, " ms"),
                f"empty pass {_fmt(1000 * g.reap_empty, ' ms')}",
                "",
                "≤ 20 ms",
                verdict(g.reap_busy <= 0.020),
                rgate,
            )
        )
    return out


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
            verdict(api.hot_share >= 0.95),
        ),
    ]


def section_driver(mode: str) -> list[Row]:
    """The PostgreSQL driver A/B (``driver_ab``): asyncpg, the server's, against psycopg (its
    driver before issue 24)."""
    rounds, jobs = pick(mode, full=(5, 2000), quick=(3, 500), smoke=(1, 20))
    out = []
    for layer in ("store", "connector"):
        got = driver_ab.medians(driver_ab.measure(rounds, 4, jobs, layer))
        psy, apg = got["psycopg"], got["asyncpg"]
        out.append(
            Row(
                f"driver A/B, claim+complete through the {layer}, PostgreSQL, 4 agents: "
                "Python CPU per cycle, asyncpg (psycopg)",
                _fmt(apg.cpu_ms, " ms"),
                f"psycopg {_fmt(psy.cpu_ms, ' ms')}; cycles/s {_fmt(apg.rate)} ({_fmt(psy.rate)})",
                f"{apg.cpu_ms / psy.cpu_ms:.2f}×",
                "",
                "—",
            )
        )
    return out


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
            verdict(busy <= 0.020 and empty <= 0.005),
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
                verdict(percentile(lp, 50) <= 0.020),
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
                verdict(worst <= bound),
            )
        )
    return rows


def section_cli(mode: str) -> list[Row]:
    """Issue 15 §3, through benchmarks/cli_startup.py (the cli engineer's): whole processes,
    every process once per round, medians; the floor is the stack's own import."""
    from benchmarks import cli_startup

    runs = pick(mode, full=15, quick=5, smoke=1)
    gate = ceilings.quiet_gate(mode == "smoke")
    with Measured(gate, dict):
        f = cli_startup.measure(runs)
    _, cell = _pick_runs([Figure("cli", 1, 1.0, 0.0, 0.0, gate=gate)])
    floor = f[cli_startup.FLOOR]
    base = f["python -c pass"]
    rows = [
        Row(
            "CLI start-up: `jobagentctl --version`",
            _fmt(1000 * f["--version"], " ms"),
            f"`python -c pass` {_fmt(1000 * base, ' ms')}",
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
                _fmt(1000 * f[name], " ms"),
                f"floor `import typer, httpx, pydantic_settings` {_fmt(1000 * floor, ' ms')}",
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
                _fmt(1000 * f[https], " ms"),
                f"the same over http:// {_fmt(1000 * f[plain], ' ms')}",
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
            _fmt(1000 * tab, " ms"),
            f"floor {_fmt(1000 * floor, ' ms')}",
            f"{tab / floor:.2f}×",
            "≤ 0.10 s",
            verdict(tab <= 0.10),
            cell,
        )
    )
    return rows


def section_supervision(mode: str) -> list[Row]:
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


def section_shipping(mode: str) -> list[Row]:
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


def section_logs(mode: str) -> list[Row]:
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
            _fmt(1000 * hb_loud, " ms"),
            f"without logs {_fmt(1000 * hb_quiet, ' ms')}",
            f"{hb_loud / hb_quiet:.2f}×",
            "≤ 50 ms",
            verdict(hb_loud <= 0.050),
        ),
        Row(
            f"claim pickup p50 (long-poll) under the same {running} jobs",
            _fmt(1000 * pk_loud, " ms"),
            f"without logs {_fmt(1000 * pk_quiet, ' ms')}",
            f"{pk_loud / pk_quiet:.2f}×",
            "≤ 1.10×",
            verdict(pk_loud <= 1.10 * pk_quiet),
        ),
        Row(
            "server CPU per log chunk (one line, own request)",
            _fmt(1e6 * cpu_per_chunk, " µs"),
            f"{loud.chunks:,} chunks: server CPU {_fmt(loud.server_cpu, ' s')} vs "
            f"{_fmt(quiet.server_cpu, ' s')} without",
            "",
            "",
            "—",
        ),
        Row(
            f"database bytes per log chunk ({len(LINE)}-byte line), PostgreSQL",
            _fmt(loud.db_bytes / chunks, " B"),
            f"{len(LINE)} B of output",
            f"{loud.db_bytes / chunks / len(LINE):.2f}×",
            "",
            "—",
        ),
    ]


def section_fleet(mode: str) -> list[Row]:
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


def section_peer_ctrlplane(mode: str) -> list[Row]:
    from benchmarks import peer_ctrlplane

    return peer_ctrlplane.section(mode)


def section_quiet_run(mode: str) -> list[Row]:
    from benchmarks import quiet_run

    return quiet_run.section(mode)


SECTIONS: dict[str, Callable[[str], list[Row]]] = {
    "ceilings": section_ceilings,
    "scaleout": section_scaleout,
    "growth": section_growth,
    "cycles": section_cycles,
    "heartbeats": section_heartbeats,
    "reaper": section_reaper,
    "driver": section_driver,
    "pickup": section_pickup,
    "recovery": section_recovery,
    "cli": section_cli,
    "supervision": section_supervision,
    "shipping": section_shipping,
    "logs": section_logs,
    "fleet": section_fleet,
    "quiet_run": section_quiet_run,
    "peer_ctrlplane": section_peer_ctrlplane,
}


def _commit() -> str:
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
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
        gate = ceilings.quiet_gate(args.mode == "smoke")
        with Measured(gate, dict):
            got = section(args.mode)
        _, cell = _pick_runs([Figure(name, 1, 1.0, 0.0, 0.0, gate=gate)])
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
