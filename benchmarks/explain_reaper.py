"""Profile one reaper batch: EXPLAIN ANALYZE of the `reap` statement over 10,000 claims, 1,000
expired, with the planner's default plan and with hash joins off (docs/benchmarks.md).

Usage: python -m benchmarks.explain_reaper
"""

from __future__ import annotations

import asyncio

from benchmarks.common import postgres_database, psql
from benchmarks.direct import _FILL, _setup
from jobagentctl.server.store import open_store
from jobagentctl.server.store._sql import load_queries


async def main() -> None:
    reap = (
        load_queries("postgres")["reap"]
        .replace("%(batch_size)s", "500")
        .replace("%(max_reclaims)s", "0")
        # No outage: nobody is spared (as SqlStore.reap passes them without a grace).
        .replace("%(outage_began_ago)s", "0")
        .replace("%(outage_ended_ago)s", "1e9")
    )
    for setting in ("", "SET enable_hashjoin = off; "):
        with postgres_database() as url:
            store = open_store(url)
            _, agent = await _setup(store, 0)
            await store.close()
            psql(url, _FILL.format(claims=10000, expired=1000, agent=agent))
            for table in ("job_claim", "job", "job_attempt"):
                psql(url, f"VACUUM ANALYZE {table}")
            plan = psql(url, f"{setting}EXPLAIN (ANALYZE, TIMING OFF) {reap}")
            took = [line for line in plan.splitlines() if "Execution Time" in line]
            print(f"{setting or 'default plan; '}one 500-row batch: {took[-1].strip()}")


if __name__ == "__main__":
    asyncio.run(main())
