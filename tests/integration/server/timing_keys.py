"""Figure: does the answer time tell whether a key prefix exists?

Usage: python -m tests.integration.server.timing_keys [--db sqlite postgres] [--requests 400]

In-process (the app over httpx's ASGI transport, as the server tests build it), key cache on
(60 s) and warm: REQUESTS rounds, each sending ``GET …/jobs`` with a known prefix and a wrong
secret and with an unknown prefix, in a random order per round (so drift of the machine hits
both alike), then the right key. Prints the median and quartiles of each kind's answer time;
both refusals are 401 with the same body. Before the fix the wrong secret was refused from the
cache (faster), so the time told the prefix exists.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.fixtures.server_app import open_api

KINDS = ("known prefix, wrong secret", "unknown prefix", "the right key (cached)")


async def measure(database_url: str, requests: int) -> dict[str, list[float]]:
    async with open_api(database_url, key_cache_seconds=60) as api:
        prefix = api.api_key.split(".", 1)[0]
        keys = {
            KINDS[0]: f"{prefix}.{'x' * 43}",
            KINDS[1]: f"jac_000000000000.{'x' * 43}",
            KINDS[2]: api.api_key,
        }
        expected = {KINDS[0]: 401, KINDS[1]: 401, KINDS[2]: 200}
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}

        async def once(kind: str) -> float:
            started = time.perf_counter()
            r: httpx.Response = await api.call("GET", "jobs", key=keys[kind])
            elapsed = time.perf_counter() - started
            assert r.status_code == expected[kind], (kind, r.status_code)
            return elapsed

        for kind in KINDS * 20:  # warm-up: caches, plans, the first connections
            await once(kind)
        for _ in range(requests):
            refusals = list(KINDS[:2])
            random.shuffle(refusals)
            for kind in (*refusals, KINDS[2]):
                times[kind].append(await once(kind))
        return times


def _row(kind: str, samples: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return f"  {kind:28} median {median * 1e6:7.0f} µs  (quartiles {q1 * 1e6:.0f}–{q3 * 1e6:.0f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.integration.server.timing_keys")
    parser.add_argument("--db", nargs="+", default=["sqlite"], choices=["sqlite", "postgres"])
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args(argv)
    for db in args.db:
        with tempfile.TemporaryDirectory(prefix="jobagentctl-timing-") as tmp:
            if db == "sqlite":
                url = f"sqlite:///{Path(tmp) / 'timing.db'}"
                times = asyncio.run(measure(url, args.requests))
            else:
                from benchmarks.common import postgres_database

                with postgres_database("jat_timing") as url:
                    times = asyncio.run(measure(url, args.requests))
        print(f"{db}, {args.requests} interleaved rounds, key cache on:")
        for kind in KINDS:
            print(_row(kind, times[kind]))
        wrong = statistics.median(times[KINDS[0]])
        unknown = statistics.median(times[KINDS[1]])
        print(f"  wrong secret / unknown prefix: {wrong / unknown:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
