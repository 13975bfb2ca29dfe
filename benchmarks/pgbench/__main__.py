"""The database's work per claim+complete cycle, by design.

Usage: python -m benchmarks.pgbench [--jobs 4000] [--rounds 3] [--designs ...] [--print NAME]

Runs pgbench (8 clients, prepared statements) for each design in interleaved rounds on fresh
databases seeded alike, and prints cycles/s and PostgreSQL CPU per cycle (the pgbench
connections' own backends) as medians, with each run's load gate. After every run it checks
what the design must leave behind: every job ``successful``, no claim row left, and (except for
the seed design, which keeps no audit trail) exactly one ``completed`` attempt per job.
``--print project`` prints the script traced from the store (``--print seed`` etc. the files).
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks import ceilings, pgbench
from benchmarks.ceilings import Figure
from benchmarks.common import postgres_database, psql
from benchmarks.gate import Measured, wait_quiet

DESIGNS = ["project", "reduced", "reduced+schema", "seed"]


def one(design: str, jobs: int, project: tuple[str, dict[str, str]]) -> Figure:
    per_client = max(1, jobs // ceilings.AGENTS)
    if design == "project":
        script, defines = project
    else:
        script, defines = pgbench.SCRIPTS[design].read_text(), {}
    with postgres_database() as url:
        total = per_client * ceilings.AGENTS
        ws, agent = pgbench.prepare_database(url, design, total)
        gate = wait_quiet(ceilings.GATE_WAIT)
        with Measured(gate, dict) as m:
            r = pgbench.run(url, design, script, ws, agent, ceilings.AGENTS, per_client, defines)
        m.add_ours(r.backend_cpu)
        left = psql(
            url,
            "SELECT (SELECT count(*) FROM job WHERE status <> 'successful') || ' ' || "
            "(SELECT count(*) FROM job_claim) || ' ' || "
            "(SELECT count(*) FROM job_attempt WHERE outcome = 'completed') || ' ' || "
            "(SELECT count(*) FROM job_attempt)",
        ).split()
        not_done, claims, completed, attempts = (int(x) for x in left)
        audit = design != "seed"
        if not_done or claims or (audit and (completed != total or attempts != total)):
            raise RuntimeError(
                f"{design}: {not_done} jobs not successful, {claims} claims left, "
                f"{completed}/{attempts} completed attempts of {total}"
            )
    return Figure(design, r.cycles, r.cycles / r.tps, r.backend_cpu, r.backend_cpu, gate=gate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--designs", nargs="+", choices=DESIGNS, default=DESIGNS)
    parser.add_argument("--print", dest="show", choices=DESIGNS)
    args = parser.parse_args()
    project = ceilings.project_script()
    if args.show:
        if args.show == "project":
            print(project[0])
            print("-- constants (pgbench -D):", project[1])
        else:
            print(pgbench.SCRIPTS[args.show].read_text())
        return
    runs: dict[str, list[Figure]] = {d: [] for d in args.designs}
    for r in range(args.rounds):
        order = args.designs[r % len(args.designs) :] + args.designs[: r % len(args.designs)]
        for design in order:
            runs[design].append(one(design, args.jobs, project))
    seed = runs.get("seed")
    seed_cpu = (
        statistics.median(f.cpu_ms_per_job for f in [f for f in seed if f.gate.passed] or seed)
        if seed
        else None
    )
    print("| design | cycles/s | PG CPU ms/cycle | vs seed | runs quiet | all runs' ms/cycle |")
    print("|---|---|---|---|---|---|")
    for design, figs in runs.items():
        quiet = [f for f in figs if f.gate.passed] or figs
        rate = statistics.median(f.rate for f in quiet)
        cpu = statistics.median(f.cpu_ms_per_job for f in quiet)
        ratio = f"{cpu / seed_cpu:.2f}×" if seed_cpu else ""
        every = ", ".join(f"{f.cpu_ms_per_job:.3f}" for f in figs)
        n_quiet = sum(f.gate.passed for f in figs)
        print(f"| {design} | {rate:,.0f} | {cpu:.3f} | {ratio} | {n_quiet}/{len(figs)} | {every} |")


if __name__ == "__main__":
    main()
