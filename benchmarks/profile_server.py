"""Where the server's CPU goes during the claim+complete benchmark: py-spy on the server process.

Usage: python -m benchmarks.profile_server [--jobs 6000] [--rate 250]
(needs py-spy: ``pip install py-spy``; run as a user allowed to ptrace the server)

Runs the ``ceilings`` API figure (one server, 8 agents, 2 load-generator processes) with py-spy
sampling the server, then attributes every sample to the innermost frame that belongs to a
known part (the PostgreSQL driver, our code, asyncio, the HTTP server, pydantic, JSON,
metrics, …) and prints each part's share of the busy samples, plus the share spent under the
store.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import pgbench
from benchmarks.common import Server, postgres_database
from benchmarks.workers import Workers

# First match from the innermost frame outwards wins.
PARTS = [
    ("PostgreSQL driver (Python side)", ("(psycopg/", "(psycopg_pool/", "(asyncpg/")),
    ("pydantic", ("(pydantic/", "(pydantic_core/")),
    ("JSON", ("(json/", "orjson", "(jobagentctl/server/encoding.py")),
    ("metrics", ("(prometheus_client/", "(jobagentctl/server/metrics.py")),
    (
        "HTTP server (uvicorn, httptools, starlette, fastapi)",
        ("(uvicorn/", "(httptools/", "(starlette/", "(fastapi/"),
    ),
    ("our code", ("(jobagentctl/",)),
    ("socket / selectors", ("(socket.py", "(selectors.py", "(ssl.py")),
    ("asyncio", ("(asyncio/", "uvloop")),
]


def classify(frames: list[str]) -> str:
    for frame in reversed(frames):
        for part, needles in PARTS:
            if any(n in frame for n in needles):
                return part
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--rate", type=int, default=250)
    parser.add_argument("--keep", help="also copy py-spy's folded stacks to this file")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(spy):
        raise SystemExit("py-spy is not installed: pip install py-spy")
    with postgres_database() as url, Server(url) as server, tempfile.TemporaryDirectory() as tmp:
        pgbench.seed_queue(url, server.agent, args.jobs)
        out = Path(tmp) / "server.folded"
        assert server.proc
        with Workers(
            "http", [server.url, server.path(""), server.api_key, server.agent], 2, 8
        ) as workers:
            rec = subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(server.proc.pid),
                    "--rate",
                    str(args.rate),
                    "--format",
                    "raw",
                    "--output",
                    str(out),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            result = workers.go()
            rec.send_signal(signal.SIGINT)
            rec.wait(60)
        if args.keep:
            shutil.copyfile(out, args.keep)
        counts: collections.Counter[str] = collections.Counter()
        under_store = total = 0
        for line in out.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            frames = stack.split(";")
            samples = int(n)
            total += samples
            counts[classify(frames)] += samples
            if any("(jobagentctl/server/store/" in f for f in frames):
                under_store += samples
    print(f"{result.cycles} cycles at {result.rate:,.0f}/s; {total} busy samples of the server")
    print("| part (innermost frame) | share of busy samples |")
    print("|---|---|")
    for part, n in counts.most_common():
        print(f"| {part} | {100 * n / total:.1f} % |")
    print(f"| (under jobagentctl/server/store, any depth) | {100 * under_store / total:.1f} % |")


if __name__ == "__main__":
    main()
