"""Section `ceilings` of `make bench` (`benchmarks.run`): its rows of the table."""

from __future__ import annotations

import sys
from collections.abc import Callable

from benchmarks import ceilings
from benchmarks.ceilings import Figure
from benchmarks.figures import Row, verdict
from benchmarks.sections import fmt, median, pick, pick_runs

# Claim-next's batch in the batched API figure (issue 14 §3's target is stated at 8).
BATCH = 8


def rows(mode: str) -> list[Row]:
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
        figs, gate = pick_runs(runs[name])
        return median([getattr(f, attr) for f in figs]), gate

    api_rate, api_gate = med("api", "rate")
    api_cpu, _ = med("api", "cpu_ms_per_job")
    api_server_cpu, _ = med("api", "server_cpu_ms_per_job")
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
    _, peer_gate = pick_runs([peer])
    _, peer_cli_gate = pick_runs([peer_cli])

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
            fmt(api_rate),
            f"pgbench, seed's minimal design {fmt(seed_rate)}",
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
            fmt(batch_rate),
            f"pgbench, seed's minimal design (unbatched) {fmt(seed_rate)}",
            f"{batch_rate / seed_rate:.2f}×",
            "≥ 1.0×",
            verdict(batch_rate >= seed_rate),
            gates(batch_gate, seed_gate),
        ),
        Row(
            "The fast path (issue 9 §2): the API figure with the hot endpoints served "
            f"without framework routing vs `fast_path = false` (CPU per job {api_cpu:.2f} ms "
            f"vs {slow_cpu:.2f} ms)",
            fmt(api_rate),
            f"framework routes only {fmt(slow_rate)}",
            f"{api_rate / slow_rate:.2f}×",
            "",
            "—",
            gates(api_gate, slow_gate),
        ),
        Row(
            "… the same API figure against the project's own SQL in pgbench (traced from the "
            "store)",
            fmt(api_rate),
            f"pgbench, project SQL {fmt(proj_rate)}",
            f"{api_rate / proj_rate:.2f}×",
            "",
            "—",
            gates(api_gate, proj_gate),
        ),
        Row(
            "… and against the store's calls in-process (direct.py, 4 processes × 2 agents, "
            f"clients {dir_client:.2f} cores, busiest {100 * dir_busiest:.0f} % of a core"
            f"{' **client-bound**' if dir_busiest >= 0.8 else ', not client-bound'})",
            fmt(api_rate),
            f"direct {fmt(dir_rate)}",
            f"{api_rate / dir_rate:.2f}×",
            "",
            "—",
            gates(api_gate, dir_gate),
        ),
        Row(
            "PostgreSQL CPU per cycle, pgbench (its connections' backends only), 8 clients",
            f"project SQL {proj_cpu:.3f} ms ({fmt(proj_rate)}/s)",
            f"seed design {seed_cpu:.3f} ms ({fmt(seed_rate)}/s)",
            f"{proj_cpu / seed_cpu:.2f}×",
            "≤ 1.3×",
            verdict(proj_cpu <= 1.3 * seed_cpu),
            gates(proj_gate, seed_gate),
        ),
        Row(
            "CPU per job: our server process + its own PostgreSQL backends (by PID), 8 agents "
            f"(the server process alone {api_server_cpu:.2f} ms: what the API's code moves)",
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
            fmt(api_rate),
            f"procrastinate script {fmt(peer.rate)}; its CLI worker {fmt(peer_cli.rate)} "
            f"({peer_cli.cpu_ms_per_job:.2f} ms CPU/job)",
            f"{api_rate / peer.rate:.2f}× / {api_rate / peer_cli.rate:.2f}×",
            "",
            "—",
            gates(api_gate, peer_gate, peer_cli_gate),
        ),
    ]
