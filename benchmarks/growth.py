"""Flat as it grows. Throughput and the reaper's pass over a database that already
holds ROWS finished jobs (``job``) and their attempts (``job_attempt``), autovacuum on.

Usage: python -m benchmarks.growth [--rows 10000 100000 1000000] [--jobs 4000]

`make bench` runs 10k and 100k (section ``growth``); 1M rows take minutes to load and are this
separate command, not part of CI. For each size, in a database of its own: the history is
bulk-inserted (SPEC §2 columns) and analysed (as autovacuum would have by the time a real
database holds it; autovacuum stays on throughout), then a queue of JOBS jobs is seeded and run
through pgbench (the project's SQL, traced from the store) and through the API (one server,
8 agents), then 10,000 claims with 1,000 expired are added and one reaper tick is timed
(``store.reap(REAP_BATCH, 0)``: the server's default batch), then an empty tick (median of 20).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from dataclasses import dataclass

from benchmarks import ceilings, pgbench
from benchmarks.ceilings import Figure
from benchmarks.common import Server, postgres_database, psql
from benchmarks.direct import REAP_BATCH, job_id_sql, prepare_reap
from benchmarks.gate import Gate, Measured

HISTORY = """
WITH done AS (
    INSERT INTO job (id, job_agent_id, workspace_id, status, created_at, updated_at, started_at,
                     completed_at)
    SELECT {job_id}, a.id, a.workspace_id, 'successful', t.at, now(), now(), now()
    FROM job_agent AS a, generate_series(1, {rows}) AS g,
         LATERAL (SELECT now() - interval '1 day' + g * interval '1 millisecond' AS at) AS t
    WHERE a.id = '{agent}'
    RETURNING id, job_agent_id
)
INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at, ended_at, outcome)
SELECT d.id, 1, gen_random_uuid(), d.job_agent_id, now(), now(), 'completed' FROM done AS d
"""


@dataclass
class Growth:
    rows: int
    pgbench: Figure
    api: Figure
    reap_busy: float
    reap_empty: float
    reap_gate: Gate
    claims: int = 10000
    expired: int = 1000


def load_history(url: str, agent: str, rows: int, *, random_ids: bool = False) -> None:
    """``rows`` finished jobs created over the last day, with their attempts; ids as the store
    makes them (``random_ids``: as it made them before, see ``direct.job_id_sql``)."""
    job_id = job_id_sql("t.at", random=random_ids)
    psql(url, HISTORY.format(agent=agent, rows=int(rows), job_id=job_id))
    psql(url, "VACUUM ANALYZE job")
    psql(url, "VACUUM ANALYZE job_attempt")


async def _reap(url: str, claims: int, expired: int, smoke: bool) -> tuple[float, float, Gate]:
    from jobagentctl.server.store import open_store

    store = open_store(url, min_size=1, max_size=2)
    try:
        await prepare_reap(store, url, claims, expired)
        gate = ceilings.quiet_gate(smoke)
        loop = asyncio.get_running_loop()
        with Measured(gate, dict):
            t0 = loop.time()
            result = await store.reap(REAP_BATCH, 0)
            busy = loop.time() - t0
        if result.requeued != expired:
            raise RuntimeError(f"reaper requeued {result.requeued}, expected {expired}")
        empties = []
        for _ in range(20):
            t0 = loop.time()
            await store.reap(REAP_BATCH, 0)
            empties.append(loop.time() - t0)
        return busy, statistics.median(empties), gate
    finally:
        await store.close()


def measure(rows: int, jobs: int, project: tuple[str, dict[str, str]], smoke: bool) -> Growth:
    per_client = max(1, jobs // ceilings.AGENTS)
    script, defines = project
    # pgbench on the project's SQL over the grown tables.
    with postgres_database() as url:
        ws, agent = pgbench.prepare_database(url, "project", 0)
        load_history(url, agent, rows)
        pgbench.seed_queue(url, agent, per_client * ceilings.AGENTS + ceilings.AGENTS)
        gate = ceilings.quiet_gate(smoke)
        with Measured(gate, dict) as m:
            r = pgbench.run(url, "project", script, ws, agent, ceilings.AGENTS, per_client, defines)
        m.add_ours(r.backend_cpu)
        bench = Figure(
            "pgbench project", r.cycles, r.cycles / r.tps, r.backend_cpu, r.backend_cpu, gate=gate
        )
        claims, expired = (200, 20) if smoke else (10000, 1000)
        busy, empty, reap_gate = asyncio.run(_reap(url, claims, expired, smoke))
    # The API over the grown tables (a fresh database: the same history, the server's agent).
    with postgres_database() as url:
        server = Server(url).start()
        try:
            load_history(url, server.agent, rows)
        finally:
            server.stop()
        api = ceilings.api(jobs, smoke=smoke, database_url=url)
    return Growth(rows, bench, api, busy, empty, reap_gate, claims, expired)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--jobs", type=int, default=4000)
    args = parser.parse_args()
    project = ceilings.project_script()
    print(
        "| rows in job / job_attempt | pgbench project SQL cycles/s (PG ms/cycle) | API "
        "cycles/s | reaper pass 1k of 10k | empty pass | load gate |"
    )
    print("|---|---|---|---|---|---|")
    for rows in args.rows:
        print(f"… {rows:,} rows", file=sys.stderr, flush=True)
        g = measure(rows, args.jobs, project, smoke=False)
        gates = ", ".join(
            "quiet" if x.passed else f"BUSY ({x.foreign_during:.2f} cores)"
            for x in (g.pgbench.gate, g.api.gate, g.reap_gate)
        )
        print(
            f"| {rows:,} | {g.pgbench.rate:,.0f} ({g.pgbench.cpu_ms_per_job:.3f}) | "
            f"{g.api.rate:,.0f} | {1000 * g.reap_busy:.1f} ms | {1000 * g.reap_empty:.2f} ms | "
            f"{gates} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
