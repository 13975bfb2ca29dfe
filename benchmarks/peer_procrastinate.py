"""The peer: procrastinate running no-op jobs on the same PostgreSQL, as a separate process.

Usage (the database URL in BENCH_PROCRASTINATE_URL):
    python -m benchmarks.peer_procrastinate defer JOBS
    python -m benchmarks.peer_procrastinate work CONCURRENCY
    procrastinate --app=benchmarks.peer_procrastinate.app worker -c 8   # its own CLI worker

``defer`` applies procrastinate's schema and defers JOBS no-op jobs (batches of 500), then
exits. ``work`` prints ``ready``, waits for a line on stdin, runs the worker until the queue is
empty, prints one JSON line {"jobs", "seconds", "workerCpu"}, then waits for another line
before closing its connections (so the parent reads their backends' CPU while they are alive).
Run it on a database of its own. The parent side is ``benchmarks.peers``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import procrastinate

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("BENCH_PROCRASTINATE_URL", ""))
)


@app.task(name="noop")
async def noop(i: int) -> None:
    return None


async def defer(jobs: int) -> None:
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        batch = 500
        for start in range(0, jobs, batch):
            await noop.batch_defer_async(
                *({"i": i} for i in range(start, min(jobs, start + batch)))
            )


async def work(concurrency: int) -> None:
    own = app
    async with own.open_async():
        loop = asyncio.get_running_loop()
        print("ready", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
        cpu0 = os.times()
        t0 = time.perf_counter()
        await own.run_worker_async(
            concurrency=concurrency, wait=False, install_signal_handlers=False
        )
        seconds = time.perf_counter() - t0
        cpu1 = os.times()
        done = await own.connector.execute_query_one_async(
            "SELECT count(*) AS n FROM procrastinate_jobs WHERE status = 'succeeded'"
        )
        print(
            json.dumps(
                {
                    "jobs": int(done["n"]),
                    "seconds": seconds,
                    "workerCpu": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
                }
            ),
            flush=True,
        )
        await loop.run_in_executor(None, sys.stdin.readline)


def main(argv: list[str]) -> None:
    mode, n = argv
    asyncio.run(defer(int(n)) if mode == "defer" else work(int(n)))


if __name__ == "__main__":
    # Run the importable module's copy, so the app is not defined in __main__ (procrastinate
    # warns about that, and its CLI worker imports benchmarks.peer_procrastinate.app).
    from benchmarks.peer_procrastinate import main as _main

    _main(sys.argv[1:3])
