"""The peer: procrastinate running no-op jobs on the same PostgreSQL, as a separate process.

Usage: python -m benchmarks.peer_procrastinate DATABASE_URL JOBS CONCURRENCY
Prints `deferred`, waits for a line on stdin, runs the worker, then prints one JSON line
{"jobs", "seconds", "workerCpu"}. Run it on an empty database.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import procrastinate


async def main(url: str, jobs: int, concurrency: int) -> None:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop(i: int) -> None:
        return None

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        batch = 500
        for start in range(0, jobs, batch):
            await noop.batch_defer_async(
                *({"i": i} for i in range(start, min(jobs, start + batch)))
            )
        print("deferred", flush=True)
        sys.stdin.readline()
        cpu0 = os.times()
        t0 = time.perf_counter()
        await app.run_worker_async(
            concurrency=concurrency, wait=False, install_signal_handlers=False
        )
        seconds = time.perf_counter() - t0
        cpu1 = os.times()
    print(
        json.dumps(
            {
                "jobs": jobs,
                "seconds": seconds,
                "workerCpu": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
