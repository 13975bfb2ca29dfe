"""Profile one reaper batch: EXPLAIN ANALYZE of the `reap` statement (one batch of the server's
default size) over 10,000 claims, 1,000 expired, with the planner's default plan and with hash
joins off (docs/benchmarks.md, "Flat as it grows").

Usage: python -m benchmarks.explain_reaper [--rows N] [--plan]

``--rows N``: the database first holds N finished jobs and their attempts (as in
``benchmarks.growth``); ``--plan``: print the whole plan, each node's time, not only the total.
"""

from __future__ import annotations

import argparse
import asyncio

from benchmarks.common import postgres_database, psql
from benchmarks.direct import FILL_CLAIMS, REAP_BATCH, job_id_sql, setup_store
from benchmarks.growth import load_history
from jobagentctl.models import HEARTBEAT_INTERVAL_MAX, HEARTBEAT_INTERVAL_MIN
from jobagentctl.server.store import open_store
from jobagentctl.server.store.queries import load_queries


async def main(rows: int, plan: bool) -> None:
    reap = (
        load_queries("postgres")["reap"]
        .replace("%(batch_size)s", str(REAP_BATCH))
        .replace("%(max_reclaims)s", "0")
        # No outage: nobody is spared (as SqlStore.reap passes them without a grace).
        .replace("%(outage_began_ago)s", "0")
        .replace("%(outage_ended_ago)s", "1e9")
        .replace("%(heartbeat_min)s", str(HEARTBEAT_INTERVAL_MIN))
        .replace("%(heartbeat_max)s", str(HEARTBEAT_INTERVAL_MAX))
    )
    for setting in ("", "SET enable_hashjoin = off; "):
        with postgres_database() as url:
            store = open_store(url)
            _, agent = await setup_store(store, 0)
            await store.close()
            if rows:
                load_history(url, str(agent), rows)
            job_id = job_id_sql("now()")
            psql(url, FILL_CLAIMS.format(claims=10000, expired=1000, agent=agent, job_id=job_id))
            for table in ("job_claim", "job", "job_attempt"):
                psql(url, f"VACUUM ANALYZE {table}")
            out = psql(url, f"{setting}EXPLAIN (ANALYZE, BUFFERS) {reap}")
            took = [line for line in out.splitlines() if "Execution Time" in line]
            history = f" over {rows:,} finished jobs" if rows else ""
            label = setting or "default plan; "
            print(f"{label}one {REAP_BATCH}-row batch{history}: {took[-1].strip()}")
            if plan:
                print(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=0, help="finished jobs loaded first")
    parser.add_argument("--plan", action="store_true", help="print the whole plan")
    args = parser.parse_args()
    asyncio.run(main(args.rows, args.plan))
